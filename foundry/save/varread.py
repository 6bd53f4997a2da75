"""SAVE: reading module variables from device memory, for foundry.save.variables.

A load's variables are located once (they stay where they are while it is loaded) and read with as few
copies as their layout allows: variables less than a page apart in one copy. Every save reads them again
into the same buffer and compares it with what the last save read, so unchanged bytes cost no new memory
and keep their version.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from foundry.errors import DriverError
from foundry.format import ModuleVariables
from foundry.native import memcpy_dtoh, memcpy_dtoh_into, module_global
from foundry.timing import Phases

__all__ = ["Reading", "Value", "locate", "plan", "read_located", "refresh"]

_PAGE = 4096  # no GPU maps memory in smaller pages
_MAX_READ = 64 << 20  # one copy reads at most this much (plus one variable)


@dataclass(frozen=True)
class Value:
    """A variable in one load of its image: its address there and its bytes."""

    address: int
    data: bytes


@dataclass
class Reading:
    """One load's variables as the last save read them. ``runs`` plans the copies: (start, size, the
    variables in it as (name, address, size)), variables less than a page apart read in one copy.
    Every save copies them again into ``scratch`` (the same buffer each time: no fresh pages) and
    compares it with ``last``; ``version`` goes up whenever the bytes differ, and ``values`` are the
    variables of that version (the same objects while the bytes stay the same)."""

    runs: list[tuple[int, int, tuple[tuple[str, int, int], ...]]]
    scratch: bytearray
    lock: threading.Lock = field(default_factory=threading.Lock)
    last: bytes | None = None
    values: dict[str, Value] = field(default_factory=dict)
    version: int = 0


def plan(located: Mapping[str, tuple[int, int]]) -> list[tuple[int, int, tuple[tuple[str, int, int], ...]]]:
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


def refresh(reading: Reading, phases: Phases | None) -> None:
    """Reads the load's variables again into its scratch buffer; a new version when the bytes changed.
    A copy the driver refuses (a span over two of its allocations) is planned variable by variable
    from then on."""
    offset = 0
    for i, (start, size, members) in enumerate(reading.runs):
        try:
            memcpy_dtoh_into(reading.scratch, offset, start, size)
        except DriverError:
            if len(members) == 1:
                raise
            reading.runs[i : i + 1] = [(address, n, ((name, address, n),)) for name, address, n in members]
            reading.scratch = bytearray(sum(n for _, n, _ in reading.runs))
            reading.last = None
            refresh(reading, phases)
            return
        offset += size
    if phases is not None:
        phases.count("variables.copies", len(reading.runs))
        phases.count("variables.bytes_read", offset)
    if reading.last is not None and reading.scratch == reading.last:
        return
    last = reading.last = bytes(reading.scratch)
    values: dict[str, Value] = {}
    offset = 0
    for start, size, members in reading.runs:
        for name, address, n in members:
            values[name] = Value(address, last[offset + address - start : offset + address - start + n])
        offset += size
    reading.values = values
    reading.version += 1
    if phases is not None:
        phases.count("variables.loads_changed")


def locate(handle: int, library: bool, scan: ModuleVariables) -> dict[str, tuple[int, int]]:
    """Name -> (address, size) of the image's variables in one load; a name the driver does not know is
    not in the code it loaded for this device, so no kernel of that load reads it."""
    out = {}
    for name, decl in scan.variables.items():
        found = module_global(handle, name, library, decl.space == "managed")
        if found is not None and found[1]:
            out[name] = found
    return out


def read_located(located: Mapping[str, tuple[int, int]]) -> dict[str, Value]:
    """The variables' bytes, read once (a fresh load's), in the copies ``plan`` makes; a copy the
    driver refuses (a span over two of its allocations) is made variable by variable."""
    out: dict[str, Value] = {}
    for start, size, members in plan(located):
        try:
            data = memcpy_dtoh(start, size)
        except DriverError:
            if len(members) == 1:
                raise
            data = b""
        for name, address, n in members:
            value = data[address - start : address - start + n] if data else memcpy_dtoh(address, n)
            out[name] = Value(address, value)
    return out
