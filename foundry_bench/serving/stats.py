"""The serving benchmarks' figures: tokens compared between processes, and a steady-state measurement of two
engines asked in turn (alternating which goes first), summarized by medians, spreads and paired ratios."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

__all__ = ["alternate", "compare_tokens", "summary"]

SIDES = ("native", "load")


def compare_tokens(reference: list[list[list[int]]], other: list[list[list[int]]]) -> dict[str, Any]:
    """Per request (one per batch size), how many sequences are identical and the first that is not."""
    per = []
    for ref, got in zip(reference, other, strict=False):
        same = sum(a == b for a, b in zip(ref, got, strict=False))
        first = next((i for i, (a, b) in enumerate(zip(ref, got, strict=False)) if a != b), None)
        per.append({"batch": len(ref), "identical": same, "of": len(ref), "first_diff": first})
    identical = len(reference) == len(other) and all(p["identical"] == p["of"] for p in per)
    return {"identical": identical, "requests": per}


def alternate(ask: dict[str, Callable[[], float]], reps: int, deadline: float | None = None) -> dict[str, list[float]]:
    """Each side of ``ask`` (native and LOAD) once to warm up (the first call after start-up is not steady
    state), then ``reps`` rounds of one value from each side, native first in even rounds and LOAD first in
    odd ones, so that neither always runs on the machine the other just left. With a ``deadline``
    (time.perf_counter()), a round is started only when one more, as long as the longest so far, ends before
    it; the first round always runs."""
    for side in SIDES:
        ask[side]()
    values: dict[str, list[float]] = {side: [] for side in SIDES}
    longest = 0.0
    for rep in range(reps):
        if rep and deadline is not None and time.perf_counter() + longest > deadline:
            break
        t = time.perf_counter()
        for side in SIDES if rep % 2 == 0 else SIDES[::-1]:
            values[side].append(ask[side]())
        longest = max(longest, time.perf_counter() - t)
    return values


def summary(values: dict[str, list[float]]) -> dict[str, Any]:
    """Medians, the spread of each side ((max - min) / median, and the interquartile range / median, which
    one stray repetition does not move), and LOAD's median over native's. Repetition i of both sides ran
    back to back, so their ratios are paired too: the median of the paired ratios is the other estimate."""
    med = {k: statistics.median(v) for k, v in values.items() if v}
    spread = {k: (max(v) - min(v)) / statistics.median(v) for k, v in values.items() if v}
    iqr = {k: _iqr(v) / statistics.median(v) for k, v in values.items() if len(v) >= 4}
    ratio = med["load"] / med["native"] if med.get("native") and "load" in med else None
    pairs = [b / a for a, b in zip(values.get("native", []), values.get("load", []), strict=False) if a]
    return {
        "median": med,
        "spread": spread,
        "iqr": iqr,
        "load_over_native": ratio,
        "paired_ratio_median": statistics.median(pairs) if pairs else None,
        "reps": min((len(v) for v in values.values()), default=0),
        "values": values,
    }


def _iqr(values: list[float]) -> float:
    q = statistics.quantiles(values, n=4)
    return q[2] - q[0]
