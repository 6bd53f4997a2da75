"""The fresh-node runs of a serving benchmark: a process started as on a machine that never ran the engine,
every cache folder the engine, torch, Triton and CUDA read empty, and the archive shipped as one artifact
(SAVE packs the engine's caches, signed, and LOAD copies them out: foundry/integration/shared/caches.py).

Each fresh run gets a new temporary folder holding its home and every cache folder, which the benchmark
removes after the run; the warm caches of the other runs are never touched.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

__all__ = ["FRESH_MODES", "FRESH_VARIABLES", "fresh_env", "fresh_root", "signing_key"]

FRESH_MODES = ("native_fresh", "load_fresh")
# Where the engines and their compilers keep what they build once per machine, each pointed into the new folder:
# the home (~/.cache, ~/.triton, ~/.nv: CUDA's PTX cache), XDG's cache home, vLLM's cache root (its torch.compile
# artifacts), Triton's kernels, Inductor's cache (by default in /tmp, outside the home) and CUDA's JIT cache.
FRESH_VARIABLES = {
    "HOME": "home",
    "XDG_CACHE_HOME": "cache",
    "VLLM_CACHE_ROOT": "cache/vllm",
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "CUDA_CACHE_PATH": "nv",
}


def fresh_root(mode: str) -> Path:
    """A new, empty folder for one fresh run."""
    return Path(tempfile.mkdtemp(prefix=f"foundry-bench-{mode}-"))


def fresh_env(root: Path) -> dict[str, str]:
    """The variables that point every cache folder into ``root`` (only the home is made: the engines make the
    rest as they would on a new machine)."""
    (root / FRESH_VARIABLES["HOME"]).mkdir(exist_ok=True)
    return {name: str(root / sub) for name, sub in FRESH_VARIABLES.items()}


def signing_key(out: Path) -> Path:
    """The key the benchmark signs its archive with when SAVE packs caches (LOAD uses them only signed): made
    once in the benchmark's folder, readable by its owner only."""
    path = out / "foundry-bench.key"
    if not path.is_file():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
    return path
