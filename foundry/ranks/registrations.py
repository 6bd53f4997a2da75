"""Peer tables: device memory a program writes with its peers' addresses after capture, which graphs read (the
engines' custom all-reduce), recorded at SAVE and written again at LOAD.

vLLM's (vllm/distributed/device_communicators/custom_all_reduce.py) is a ``CustomAllreduce`` with ``rank_data``,
``_ptr``, ``rank`` and a gloo ``group``, whose ``register_graph_buffers`` exchanges the graph inputs' IPC handles and
has the C++ open them into slots of ``MAX_RANKS`` pointers; SGLang's ``CustomAllReduceV2`` (sglang/srt/distributed/
device_communicators/custom_all_reduce_v2.py) writes rows of ``world_size`` pointers into ``graph_params`` from
the row it counts itself (``width`` and ``first`` below). SAVE's check of what the engine wrote refuses, by name,
a table laid out otherwise. A custom all-reduce captured in a graph takes its input's copies on the other ranks
from a slot of ``rank_data``, device memory the host writes:
``register_graph_buffers``, at the exit of ``CustomAllreduce.capture()``, gives each captured all-reduce one
``RankData`` (``MAX_RANKS`` pointers), in capture order after the slot ``register_buffer`` took at start-up, holding
every rank's graph input as opened in this process (its own at its rank). The other ranks' inputs are opened from
IPC handles of their allocations (Foundry's own handles for region memory, csrc/ipc.c), so they land in reservations
carved from the region. LOAD captures nothing: no registration runs, and the peers' inputs exist only once every
rank's LOAD has mapped SAVE's memory. So:

- SAVE, around ``register_graph_buffers``: reads back the slots it wrote, keeps this rank's inputs (their
  addresses, which LOAD restores) and the first slot, checks every peer pointer lies in a mapping the call opened,
  and declares those mappings the program's (``foundry.program_remaps``): LOAD neither waits for them nor maps
  memory there. A registration that does not read as expected is refused by name, before the archive is written.
- LOAD, once the graphs are installed and before their first replay: makes handles of its own inputs, exchanges
  them with the other ranks over the custom all-reduce's CPU group (every rank in the same order, as vLLM does),
  opens each distinct peer allocation once, and writes each slot.

The driver calls are foundry.native's (IPC through the interposer, whose handles of region memory are
Foundry's); tests pass a driver of their own. The engines' plugins reach this through ``foundry``'s surface
(``PeerRegistration``, ``PeerRegistrations``, ``rewrite_peer_registrations``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from foundry.errors import PeerMemoryError
from foundry.native.driver import memcpy_dtoh, memcpy_htod
from foundry.native.imports import open_imports
from foundry.native.ipc import allocation_start, ipc_handle, ipc_open
from foundry.region import program_remaps

__all__ = [
    "MAX_RANKS",
    "SLOT_BYTES",
    "Driver",
    "NativeDriver",
    "PeerRegistration",
    "PeerRegistrations",
    "rewrite_peer_registrations",
    "slot_bytes",
]

MAX_RANKS = 8  # vLLM's RankData: const void* ptrs[8] (custom_all_reduce.cuh)
SLOT_BYTES = 8 * MAX_RANKS


@dataclass(frozen=True)
class PeerRegistration:
    """One ``register_graph_buffers``: its first slot of ``rank_data`` and this rank's graph inputs, in order."""

    first_slot: int
    inputs: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"first_slot": self.first_slot, "inputs": list(self.inputs)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> PeerRegistration:
        return cls(int(doc["first_slot"]), tuple(int(a) for a in doc["inputs"]))


class Driver(Protocol):
    def read(self, address: int, n: int) -> bytes: ...
    def write(self, address: int, data: bytes) -> None: ...
    def handle(self, address: int) -> tuple[bytes, int]: ...  # the handle of its allocation's start, the offset
    def open(self, handle: bytes) -> int: ...
    def mappings(self) -> list[tuple[int, int]]: ...  # other processes' memory mapped here: (address, size)


def slot_bytes(pointers: Sequence[int], width: int = MAX_RANKS) -> bytes:
    """One slot of ``width`` pointers (vLLM's ``RankData``: ``MAX_RANKS``): the pointers by rank, zero past the
    world."""
    if len(pointers) > width:
        raise ValueError(f"{len(pointers)} ranks: the engine's table holds {width} at most a slot")
    return b"".join(p.to_bytes(8, "little") for p in [*pointers, *[0] * (width - len(pointers))])


def _slots(data: bytes, width: int) -> list[list[int]]:
    return [
        [int.from_bytes(data[at + 8 * r : at + 8 * r + 8], "little") for r in range(width)]
        for at in range(0, len(data), 8 * width)
    ]


