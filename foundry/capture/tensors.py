"""Tensors at fixed device addresses, without a torch extension.

LOAD hands the program output tensors that live where SAVE's did. torch.as_tensor accepts any object
with ``__cuda_array_interface__``, which gives a zero-copy tensor over memory the region mapped; it is
made as bytes and then viewed with the real dtype, since the interface cannot spell bfloat16.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from foundry.format import OutputSpec

__all__ = ["flatten_outputs", "output_spec", "tensor_at"]


def _span_bytes(t: torch.Tensor) -> int:
    if t.numel() == 0:
        return 0
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
    return (last + 1) * t.element_size()


def output_spec(t: torch.Tensor) -> OutputSpec:
    if not t.is_cuda:
        raise TypeError(f"output tensors must be CUDA tensors; got one on {t.device}")
    return OutputSpec(
        address=t.data_ptr(),
        shape=tuple(t.shape),
        strides=tuple(t.stride()),
        dtype=str(t.dtype).removeprefix("torch."),
        nbytes=_span_bytes(t),
    )


def flatten_outputs(obj: Any) -> list[torch.Tensor]:
    """Tensors in a tensor, a (nested) list/tuple or a dict, in a stable order."""
    if obj is None:
        return []
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, Mapping):
        return [t for key in obj for t in flatten_outputs(obj[key])]
    if isinstance(obj, list | tuple):
        return [t for item in obj for t in flatten_outputs(item)]
    raise TypeError(f"output_tensors must be tensors, lists, tuples or dicts of them; got {type(obj).__name__}")


class _DeviceBytes:
    """The minimal __cuda_array_interface__ (version 3) for a run of bytes."""

    def __init__(self, address: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (address, False),
            "version": 3,
            "strides": None,
        }


def tensor_at(spec: OutputSpec, device: torch.device | int | None = None) -> torch.Tensor:
    """A tensor viewing ``spec.nbytes`` bytes at ``spec.address`` with the saved shape, strides, dtype."""
    dtype = getattr(torch, spec.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"unknown dtype {spec.dtype!r} in the archive")
    dev = (
        torch.device("cuda", torch.cuda.current_device() if device is None else device)
        if not isinstance(device, torch.device)
        else device
    )
    itemsize = dtype.itemsize
    if spec.nbytes == 0:
        return torch.empty(spec.shape, dtype=dtype, device=dev)
    nbytes = max(spec.nbytes, itemsize)
    raw = torch.as_tensor(_DeviceBytes(spec.address, nbytes), device=dev)
    usable = nbytes // itemsize * itemsize
    return raw[:usable].view(dtype).as_strided(spec.shape, spec.strides)
