"""Graph-safe random numbers across processes.

A captured philox kernel does not embed its seed and offset: it reads them from two device buffers
that PyTorch refills before every replay, and each replay advances the generator by the graph's
whole-graph increment. SAVE measures that increment and finds the two buffers; a loaded graph refills
them from this process's default generator before each replay, exactly as PyTorch does.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

import torch

from foundry.errors import CodecError, DriverError, FoundryError
from foundry.format import GraphRecord, KernelNode, OutputSpec, RngSpec, iter_nodes
from foundry.native import memcpy_dtoh, set_nodes_enabled, work_nodes

from .tensors import tensor_at

__all__ = ["RngState", "probe_rng", "work_disabled"]

# An offset no real generator state would hold by chance, for the probing replay (a multiple of 4).
_PROBE_OFFSET = 0x5EED_0FF5_E700


def _generator(device: int) -> torch.Generator:
    return torch.cuda.default_generators[device]


def _as_int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _int64_at(address: int, device: int | None = None) -> torch.Tensor:
    return tensor_at(OutputSpec(address, (1,), (1,), "int64", 8), device)


def _pointers(record: GraphRecord, live: Sequence[tuple[int, int]], base: int) -> set[int]:
    """Every 8-byte-aligned argument word that points at 8 readable bytes of SAVE's live memory."""
    found: set[int] = set()
    for _, node in iter_nodes(record):
        if isinstance(node, KernelNode):
            args = node.args
            found.update(w for (w,) in struct.iter_unpack("<Q", args[: len(args) // 8 * 8]))
    return {p for p in found if any(base + s <= p and p + 8 <= base + s + n for s, n in live)}


def _read_words(pointers: Iterable[int]) -> dict[int, int]:
    values = {}
    for p in pointers:
        try:
            values[p] = _as_int64(int.from_bytes(memcpy_dtoh(p, 8), "little"))
        except DriverError:
            continue
    return values


@contextmanager
def work_disabled(graph: int, exec_: int) -> Iterator[None]:
    """Inside, launching ``exec_`` (instantiated from ``graph``) runs none of its kernels, copies or
    memsets: what PyTorch does on the host around a replay (advancing the generator, refilling its
    buffers) still happens. SAVE probes the generator this way, so that saving a graph never runs it:
    a replay would change the program's memory (a KV cache written, a counter advanced) and can run
    for minutes on the inputs left from capture (attention over stale sequence lengths)."""
    nodes = work_nodes(graph)
    try:
        set_nodes_enabled(exec_, nodes, False)  # inside: a failure part-way still switches all back on
        yield
    finally:
        try:
            set_nodes_enabled(exec_, nodes, True)
        except DriverError as exc:
            raise FoundryError(
                f"the graph's work could not be switched back on after SAVE probed its random numbers ({exc}); "
                "do not replay it: capture it again"
            ) from exc


def probe_rng(
    replay: Callable[[], None], record: GraphRecord, base: int, live: Sequence[tuple[int, int]], device: int
) -> RngSpec | None:
    """Replays the graph to measure its RNG use; None when it draws no random numbers. The caller
    makes the replays do no work on the GPU (``work_disabled``).

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
        values = _read_words(_pointers(record, live, base))
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