@dataclass
class PeerRegistrations:
    """SAVE's record of one ``CustomAllreduce``'s registrations (slot 0 is ``register_buffer``'s, at start-up)."""

    rank: int
    world: int
    rank_data: int  # the device address of ``rank_data`` (the engine's table)
    next_slot: int = 1
    width: int = MAX_RANKS  # pointers a slot: vLLM's RankData; SGLang's CustomAllReduceV2 has a row of world_size
    done: list[PeerRegistration] = field(default_factory=list)
    opened: list[tuple[int, int]] = field(default_factory=list)  # by every registration: vLLM opens each once

    def around(
        self,
        register: Callable[[], None],
        count: int,
        driver: Driver | None = None,
        remaps: Callable[[int, int], None] = program_remaps,
        first: int | None = None,
    ) -> PeerRegistration:
        """Runs the engine's ``register_graph_buffers`` (``register``) for ``count`` inputs, then reads what it
        wrote; declares the peer mappings it opened with ``remaps``. ``first``: the slot it writes first, where the
        engine keeps that count itself (SGLang's ``_graph_counter``); the slot after the last one otherwise."""
        driver = driver or NativeDriver()
        before = set(driver.mappings())
        register()
        new = [m for m in driver.mappings() if m not in before]
        opened = [*self.opened, *new]
        first = self.next_slot if first is None else first
        if first < self.next_slot:
            raise PeerMemoryError(
                f"the engine's custom all-reduce registered graph inputs from slot {first}, over slots it had "
                f"registered before (up to {self.next_slot - 1}): its table cannot be rebuilt at LOAD. Start the "
                "engine with --disable-custom-all-reduce (NCCL then all-reduces inside the graphs)."
            )
        row = 8 * self.width
        slots = _slots(driver.read(self.rank_data + first * row, count * row), self.width)
        problems = []
        for i, slot in enumerate(slots):
            own = slot[self.rank]
            if any(a <= own < a + n for a, n in opened):
                problems.append(f"slot {first + i}: this rank's own input {own:#x} lies in a peer's mapping")
            for peer in (r for r in range(self.world) if r != self.rank):
                if not any(a <= slot[peer] < a + n for a, n in opened):
                    problems.append(f"slot {first + i}: rank {peer}'s input {slot[peer]:#x} is not a mapping it opened")
        if problems:
            raise PeerMemoryError(
                "the engine's custom all-reduce registered its graph buffers otherwise than Foundry reads them "
                f"({'; '.join(problems[:3])}): its registration cannot be rebuilt at LOAD. Start the engine with "
                "--disable-custom-all-reduce (NCCL then all-reduces inside the graphs)."
            )
        for address, size in new:
            remaps(address, size)
        self.opened = opened
        registration = PeerRegistration(first, tuple(slot[self.rank] for slot in slots))
        self.done.append(registration)
        self.next_slot = first + count
        return registration


def rewrite_peer_registrations(
    registrations: Sequence[PeerRegistration],
    rank: int,
    world: int,
    rank_data: int,
    exchange: Callable[[Any], list[Any]],
    driver: Driver | None = None,
    width: int = MAX_RANKS,
) -> int:
    """LOAD: writes every registration's slots again, its peers' inputs opened here; returns the slots written.
    ``exchange(value)`` gives every rank's value, by rank, and is called the same number of times on every rank
    (once per registration); ``width``: pointers a slot (``PeerRegistrations.width``)."""
    driver = driver or NativeDriver()
    opened: dict[bytes, int] = {}  # one open per distinct allocation, as vLLM's C++ keeps its ipc_handles_
    written = 0
    for reg in registrations:
        mine = [driver.handle(address) for address in reg.inputs]
        everyone = exchange([(h.hex(), off) for h, off in mine])
        if len(everyone) != world or any(len(theirs) != len(reg.inputs) for theirs in everyone):
            raise PeerMemoryError(
                f"the ranks' custom all-reduce registrations differ (counts {[len(t) for t in everyone]} for slot "
                f"{reg.first_slot}): the archive's ranks were not saved together. Save every rank again."
            )
        data = bytearray()
        for i, own in enumerate(reg.inputs):
            pointers = []
            for r in range(world):
                if r == rank:
                    pointers.append(own)
                    continue
                handle, offset = bytes.fromhex(everyone[r][i][0]), int(everyone[r][i][1])
                if handle not in opened:
                    opened[handle] = driver.open(handle)
                pointers.append(opened[handle] + offset)
            data += slot_bytes(pointers, width)
        driver.write(rank_data + reg.first_slot * 8 * width, bytes(data))
        written += len(reg.inputs)
    return written


class NativeDriver:
    """This process's device memory and IPC, through foundry.native. A rank's thousands of graph inputs lie in a
    few allocations: each allocation's handle is made once (one walk of the region's mappings a handle)."""

    def __init__(self) -> None:
        self._handles: dict[int, bytes] = {}

    def read(self, address: int, n: int) -> bytes:
        return memcpy_dtoh(address, n)

    def write(self, address: int, data: bytes) -> None:
        memcpy_htod(address, data)

    def handle(self, address: int) -> tuple[bytes, int]:
        start = allocation_start(address)
        if start not in self._handles:
            self._handles[start] = ipc_handle(start)
        return self._handles[start], address - start

    def open(self, handle: bytes) -> int:
        return ipc_open(handle)

    def mappings(self) -> list[tuple[int, int]]:
        return [(m.address, m.size) for m in open_imports().mappings]
