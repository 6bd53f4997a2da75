"""The identity of the machine this process runs on, as archives record and LOAD compares it."""

from __future__ import annotations

import sys
from functools import lru_cache

from foundry.schema import Identity
from foundry.version import __version__

from .driver import current_device, device_identity, device_location, driver_init, driver_version, visible_device

__all__ = ["current_device_place", "current_identity", "device_zero_identity"]


@lru_cache(maxsize=8)
def _device(device: int) -> tuple[str, int, tuple[int, int], int]:
    name, sms, cc = device_identity(device)
    return name, sms, cc, driver_version()


def current_identity() -> Identity:
    """GPU, driver and software stack of the current CUDA context's device."""
    return _identity(current_device())


@lru_cache(maxsize=8)
def _place(device: int) -> tuple[str, str]:
    return device_location(device)


def current_device_place() -> tuple[str, str, str]:
    """(name, PCI bus id, UUID) of the current CUDA context's device: which GPU of this machine it is."""
    device = current_device()
    return (_device(device)[0], *_place(device))


def device_zero_identity() -> Identity:
    """The identity of the first visible device, read from the driver directly: for a process with no
    CUDA context (``foundry verify``). Raises DriverError (or OSError) without a driver or a GPU."""
    driver_init()
    return _identity(visible_device(0))


def _identity(device: int) -> Identity:
    name, sms, cc, driver = _device(device)
    torch = sys.modules.get("torch")
    torch_version = str(torch.__version__) if torch is not None else None
    cuda_runtime = str(torch.version.cuda) if torch is not None and torch.version.cuda else None
    return Identity(
        gpu_name=name,
        sm_count=sms,
        compute_capability=cc,
        driver_version=driver,
        cuda_runtime_version=cuda_runtime,
        torch_version=torch_version,
        foundry_version=__version__,
    )
