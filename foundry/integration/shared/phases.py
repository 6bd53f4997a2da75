"""The region cursor at start-up phase boundaries: SAVE records it, LOAD checks it.

Foundry's graphs read tensors at the addresses SAVE gave them. An engine allocates its persistent tensors
(input buffers, weights, attention metadata buffers, the KV cache) in a fixed order, and the region gives
each allocation the next offset, so LOAD gets SAVE's addresses as long as it makes the same allocations in
the same order. At each boundary the tracker takes the cursor and the (offset, size) of every allocation
since the last boundary; LOAD compares them with SAVE's and stops at the first phase that differs, naming it,
instead of replaying graphs over misplaced tensors.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from .backend import FoundryApi
from .errors import PhaseLayoutError
from .metadata import PhaseMark

__all__ = ["PhaseTracker", "check_phase", "process_started_at"]


def process_started_at() -> float | None:
    """When this process started, in epoch seconds (Linux: /proc), or None where that cannot be read. The
    report gives phase ends in epoch seconds too, so a parent can put every process of an engine on one
    timeline."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22, starttime: clock ticks after boot
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))  # fmt: skip
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration, IndexError):
        return None


class PhaseTracker:
    def __init__(self, api: FoundryApi) -> None:
        self._api = api
        self._next = 0  # first allocation-log entry not yet attributed to a phase
        self._since = time.perf_counter()
        self.marks: list[PhaseMark] = []
        self.seconds: dict[str, float] = {}
        self.ended_at: dict[str, float] = {}  # epoch seconds: the report places phases on a timeline

    def start(self) -> None:
        """Begins the first phase here: what the log holds so far belongs to no phase."""
        self._next = self._api.log_length()
        self._since = time.perf_counter()

    def skip(self) -> None:
        """Leaves out what was logged since the last boundary (LOAD: its restore and cursor moves)."""
        self._next = self._api.log_length()
        self._since = time.perf_counter()

    def mark(self, name: str, boundary: bool = True) -> PhaseMark:
        """Ends phase ``name`` here. With ``boundary`` the region's next small allocation then opens a granule of
        its own at the cursor (a cursor move to the cursor itself), as it does in LOAD, which moves the cursor to
        SAVE's boundary before the next phase: both runs place that phase's small allocations alike. Without it,
        the next phase's small allocations may share the granule this one left open, as natively: for a phase
        LOAD runs as SAVE did, with no cursor move of LOAD's before the next (LOAD's restore moves the cursor
        past SAVE's memory, which closes the granule)."""
        if boundary:
            self._api.boundary()
        allocations, self._next = self._api.allocations_from(self._next)
        now = time.perf_counter()
        self.seconds[name] = now - self._since
        self.ended_at[name] = time.time()
        self._since = now
        mark = PhaseMark(name, self._api.cursor(), tuple(allocations))
        self.marks.append(mark)
        return mark


def check_phase(saved: PhaseMark, here: PhaseMark) -> None:
    """Raises PhaseLayoutError when LOAD's phase made other allocations, or ended at another cursor, than SAVE's."""
    if saved.allocations != here.allocations:
        n = min(len(saved.allocations), len(here.allocations))
        first = next((i for i in range(n) if saved.allocations[i] != here.allocations[i]), n)
        had = _describe(saved.allocations, first)
        got = _describe(here.allocations, first)
        raise PhaseLayoutError(
            f"start-up phase {saved.name!r}: allocation #{first} is {got} here but was {had} in SAVE "
            f"({len(here.allocations)} allocations here, {len(saved.allocations)} in SAVE). The graphs would read "
            "tensors that are not where SAVE put them. Start LOAD with exactly SAVE's engine settings and builds; if "
            "they are the same, run SAVE again (something allocates differently from run to run)."
        )
    if saved.cursor != here.cursor:
        raise PhaseLayoutError(
            f"start-up phase {saved.name!r} ended at region offset {here.cursor:#x} here but at {saved.cursor:#x} in "
            "SAVE, with the same allocations: the region was set up differently (base, size or granularity). Use "
            "the same GPU model and Foundry build as SAVE, or run SAVE again."
        )


def _describe(allocations: tuple[tuple[int, int], ...], index: int) -> str:
    if index >= len(allocations):
        return "absent"
    offset, size = allocations[index]
    return f"{size} bytes at offset {offset:#x}"
