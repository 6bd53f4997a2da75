"""The shared objects loaded into this process, from the dynamic linker's own list (``dl_iterate_phdr``): what
an engine has ``dlopen``ed (its JIT modules among them), read without the kernel. ``/proc/self/maps`` says the
same at a cost that grows with every mapping: an engine's process maps tens of thousands of regions, and
reading its map while it served took 2 s (SGLang's scheduler, H200).

The walk is libfoundry's (``fdy_loaded_objects``), one foreign call made without the GIL. Walking it from
Python, a ctypes callback per object, takes the GIL back once per object; while the engine's main thread keeps
the GIL busy, each of those waits out a switch interval, and a few hundred objects took a second (SGLang's
scheduler serving, H200, cfddf09): a JIT module built by a request was not seen before the engine stopped."""

from __future__ import annotations

import ctypes
import os

from ..errors import DriverError
from .lib import native

__all__ = ["loaded_shared_objects"]

_FIRST_CAP = 1 << 16  # bytes of names asked for first; a list that needs more is read again at its size


def loaded_shared_objects(prefixes: tuple[str, ...] = ("/",)) -> list[str] | None:
    """The names (as loaded: the path given to ``dlopen``) of the shared objects in this process that start with
    one of ``prefixes``, in load order; None where libfoundry cannot be loaded here."""
    try:
        lib = native()
    except (DriverError, OSError):
        return None
    wanted = b"".join(os.fsencode(p) + b"\0" for p in prefixes if p)
    cap = _FIRST_CAP
    while True:
        out = ctypes.create_string_buffer(cap)
        need = int(lib.fdy_loaded_objects(wanted, len(wanted), out, cap))
        if need <= cap:
            break
        cap = need + 4096  # a module loaded between the two reads: room for it
    return [os.fsdecode(name) for name in out.raw[:need].split(b"\0")[:-1]]
