"""libfoundry's C ABI and the CUDA driver, seen from Python, as typed functions: the allocation region
(``region``), the kernel-image registry (``registry``), the few driver calls Python makes itself
(``driver``), CUDA IPC as the program sees it (``ipc``), device memory read in many spans at once
(``copies``), the graph codec's entry points (``codec``), graph records checked and compared without parsing
them in Python (``records``) and this machine's identity (``machine``).
The library object and ctypes stay in here (``lib``): everything else in Foundry reaches native code
through this surface, and tests/cpu/test_layering.py checks that no other package imports ctypes. The
surface is the face modules themselves (``from foundry.native.region import region_set``), each with its own
``__all__``, so that no face holds more than a newcomer can keep in mind."""

from __future__ import annotations

from . import codec, copies, driver, imports, ipc, loaded, machine, records, region, registry
from ._abi import AllocKind
from ._abi import ImageFormat as NativeImageFormat
from .lib import hook_handed_out, preload_env, require_interposer

__all__ = [
    "AllocKind",
    "NativeImageFormat",
    "codec",
    "copies",
    "driver",
    "hook_handed_out",
    "imports",
    "ipc",
    "loaded",
    "machine",
    "preload_env",
    "records",
    "region",
    "registry",
    "require_interposer",
]
