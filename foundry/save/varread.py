"""SAVE: reading module variables from device memory, for foundry.save.variables.

A load's variables are located once (they stay where they are while it is loaded) and read with as few
copies as their layout allows: variables less than a page apart in one copy. Every save reads the
variables of all the loads its graph uses again, with one native call for all of them (csrc/copies.c: a
handful of driver calls, not one per copy), into one buffer in which every load has a part of its own
(``Reads``: the same pages at every save), and compares each variable's bytes there with what the last
save read, so unchanged variables cost no new memory and keep their load's version (the bytes between
variables, read along with them, do not count).
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from foundry.images import ModuleVariables
from foundry.native.copies import read_device
from foundry.native.driver import module_globals
from foundry.timing import Phases

__all__ = ["Reading", "Reads", "Run", "Value", "add", "locate", "plan", "read_located", "refresh"]

_PAGE = 4096  # no GPU maps memory in smaller pages
_MAX_READ = 64 << 20  # one copy reads at most this much (plus one variable)

Run: TypeAlias = tuple[int, int, tuple[tuple[str, int, int], ...]]
"""One copy: (start, size, the variables in it as (name, address, size))."""


@dataclass(frozen=True)
class Value:
    """A variable in one load of its image: its address there and its bytes."""

    address: int
    data: bytes


@dataclass
class Reading:
    """One load's variables as the last save read them. ``runs`` plans the copies, variables less than a
    page apart read in one; they are read into the ``size`` bytes from ``base`` on of a buffer (``spans``:
    the copies as the native read takes them, (address, size, offset into the buffer) each; ``members``:
    each variable as (name, address, offset into the buffer, size)). Every save compares each variable's
    bytes there with ``values``; ``version`` goes up whenever one differs, and ``values`` are the variables
    of that version (the same objects while their bytes stay the same). The bytes between variables that a
    copy reads with them belong to no variable (the driver's own, or other data of the module) and may
    change at will: they never make a new version."""

    runs: list[Run]
    base: int
    size: int = 0
    spans: array[int] = field(default_factory=lambda: array("Q"))
    members: list[tuple[str, int, int, int]] = field(default_factory=list)
    read: bool = False  # ``values`` hold what the current plan read
    values: dict[str, Value] = field(default_factory=dict)
    version: int = 0
    # Read once alone (``refresh``): a run the driver refused was split then, so reads of many loads together
    # make no refused copy.
    proven: bool = False

    def __post_init__(self) -> None:
        self.replan(self.runs)

    def replan(self, runs: list[Run]) -> None:
        """Reads ``runs`` from now on (no more bytes than the runs planned before: the part stays)."""
        self.runs = runs
        self.spans = array("Q")
        self.members = []
        at = self.base
        for start, size, variables in runs:
            self.spans.extend((start, size, at))
            self.members += [(name, address, at + address - start, n) for name, address, n in variables]
            at += size
        self.size = at - self.base
        self.read = False


@dataclass
class Reads:
    """Every load's Reading, by registry index, and the one buffer they are read into, in which each has
    the part set aside when it was added (the buffer grows at the first save after loads were added)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    readings: dict[int, Reading] = field(default_factory=dict)
    buffer: bytearray = field(default_factory=bytearray)
    end: int = 0  # bytes set aside


def plan(located: Mapping[str, tuple[int, int]]) -> list[Run]:
    """The copies that read the variables: variables less than a page apart are read with what lies
    between them (a page holding a byte of a variable is mapped, so is the gap), at most ``_MAX_READ``
    bytes (plus one variable) a copy."""
    order = sorted(located.items(), key=lambda item: item[1][0])
    runs = []
    at = 0
    while at < len(order):
        start = order[at][1][0]
        end, last = start + order[at][1][1], at
        while last + 1 < len(order) and order[last + 1][1][0] - end < _PAGE and end - start < _MAX_READ:
            last += 1
            end = max(end, order[last][1][0] + order[last][1][1])
        runs.append(
            (start, end - start, tuple((name, address, size) for name, (address, size) in order[at : last + 1]))
        )
        at = last + 1
    return runs


def add(reads: Reads, index: int, located: Mapping[str, tuple[int, int]]) -> None:
    """Plans the reads of load ``index``'s variables (``locate``'s answer) and sets its part of the buffer
    aside; a load added before keeps its plan."""
    with reads.lock:
        if index in reads.readings:
            return
        reading = reads.readings[index] = Reading(plan(located), reads.end)
        reads.end += reading.size


def refresh(reads: Reads, indices: Iterable[int], phases: Phases | None) -> dict[int, tuple[dict[str, Value], int]]:
    """Reads the variables of the loads ``indices`` (each added before) again, with one native call; a load
    whose bytes changed gets a new version. Returns each load's values and version. A copy the driver
    refuses (a span over two of its allocations) is planned variable by variable from then on."""
    with reads.lock:
        readings = {index: reads.readings[index] for index in indices}
        if len(reads.buffer) < reads.end:  # loads were added: once for all of them, and no bytes to keep (all
            reads.buffer = bytearray(reads.end)  # a save compares is what it reads)
        together = list(readings.values())
        # A load read for the first time is read alone until none of its runs is refused: a refused copy makes
        # the native read finish one synchronous copy at a time, which, in the read of all together, would be
        # every load's copies. Read alone, it is this load's only, once.
        fresh = [reading for reading in together if not reading.proven]
        for reading in fresh:
            _read([reading], reads.buffer, phases)
            reading.proven = True
        if not (len(together) == 1 and fresh):  # else the one load's read alone was the read of all
            _read(together, reads.buffer, phases)
        out = {}
        for index, reading in readings.items():
            _compare(reading, reads.buffer, phases)
            out[index] = (reading.values, reading.version)
    return out


def _read(readings: Sequence[Reading], buffer: bytearray, phases: Phases | None) -> None:
    """Reads every reading's runs into its part of ``buffer``; a run the driver refuses is replaced by its
    variables, each read alone, and everything is read again (a refused variable raises DriverError)."""
    while True:
        spans = array("Q")
        for reading in readings:
            spans += reading.spans
        if not spans:
            return
        read = read_device(spans, buffer)
        if phases is not None:
            phases.count("variables.copies", read.calls)  # driver calls made, copies or not
            phases.count("variables.runs", len(spans) // 3)
            phases.count("variables.bytes_read", sum(spans[1::3]))
            phases.count(f"variables.reads_{read.path.name.lower()}")
            if read.fallback:
                phases.count(f"variables.fallback_{read.fallback}")
        if read.refused is None:
            return
        reading, at = _owner(readings, read.refused)
        members = reading.runs[at][2]
        if len(members) == 1:
            assert read.error is not None
            raise read.error
        alone = [(address, n, ((name, address, n),)) for name, address, n in members]
        reading.replan([*reading.runs[:at], *alone, *reading.runs[at + 1 :]])


def _owner(readings: Sequence[Reading], span: int) -> tuple[Reading, int]:
    """The reading whose runs hold span ``span`` of their spans laid end to end, and the run's index."""
    for reading in readings:
        if span < len(reading.runs):
            return reading, span
        span -= len(reading.runs)
    raise IndexError(f"span {span} past the readings' runs")


def _compare(reading: Reading, buffer: bytearray, phases: Phases | None) -> None:
    """A new version of the reading's values when a variable's bytes in ``buffer`` differ from its value
    (each compared in place, no copy: a save of an unchanged load allocates nothing)."""
    values = reading.values
    if reading.read and all(buffer.startswith(values[name].data, at) for name, _, at, _ in reading.members):
        return
    with memoryview(buffer) as view:
        reading.values = {name: Value(address, bytes(view[at : at + n])) for name, address, at, n in reading.members}
    if phases is not None:
        phases.count("variables.loads_changed")
        if reading.read:  # written since the last save read it: which variables (the benchmark shows them)
            for name, new in reading.values.items():
                if values.get(name) != new:
                    phases.count(f"variables.changed:{name}")
    reading.read = True
    reading.version += 1


def locate(handle: int, library: bool, scan: ModuleVariables) -> dict[str, tuple[int, int]]:
    """Name -> (address, size) of the image's variables in one load; a name the driver does not know is
    not in the code it loaded for this device, so no kernel of that load reads it."""
    names = list(scan.variables)
    managed = [decl.space == "managed" for decl in scan.variables.values()]
    located = module_globals(handle, library, names, managed)
    return {name: found for name, found in zip(names, located, strict=True) if found is not None and found[1]}


def read_located(located: Mapping[str, tuple[int, int]]) -> dict[str, Value]:
    """The variables' bytes, read once (a fresh load's), with one native call over the copies ``plan``
    makes; a copy the driver refuses (a span over two of its allocations) is made variable by variable."""
    reading = Reading(plan(located), 0)
    buffer = bytearray(reading.size)
    _read([reading], buffer, None)
    _compare(reading, buffer, None)
    return reading.values
