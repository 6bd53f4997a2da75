"""CUDA IPC of device memory as the program sees it: through the interposer, whose ``cuIpcGetMemHandle`` and
``cuIpcOpenMemHandle`` are Foundry's own for region memory (csrc/ipc.c: the pages mapped into a reservation carved
from the opening process's region) and whose ``cuPointerGetAttribute`` answers an address's allocation from the
region (its start and size, as the driver would for a ``cuMemAlloc``). The calls go through ``libcuda.so.1`` as the
process loaded it, not through the real entry points ``driver`` uses, so that the hooks answer them."""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any

from foundry.errors import DriverError

__all__ = ["HANDLE_BYTES", "allocation_start", "ipc_handle", "ipc_open"]

HANDLE_BYTES = 64  # CUipcMemHandle
_RANGE_START = 11  # CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
_LAZY_PEER_ACCESS = 1  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS


class _IpcHandle(ctypes.Structure):  # passed by value
    _fields_ = [("reserved", ctypes.c_ubyte * HANDLE_BYTES)]


@cache
def _cuda() -> Any:
    return ctypes.CDLL("libcuda.so.1")


def _call(name: str, *args: Any) -> None:
    rc = getattr(_cuda(), name)(*args)
    if rc != 0:
        raise DriverError(f"{name} failed ({rc})", rc)


def allocation_start(address: int) -> int:
    """The start of the allocation ``address`` lies in."""
    start = ctypes.c_uint64()
    _call("cuPointerGetAttribute", ctypes.byref(start), ctypes.c_int(_RANGE_START), ctypes.c_uint64(address))
    return int(start.value)


def ipc_handle(address: int) -> bytes:
    """An IPC handle of the memory at ``address`` (Foundry's own for region memory)."""
    handle = _IpcHandle()
    _call("cuIpcGetMemHandle", ctypes.byref(handle), ctypes.c_uint64(address))
    return bytes(handle.reserved)


def ipc_open(handle: bytes) -> int:
    """Opens another process's memory by its IPC handle; returns where it is mapped here."""
    if len(handle) != HANDLE_BYTES:
        raise ValueError(f"an IPC handle has {HANDLE_BYTES} bytes, not {len(handle)}")
    raw = _IpcHandle()
    ctypes.memmove(raw.reserved, handle, HANDLE_BYTES)
    pointer = ctypes.c_uint64()
    _call("cuIpcOpenMemHandle_v2", ctypes.byref(pointer), raw, ctypes.c_uint(_LAZY_PEER_ACCESS))
    return int(pointer.value)
