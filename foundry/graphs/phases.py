"""Where SAVE's and LOAD's time goes: seconds per phase, summed over the threads that ran it, and
each span for a timeline. The benchmark reports them (foundry.bench)."""

from __future__ import annotations

import threading
import time

__all__ = ["Phases"]


class Phases:
    """Seconds spent per phase, summed over the threads that ran it (thread time, not wall
    time: compared with the wall time it shows whether a phase ran in parallel), and each span, for a
    timeline."""

    def __init__(self, origin: float, keep_spans: bool = True) -> None:
        self._lock = threading.Lock()
        self.origin = origin
        self.keep_spans = keep_spans  # off for process-long totals (SAVE's), which would only grow
        self.seconds: dict[str, float] = {}
        self.spans: list[tuple[str, str, float, float]] = []  # (phase, thread, start, end) from origin

    def add(self, name: str, since: float) -> float:
        now = time.perf_counter()
        with self._lock:
            self.seconds[name] = self.seconds.get(name, 0.0) + now - since
            if self.keep_spans:
                self.spans.append((name, threading.current_thread().name, since - self.origin, now - self.origin))
        return now

    def reset(self, origin: float | None = None) -> None:
        with self._lock:
            self.origin = time.perf_counter() if origin is None else origin
            self.seconds = {}
            self.spans = []
