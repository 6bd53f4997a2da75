"""Tensors at fixed device addresses, without a torch extension.

LOAD hands the program output tensors that live where SAVE's did: a storage over memory the region mapped,
made from its address, viewed with the saved dtype, shape and strides. Where PyTorch lacks the call that
makes such a storage, torch.as_tensor of an object with ``__cuda_array_interface__`` does the same: made as
bytes and then viewed with the real dtype, since the interface cannot spell bfloat16.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from foundry.errors import ArchiveCorruptError, RegionStateError
from foundry.region import restored_covers
from foundry.schema import OutputSpec

__all__ = ["flatten_outputs", "output_spec", "restored_tensor", "tensor_at"]


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


# A storage over device memory that something else owns, from its address: what PyTorch itself uses for
# memory it does not allocate. Private, so looked up once, with ``__cuda_array_interface__`` (public, about
# twice the cost: 9.9 against 5.5 us a tensor, H100) where a release lacks it. Engines take thousands of
# output tensors at LOAD, on their own thread.
_STORAGE_AT = getattr(torch._C, "_construct_storage_from_data_pointer", None)


def tensor_at(spec: OutputSpec, device: torch.device | int | None = None) -> torch.Tensor:
    """A tensor viewing ``spec.nbytes`` bytes at ``spec.address`` with the saved shape, strides, dtype. Its
    storage is exactly those bytes and owns nothing (the region holds the memory)."""
    # Looked up in torch's own names only: getattr would run torch's module __getattr__, which imports the
    # submodule an archive names (torch.onnx, torch._dynamo), and an archive must not choose code to run.
    dtype = vars(torch).get(spec.dtype)
    if not isinstance(dtype, torch.dtype):
        raise ArchiveCorruptError(
            f"the archive names output dtype {spec.dtype!r:.60}, which is no dtype of torch {torch.__version__}: the "
            "graph's metadata was edited, or saved with another torch. Save the graph again with this torch."
        )
    dev = (
        torch.device("cuda", torch.cuda.current_device() if device is None else device)
        if not isinstance(device, torch.device)
        else device
    )
    itemsize = dtype.itemsize
    if spec.nbytes == 0:
        return torch.empty(spec.shape, dtype=dtype, device=dev)
    nbytes = max(spec.nbytes, itemsize)
    if _STORAGE_AT is not None:
        storage = _STORAGE_AT(spec.address, dev, nbytes)
        # An empty tensor of the dtype allocates nothing; set_ checks the view fits the storage.
        return torch.empty((0,), dtype=dtype, device=dev).set_(storage, 0, spec.shape, spec.strides)
    raw = torch.as_tensor(_DeviceBytes(spec.address, nbytes), device=dev)
    usable = nbytes // itemsize * itemsize
    return raw[:usable].view(dtype).as_strided(spec.shape, spec.strides)


def restored_tensor(address: int, nbytes: int, device: torch.device | int | None = None) -> torch.Tensor:
    """A ``uint8`` tensor of ``nbytes`` bytes at ``address``, in memory SAVE used and LOAD mapped back
    (``CUDAGraph.start_graph_builds`` maps it): for a buffer a program kept across SAVE and its graphs read,
    such as an engine's workspace, so that LOAD hands the program the very buffer SAVE had, not a new one.

    The tensor owns nothing (the region holds the memory) and nothing here allocates into it: LOAD moved the
    allocation cursor past SAVE's memory. ``RegionStateError`` where the range is not inside the memory LOAD
    mapped in this process (a LOAD that has not restored the graphs yet, or an address the archive's program
    did not hold at SAVE): the tensor would view memory that is not there, or another allocation's."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
        raise ValueError(f"restored_tensor: nbytes must be a positive int, got {nbytes!r}")
    if not restored_covers(address, nbytes):
        raise RegionStateError(
            f"restored_tensor: {nbytes} bytes at {address:#x} are not inside the memory LOAD mapped back from SAVE "
            "in this process. Call it after CUDAGraph.start_graph_builds, with a buffer that was live when SAVE saved "
            "its graphs; otherwise run SAVE again."
        )
    spec = OutputSpec(address=address, shape=(nbytes,), strides=(1,), dtype="uint8", nbytes=nbytes)
    return tensor_at(spec, device)
