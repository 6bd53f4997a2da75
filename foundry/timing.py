"""Where SAVE's and LOAD's time goes: seconds per phase, summed over the threads that ran it, each
span for a timeline, and the page faults taken in each. The benchmark reports them (foundry_bench).

Timing wraps the logic it measures (``with phases.span("extract"): ...``); the logic never carries
clocks around.
"""

from __future__ import annotations

import resource
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Phases"]


def _thread_faults() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


class Phases:
    """Seconds spent per phase, summed over the threads that ran it (thread time, not wall time:
    compared with the wall time it shows whether a phase ran in parallel), each span, for a timeline,
    and the minor page faults each phase took on its thread (the driver's first touches of fresh heap
    pages were most of a LOAD's cost before the builders' heaps were paged in: docs/DESIGN.md)."""

    def __init__(self, origin: float | None = None, keep_spans: bool = True, max_spans: int | None = None) -> None:
        self._lock = threading.Lock()
        self.origin = time.perf_counter() if origin is None else origin
        self.keep_spans = keep_spans  # off for process-long totals (SAVE's), which would only grow
        self.max_spans = max_spans  # or the first spans only, for process-long totals read as a timeline
        self.seconds: dict[str, float] = {}
        self.spans: list[tuple[str, str, float, float]] = []  # (phase, thread, start, end) from origin
        self.faults: dict[str, int] = {}
        self.counts: dict[str, int] = {}  # what a phase did, by name (bytes copied, cache hits): count()

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        """Adds the time and the page faults of the block to phase ``name`` (also when it raises)."""
        faults = _thread_faults()
        start = time.perf_counter()
        try:
            yield
        finally:
            self._add(name, start, time.perf_counter(), _thread_faults() - faults)

    def _add(self, name: str, start: float, end: float, faults: int) -> None:
        with self._lock:
            self.seconds[name] = self.seconds.get(name, 0.0) + end - start
            self.faults[name] = self.faults.get(name, 0) + faults
            if self.keep_spans and (self.max_spans is None or len(self.spans) < self.max_spans):
                self.spans.append((name, threading.current_thread().name, start - self.origin, end - self.origin))

    def count(self, name: str, n: int = 1) -> None:
        """Adds ``n`` to counter ``name`` (the benchmark reports counters beside the seconds)."""
        with self._lock:
            self.counts[name] = self.counts.get(name, 0) + n

    def reset(self, origin: float | None = None) -> None:
        with self._lock:
            self.origin = time.perf_counter() if origin is None else origin
            self.seconds = {}
            self.faults = {}
            self.counts = {}
            self.spans = []
