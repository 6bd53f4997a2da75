"""The shared objects loaded into this process, from the dynamic linker's own list (``dl_iterate_phdr``): what
an engine has ``dlopen``ed (its JIT modules among them), read without the kernel. ``/proc/self/maps`` says the
same at a cost that grows with every mapping: an engine's process maps tens of thousands of regions, and
reading its map while it served took 2 s (SGLang's scheduler, H200)."""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

__all__ = ["loaded_shared_objects"]


class _PhdrInfo(ctypes.Structure):
    # The leading fields of glibc's struct dl_phdr_info (<link.h>): the object's load address and its name, as
    # given to dlopen; the rest is not read.
    _fields_ = [("dlpi_addr", ctypes.c_void_p), ("dlpi_name", ctypes.c_char_p)]


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_PhdrInfo), ctypes.c_size_t, ctypes.c_void_p)


@functools.cache
def _iterate() -> Any:
    """The C library's ``dl_iterate_phdr``, typed; None where it has none."""
    try:
        iterate = ctypes.CDLL(None).dl_iterate_phdr
    except (AttributeError, OSError):
        return None
    iterate.argtypes = [_CALLBACK, ctypes.c_void_p]
    iterate.restype = ctypes.c_int
    return iterate


def loaded_shared_objects(prefixes: tuple[str, ...] = ("/",)) -> list[str] | None:
    """The names (as loaded: the path given to ``dlopen``) of the shared objects in this process that start with
    one of ``prefixes``, in load order; None where the C library has no ``dl_iterate_phdr``."""
    iterate = _iterate()
    if iterate is None:
        return None
    wanted = tuple(os.fsencode(p) for p in prefixes)
    names: list[str] = []

    def one(info: ctypes._Pointer[_PhdrInfo], size: int, data: int | None) -> int:
        del size, data
        name = info.contents.dlpi_name
        if name and name.startswith(wanted):
            names.append(os.fsdecode(name))
        return 0

    iterate(_CALLBACK(one), None)
    return names
