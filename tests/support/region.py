"""Helpers shared by the region tests (tests/cpu/test_region_*.py).

Expected offsets are computed from the allocation sizes and the device's granularity by a model of the
region's placement rule (``offsets_for``), never copied from an earlier run.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import Any

from tests.support.scenarios import GRAN, scenario

AppJson = Callable[..., Any]

# The opening most region scenarios share: the driver harness and a 1 GB region at BASE.
REGION_1GB = '\ncu = Cuda()\nregion.set_allocation_region(BASE, "1GB")'


def run_in_region(app_json: AppJson, body: str, **kwargs: Any) -> Any:
    """Runs ``body`` (dedented) as a scenario after ``REGION_1GB``; returns its JSON result.

    ``body`` starts with a newline, so the scenario's code is exactly what a body spelling out
    ``cu = Cuda()`` and ``region.set_allocation_region(BASE, "1GB")`` itself would give.
    """
    return app_json(scenario(REGION_1GB + textwrap.dedent(body)), **kwargs)


SMALL_ALIGN = 512  # foundry.h's FDY_REGION_SMALL_ALIGN, spelt out: the model must not read the library


def span(n: int) -> int:
    """Bytes the region sets aside for an allocation of ``n`` bytes."""
    if n < GRAN:
        return (n + SMALL_ALIGN - 1) // SMALL_ALIGN * SMALL_ALIGN
    return (n + GRAN - 1) // GRAN * GRAN


class RegionModel:
    """The region's placement rule, in Python: an allocation of a granule or more goes to the
    granularity-aligned cursor; a smaller one to the next slot of the granule small allocations share,
    opened at the cursor when none is open or the slot does not fit, and closed (given back) with its last
    allocation."""

    def __init__(self, start: int = 0) -> None:
        self.cursor = start
        self.pack: list[int] | None = None  # [granule offset, bytes handed out]
        self.live: dict[int, int] = {}  # offset -> size

    def alloc(self, n: int) -> int:
        if n >= GRAN:
            off = self.cursor
            self.cursor += span(n)
        else:
            if self.pack is None or self.pack[1] + span(n) > GRAN:
                self.pack = [self.cursor, 0]
                self.cursor += GRAN
            off = self.pack[0] + self.pack[1]
            self.pack[1] += span(n)
        self.live[off] = n
        return off

    def free(self, off: int) -> None:
        n = self.live.pop(off)
        granule = off // GRAN * GRAN
        if n < GRAN and self.pack is not None and self.pack[0] == granule and not self._small_in(granule):
            self.pack = None

    def _small_in(self, granule: int) -> bool:
        return any(o // GRAN * GRAN == granule and n < GRAN for o, n in self.live.items())

    @property
    def mapped(self) -> int:
        """Bytes mapped for the live allocations."""
        granules = {o // GRAN for o, n in self.live.items() if n < GRAN}
        return len(granules) * GRAN + sum(span(n) for n in self.live.values() if n >= GRAN)


def offsets_for(sizes: list[int], start: int = 0) -> list[int]:
    """Where the region places allocations of these sizes, none freed (``RegionModel``)."""
    model = RegionModel(start)
    return [model.alloc(n) for n in sizes]


def mapped_for(sizes: list[int]) -> int:
    """Bytes mapped once allocations of these sizes are made, none freed."""
    model = RegionModel()
    for n in sizes:
        model.alloc(n)
    return model.mapped
