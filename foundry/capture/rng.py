"""Graph-safe random numbers across processes.

A captured philox kernel does not embed its seed and offset: it reads them from two device buffers
that PyTorch refills before every replay, and each replay advances the generator by the graph's
whole-graph increment. SAVE measures that increment and finds the two buffers; a loaded graph refills
them from this process's default generator before each replay, exactly as PyTorch does.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import torch

from ..archive import GraphRecord, KernelNode, OutputSpec, RngSpec, iter_nodes
from ..errors import CodecError
from .tensors import tensor_at

__all__ = ["RngState", "probe_rng"]

# at::PhiloxCudaState as a kernel argument: seed (a value, or in some PyTorch releases a pointer),
# the offset pointer at +8, the intra-graph offset (u32) at +16 and `captured_` (bool) at +20.
_PHILOX_STATE_BYTES = 21
# An offset no real generator state would hold by chance, for the probing replay (a multiple of 4).
_PROBE_OFFSET = 0x5EED_0FF5_E700


def _generator(device: int) -> torch.Generator:
    return torch.cuda.default_generators[device]


def _as_int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _int64_at(address: int, device: int | None = None) -> torch.Tensor:
    return tensor_at(OutputSpec(address, (1,), (1,), "int64", 8), device)


def _read_i64(address: int) -> int:
    return int(_int64_at(address).item())


def _candidates(record: GraphRecord, base: int, size: int) -> set[tuple[int, int]]:
    """(seed pointer or 0, offset pointer) of every argument laid out like a captured PhiloxCudaState."""
    found: set[tuple[int, int]] = set()
    for _, node in iter_nodes(record):
        if not isinstance(node, KernelNode):
            continue
        args = node.args
        for at in range(0, len(args) - _PHILOX_STATE_BYTES + 1, 8):
            if args[at + 20] != 1:
                continue
            seed_word, offset_ptr = struct.unpack_from("<QQ", args, at)
            if base <= offset_ptr < base + size:
                found.add((seed_word if base <= seed_word < base + size else 0, offset_ptr))
    return found


def probe_rng(replay: Callable[[], None], record: GraphRecord, base: int, size: int, device: int) -> RngSpec | None:
    """Replays the graph to measure its RNG use; None when it draws no random numbers.

    A second replay runs with a distinctive generator offset, and the offset buffer is the one
    candidate that then holds it. The generator's offset is restored afterwards, so probing does not
    shift later random numbers.
    """
    gen = _generator(device)
    start = gen.get_offset()
    replay()
    torch.cuda.synchronize(device)
    increment = gen.get_offset() - start
    if increment == 0:
        return None
    try:
        gen.set_offset(_PROBE_OFFSET)
        replay()
        torch.cuda.synchronize(device)
        seed = _as_int64(gen.initial_seed())
        verified = {
            (s, o)
            for s, o in _candidates(record, base, size)
            if _read_i64(o) == _PROBE_OFFSET and (s == 0 or _read_i64(s) == seed)
        }
    finally:
        gen.set_offset(start)
    offsets = {o for _, o in verified}
    if len(offsets) != 1:
        raise CodecError(
            f"the graph draws random numbers (each replay advances the generator by {increment}), but Foundry found "
            f"{len(offsets)} generator offset buffers instead of one, so LOAD could not reproduce them. Only "
            "PyTorch's default CUDA generator is supported inside saved graphs."
        )
    seed_address = max(s for s, _ in verified)
    return RngSpec(seed_address, offsets.pop(), increment)


class RngState:
    """Refills a loaded graph's philox seed/offset buffers before each replay."""

    def __init__(self, spec: RngSpec, device: int) -> None:
        self.increment = spec.increment
        self.device = device
        # seed_address 0: the seed is a value baked into the kernels' arguments at capture, as PyTorch
        # releases that keep only the offset on the device do; then there is no seed to refill.
        self.seed = (
            tensor_at(OutputSpec(spec.seed_address, (1,), (1,), "int64", 8), device) if spec.seed_address else None
        )
        self.offset = tensor_at(OutputSpec(spec.offset_address, (1,), (1,), "int64", 8), device)

    def prologue(self) -> None:
        gen = _generator(self.device)
        offset = gen.get_offset()
        if self.seed is not None:
            self.seed.fill_(_as_int64(gen.initial_seed()))
        self.offset.fill_(offset)
        gen.set_offset(offset + self.increment)
