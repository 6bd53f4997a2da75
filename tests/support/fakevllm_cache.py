"""The fake vLLM's compile cache (tests/support/fakevllm.py), as vLLM 0.26 keeps it with torch 2.10 and newer
(vllm/compilation/decorators.py): ``vllm.envs`` reads its switches from the environment when asked, and the
compiled model's first forward loads its AOT artifact from
``$VLLM_CACHE_ROOT/torch_compile_cache/torch_aot_compile/<hash>/rank_0_0/model``, or compiles and writes it
there, after pointing Inductor's cache into that folder (``TORCHINDUCTOR_CACHE_DIR``, process-wide). Inductor's
kernel goes through Triton's cache (tests/support/faketriton.py) where the fake Triton is in place."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["AOT_HASH", "aot_forward", "envs_module"]

AOT_HASH = "0f" * 32  # the hash vLLM derives from the configuration: the same in SAVE and LOAD
_DEFAULTS = {"VLLM_USE_AOT_COMPILE": "1", "VLLM_USE_MEGA_AOT_ARTIFACT": "0", "VLLM_USE_STANDALONE_COMPILE": "1"}


def envs_module() -> ModuleType:
    """``vllm.envs``: each variable read from the environment when asked, as vLLM's module does."""

    def getattr_(name: str) -> Any:
        if name == "VLLM_CACHE_ROOT":
            return os.path.expanduser(os.environ.get(name, os.path.join("~", ".cache", "vllm")))
        if name in _DEFAULTS:
            return os.environ.get(name, _DEFAULTS[name]) == "1"
        raise AttributeError(name)

    module = ModuleType("vllm.envs")
    module.__dict__["__getattr__"] = getattr_
    return module


def aot_forward(trace: Any) -> None:
    """The compiled model's first forward: the AOT artifact loaded, or compiled and saved."""
    envs = sys.modules["vllm.envs"]
    folder = Path(envs.VLLM_CACHE_ROOT) / "torch_compile_cache" / "torch_aot_compile" / AOT_HASH
    inductor = folder / "inductor_cache"
    inductor.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(inductor)
    artifact = folder / "rank_0_0" / "model"
    if "triton.runtime.cache" in sys.modules:
        from tests.support.faketriton import jit

        trace(f"triton:{jit('triton_poi_fused_add', 'inductor kernel')[0]}")
    if artifact.is_file():
        trace("aot_loaded")
        return
    artifact.parent.mkdir(parents=True, exist_ok=True)
    artifact.write_bytes(b"compiled model")
    (inductor / "fxgraph.bin").write_bytes(b"inductor's own cache entry")
    trace("aot_compiled")
