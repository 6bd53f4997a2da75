"""The tensor of the fake engines (tests/support/fakevllm.py, fakesglang.py): bytes at a device address, with
torch's attribute names. Under the stand-in Foundry (fakefoundry.py) the address is a fake region's and nothing
reads it; under the stand-in torch (faketorch.py), which makes this class its ``torch.Tensor``, the address is
memory the fake driver allocated, and Foundry saves and loads the tensor as it would a torch tensor."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class FakeDtype:
    name: str
    itemsize: int

    def __str__(self) -> str:
        return f"torch.{self.name}"  # as torch prints it: Foundry saves str(dtype) without the prefix


UINT8 = FakeDtype("uint8", 1)
INT64 = FakeDtype("int64", 8)
FLOAT32 = FakeDtype("float32", 4)
DTYPES = (UINT8, FakeDtype("int32", 4), INT64, FLOAT32, FakeDtype("bfloat16", 2))


@dataclass
class FakeTensor:
    """``nbytes`` bytes at ``address``; a byte tensor unless ``dtype`` says otherwise, as vLLM's workspace
    buffers are. ``dims`` and ``strides`` (in elements) default to one contiguous dimension."""

    address: int
    nbytes: int = 0
    dtype: FakeDtype = UINT8
    dims: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None

    is_cuda = True
    device = "cuda:0"

    def data_ptr(self) -> int:
        return self.address

    @property
    def shape(self) -> tuple[int, ...]:
        return self.dims if self.dims is not None else (self.nbytes // self.dtype.itemsize,)

    def stride(self) -> tuple[int, ...]:
        if self.strides is not None:
            return self.strides
        out, step = [], 1
        for size in reversed(self.shape):
            out.append(step)
            step *= size
        return tuple(reversed(out))

    def numel(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count

    def element_size(self) -> int:
        return self.dtype.itemsize

    # what foundry.capture.tensors builds a loaded output tensor with
    def __getitem__(self, part: slice) -> FakeTensor:
        start, stop, step = part.indices(self.nbytes // self.dtype.itemsize)
        assert step == 1, "the stand-in tensor slices contiguously only"
        size = self.dtype.itemsize
        return FakeTensor(self.address + start * size, (stop - start) * size, self.dtype)

    def view(self, dtype: FakeDtype) -> FakeTensor:
        return FakeTensor(self.address, self.nbytes, dtype)

    def as_strided(self, shape: Any, strides: Any) -> FakeTensor:
        return dataclasses.replace(self, dims=tuple(shape), strides=tuple(strides))


class EngineDevice(Protocol):
    """What the fake engines allocate with and run their model's layers on: the stand-in Foundry's region
    (fakefoundry.FakeFoundry, whose kernels do nothing) or the fake driver (faketorch.DeviceMemory)."""

    def allocate(self, nbytes: int) -> FakeTensor: ...
    def compute(self, out: FakeTensor, a: FakeTensor, b: FakeTensor) -> None: ...
    def copy(self, dst: FakeTensor, src: FakeTensor) -> None: ...
