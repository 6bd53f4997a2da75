"""A stand-in for SGLang 0.5.17's JIT modules built through tvm-ffi (sglang/kernels/jit/utils/compile.py,
``load_jit``), for CPU tests of the engine caches: the module's folder in ``TVM_FFI_CACHE_DIR`` (default
``~/.cache/tvm-ffi``) named as SGLang names it, the shared object loaded without building where the folder holds
it, else "built" (written) there; either way it is loaded into the process with ``dlopen``, as tvm-ffi loads it,
so that it is in the dynamic linker's list. The module is a copy of a real shared object (ctypes' own extension,
which every Python with ctypes has), never initialised. ``unload`` closes each (each test's, at its end)."""

from __future__ import annotations

import _ctypes
import ctypes
import os
import shutil
from pathlib import Path

__all__ = ["folder", "load_jit", "unload"]

_LOADED: list[ctypes.CDLL] = []


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
        shutil.copyfile(_ctypes.__file__, so)
        outcome = "built"
    _LOADED.append(ctypes.CDLL(str(so)))
    return outcome


def unload() -> None:
    while _LOADED:
        _ctypes.dlclose(_LOADED.pop()._handle)
