"""A stand-in for SGLang 0.5.17's JIT modules built through tvm-ffi (sglang/kernels/jit/utils/compile.py,
``load_jit``), for CPU tests of the engine caches: the module's folder in ``TVM_FFI_CACHE_DIR`` (default
``~/.cache/tvm-ffi``) named as SGLang names it, the shared object loaded without building where the folder holds
it, else "built" (written) there; either way it is mapped into the process, as ``dlopen`` maps it, so that it
shows in ``/proc/self/maps``. ``unload`` ends every mapping (each test's, at its end)."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

__all__ = ["folder", "load_jit", "unload"]

_MAPPED: list[tuple[mmap.mmap, int]] = []


def folder(module: str) -> Path:
    """Where SGLang looks for (and builds) ``module``, as this process's switches say."""
    cache = Path(os.environ.get("TVM_FFI_CACHE_DIR", "~/.cache/tvm-ffi")).expanduser()
    return cache / f"sgl_kernel_jit_{module}__arch_sm90__tvmffi_0.1.11"


def load_jit(module: str) -> str:
    """ "hit" where the module's shared object was there, "built" where it was written now."""
    so = folder(module) / f"sgl_kernel_jit_{module}.so"
    outcome = "hit"
    if not so.is_file():
        so.parent.mkdir(parents=True, exist_ok=True)
        so.write_bytes(b"\x7fELF fake module " + module.encode() + b"\0" * 4096)
        outcome = "built"
    fd = os.open(so, os.O_RDONLY)
    _MAPPED.append((mmap.mmap(fd, 0, prot=mmap.PROT_READ), fd))
    return outcome


def unload() -> None:
    while _MAPPED:
        mapping, fd = _MAPPED.pop()
        mapping.close()
        os.close(fd)
