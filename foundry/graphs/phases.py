"""Where SAVE's and LOAD's time goes: seconds per phase, summed over the threads that ran it, and
each span for a timeline. The benchmark reports them (foundry.bench)."""

from __future__ import annotations

import resource
import threading
import time

__all__ = ["Phases"]


def _thread_faults() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


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
        # Minor page faults per phase: those a thread took since its previous add(). LOAD's threads
        # chain their phases, so this attributes nearly every fault; the driver's first-touch faults
        # were most of a LOAD's cost on the H200 (session 4).
        self.faults: dict[str, int] = {}
        self._last = threading.local()

    def begin(self) -> float:
        """The start of a phase on this thread, after work that is no phase's (its faults not counted)."""
        self._last.faults = _thread_faults()
        return time.perf_counter()

    def add(self, name: str, since: float) -> float:
        now = time.perf_counter()
        faults = _thread_faults()
        taken = faults - getattr(self._last, "faults", faults)
        self._last.faults = faults
        with self._lock:
            self.seconds[name] = self.seconds.get(name, 0.0) + now - since
            self.faults[name] = self.faults.get(name, 0) + taken
            if self.keep_spans:
                self.spans.append((name, threading.current_thread().name, since - self.origin, now - self.origin))
        return now

    def reset(self, origin: float | None = None) -> None:
        with self._lock:
            self.origin = time.perf_counter() if origin is None else origin
            self.seconds = {}
            self.faults = {}
            self.spans = []
        self.begin()  # faults before the reset are no phase's
