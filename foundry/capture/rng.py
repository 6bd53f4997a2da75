"""Graph-safe random numbers across processes.

A captured philox kernel does not embed its seed and offset: it reads them from two device buffers
that PyTorch refills before every replay, and each replay advances the generator by the graph's
whole-graph increment. SAVE measures that increment and finds the two buffers; a loaded graph refills
them from this process's default generator before each replay, exactly as PyTorch does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from foundry.errors import CodecError
from foundry.save import Extracted, pointed_words
from foundry.schema import OutputSpec, RngSpec

from .tensors import tensor_at

__all__ = ["RngState", "probe_rng"]

# An offset no real generator state would hold by chance, for the probing replay (a multiple of 4).
_PROBE_OFFSET = 0x5EED_0FF5_E700


def _generator(device: int) -> torch.Generator:
    return torch.cuda.default_generators[device]


def _as_int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _int64_at(address: int, device: int | None = None) -> torch.Tensor:
    return tensor_at(OutputSpec(address, (1,), (1,), "int64", 8), device)


def probe_rng(
    replay: Callable[[], None],
    extracted: Extracted,
    base: int,
    live: Callable[[], Sequence[tuple[int, int]]],
    device: int,
) -> RngSpec | None:
    """Replays the graph to measure its RNG use; None when it draws no random numbers. The caller
    keeps the replays from running the graph (foundry.save.rngprobe: launches_dropped, work_disabled).
    ``live`` gives SAVE's live memory, asked for only when the graph draws random numbers.

    A graph's philox kernels read the generator's offset (and, in some PyTorch releases, its seed)
    through a pointer in their arguments, to a buffer PyTorch refills before each replay. A second
    replay runs with a distinctive generator offset; the buffer is the one pointed-to word that then
    holds it. This relies on no argument layout. The generator's offset is restored afterwards, so
    probing does not shift later random numbers.
    """
    gen = _generator(device)
    start = gen.get_offset()
    # PyTorch advances the generator on the host before it launches the graph, so the increment is
    # known without waiting for the replay to finish.
    replay()
    increment = gen.get_offset() - start
    if increment == 0:
        return None
    try:
        gen.set_offset(_PROBE_OFFSET)
        replay()
        torch.cuda.synchronize(device)
        seed = _as_int64(gen.initial_seed())
        values = pointed_words(extracted, base, live())
    finally:
        gen.set_offset(start)
    offsets = [p for p, v in values.items() if v == _PROBE_OFFSET]
    seeds = [p for p, v in values.items() if v == seed and p not in offsets]
    if len(offsets) != 1:
        raise CodecError(
            f"the graph draws random numbers (each replay advances the generator by {increment}), but Foundry found "
            f"{len(offsets)} generator offset buffers among {len(values)} pointed-to words instead of one, so LOAD "
            "could not reproduce them. Only PyTorch's default CUDA generator is supported inside saved graphs."
        )
    # A seed read through a pointer must be refilled too; a seed passed by value is baked into the
    # arguments, exactly as in a natively captured graph.
    return RngSpec(seeds[0] if len(seeds) == 1 else 0, offsets[0], increment)


class RngState:
    """Refills a loaded graph's philox seed/offset buffers before each replay."""

    def __init__(self, spec: RngSpec, device: int) -> None:
        self.increment = spec.increment
        self.device = device
        # seed_address 0: the seed is a value baked into the kernels' arguments at capture, as PyTorch
        # releases that keep only the offset on the device do; then there is no seed to refill.
        self.seed = _int64_at(spec.seed_address, device) if spec.seed_address else None
        self.offset = _int64_at(spec.offset_address, device)

    def prologue(self) -> None:
        gen = _generator(self.device)
        offset = gen.get_offset()
        if self.seed is not None:
            self.seed.fill_(_as_int64(gen.initial_seed()))
        self.offset.fill_(offset)
        gen.set_offset(offset + self.increment)
