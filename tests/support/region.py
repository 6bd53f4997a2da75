"""Helpers shared by the region tests (tests/cpu/test_region_*.py).

Expected offsets are computed from the allocation sizes and the device's granularity (a monotonic
cursor, each allocation rounded up), never copied from an earlier run.
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


def span(n: int) -> int:
    return (n + GRAN - 1) // GRAN * GRAN


def offsets_for(sizes: list[int], start: int = 0) -> list[int]:
    """Where a monotonic, granularity-aligned cursor places allocations of these sizes."""
    out, cursor = [], start
    for n in sizes:
        out.append(cursor)
        cursor += span(n)
    return out
