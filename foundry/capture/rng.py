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

_PHILOX_STATE_BYTES = 21  # seed (8), offset (8), offset_intragraph (4), captured (1)


def _generator(device: int) -> torch.Generator:
    return torch.cuda.default_generators[device]


def _as_int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _read_i64(address: int) -> int:
    return int(tensor_at(OutputSpec(address, (1,), (1,), "int64", 8)).item())


def _candidates(record: GraphRecord, base: int, size: int) -> set[tuple[int, int]]:
    """(seed pointer, offset pointer) pairs laid out like at::PhiloxCudaState with captured_ = true."""
    found: set[tuple[int, int]] = set()
    for _, node in iter_nodes(record):
        if not isinstance(node, KernelNode):
            continue
        args = node.args
        for at in range(0, len(args) - _PHILOX_STATE_BYTES + 1, 8):
            seed_ptr, offset_ptr = struct.unpack_from("<QQ", args, at)
            if args[at + 20] != 1:
                continue
            if base <= seed_ptr < base + size and base <= offset_ptr < base + size:
                found.add((seed_ptr, offset_ptr))
    return found


def probe_rng(replay: Callable[[], None], record: GraphRecord, base: int, size: int, device: int) -> RngSpec | None:
    """Replays the graph to measure its RNG use; None when it draws no random numbers.

    The generator's offset is restored afterwards, so probing does not shift later random numbers.
    """
    gen = _generator(device)
    start = gen.get_offset()
    replay()
    torch.cuda.synchronize(device)
    increment = gen.get_offset() - start
    if increment == 0:
        return None
    try:
        before = gen.get_offset()
        replay()
        torch.cuda.synchronize(device)
        seed = _as_int64(gen.initial_seed())
        verified = [
            (s, o)
            for s, o in sorted(_candidates(record, base, size))
            if _read_i64(s) == seed and _read_i64(o) == before
        ]
    finally:
        gen.set_offset(start)
    if len(verified) != 1:
        raise CodecError(
            f"the graph draws random numbers (each replay advances the generator by {increment}), but Foundry found "
            f"{len(verified)} candidate seed/offset buffers instead of one, so LOAD could not reproduce them. Only "
            "PyTorch's default CUDA generator is supported inside saved graphs."
        )
    seed_address, offset_address = verified[0]
    return RngSpec(seed_address, offset_address, increment)


class RngState:
    """Refills a loaded graph's philox seed/offset buffers before each replay."""

    def __init__(self, spec: RngSpec, device: int) -> None:
        self.increment = spec.increment
        self.device = device
        self.seed = tensor_at(OutputSpec(spec.seed_address, (1,), (1,), "int64", 8), device)
        self.offset = tensor_at(OutputSpec(spec.offset_address, (1,), (1,), "int64", 8), device)

    def prologue(self) -> None:
        gen = _generator(self.device)
        offset = gen.get_offset()
        self.seed.fill_(_as_int64(gen.initial_seed()))
        self.offset.fill_(offset)
        gen.set_offset(offset + self.increment)
