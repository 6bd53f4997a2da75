"""The fake vLLM's compile cache (tests/support/fakevllm.py), as vLLM 0.26 keeps it with torch 2.10 and newer
(vllm/compilation/decorators.py): ``vllm.envs`` reads its switches from the environment when asked, and the
compiled model's first forward loads its AOT artifact from
``$VLLM_CACHE_ROOT/torch_compile_cache/torch_aot_compile/<hash>/rank_0_0/model`` (the hash of its configuration
and settings, two of them paths below the home: ``aot_hash``), or compiles and writes it
there, after pointing Inductor's cache into that folder (``TORCHINDUCTOR_CACHE_DIR``, process-wide). Inductor's
kernel goes through Triton's cache (tests/support/faketriton.py) where the fake Triton is in place."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["aot_forward", "aot_hash", "envs_module"]

_DEFAULTS = {"VLLM_USE_AOT_COMPILE": "1", "VLLM_USE_MEGA_AOT_ARTIFACT": "0", "VLLM_USE_STANDALONE_COMPILE": "1"}
# vLLM's settings that are paths derived from the home and XDG folders unless set, and that its compile key holds
# (vllm/envs.py: compile_factors() leaves VLLM_CACHE_ROOT out, not these): (XDG variable, default below the home,
# the path below that)
_PATH_FACTORS = {
    "VLLM_CONFIG_ROOT": ("XDG_CONFIG_HOME", ".config", ("vllm",)),
    "VLLM_XLA_CACHE_PATH": ("XDG_CACHE_HOME", ".cache", ("vllm", "xla_cache")),
}


def _path_factor(name: str) -> str:
    xdg, default, below = _PATH_FACTORS[name]
    base = os.environ.get(xdg) or os.path.join("~", default)
    return os.path.expanduser(os.environ.get(name) or os.path.join(base, *below))


def aot_hash() -> str:
    """The key vLLM gives the compiled model here: of the configuration (the same in SAVE and LOAD) and of its
    environment settings, the two paths among them included."""
    return hashlib.sha256(repr(sorted((n, _path_factor(n)) for n in _PATH_FACTORS)).encode()).hexdigest()


def envs_module() -> ModuleType:
    """``vllm.envs``: each variable read from the environment when asked, as vLLM's module does."""

    def getattr_(name: str) -> Any:
        if name == "VLLM_CACHE_ROOT":
            return os.path.expanduser(os.environ.get(name, os.path.join("~", ".cache", "vllm")))
        if name in _PATH_FACTORS:
            return _path_factor(name)
        if name in _DEFAULTS:
            return os.environ.get(name, _DEFAULTS[name]) == "1"
        raise AttributeError(name)

    module = ModuleType("vllm.envs")
    module.__dict__["__getattr__"] = getattr_
    return module


def aot_forward(trace: Any) -> None:
    """The compiled model's first forward: the AOT artifact loaded, or compiled and saved."""
    envs = sys.modules["vllm.envs"]
    folder = Path(envs.VLLM_CACHE_ROOT) / "torch_compile_cache" / "torch_aot_compile" / aot_hash()
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
