"""LOAD's threads: a pool that runs the most wanted work first, and the builder threads, started at
process start with their heaps already paged in.

Priority: the loader's builders take a group's template build, then, once its members' kernels are
known, the step that makes the group ready. In a first-in-first-out pool that step queues behind every
other group's build, so the first graph a server asks for waits for nearly all of them. Here work runs
lowest priority first, in submission order among equals.

Warm heaps: the driver allocates ~12 KB of host memory per node it builds and instantiates, from the
calling thread's malloc arena. In a fresh process those pages are new, and the first touch of each is
a page fault, which nearly doubled the driver's work (docs/DESIGN.md, "Templates and background
loading"). ``load_cuda_modules_and_libraries`` therefore starts the builder threads early, in the
background, and each grows its own arena by its share of what the archive's templates will need
(native ``fdy_heap_warm``); ``start_graph_builds`` then takes those threads over. The memory is what
LOAD would have allocated anyway; it is kept from being trimmed until the LOAD that takes the threads
ends, or for WARM_TTL_S if no LOAD comes (a program that loads its graphs one by one never does). Set
``FOUNDRY_WARM_HEAP=0`` to turn this off.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

from foundry._state import ProcessState
from foundry.native.region import heap_release, heap_warm

__all__ = ["LIMITS", "Builders", "Limits", "PriorityPool", "take_builders", "warm_builders"]


@dataclass
class Limits:
    """How many threads a LOAD uses at most (the benchmark varies them to measure; a LOAD reads them
    when it starts). Builders: past four, threads mostly contend inside the driver (docs/DESIGN.md has
    the thread counts measured); warm_builders warms this many at process start. Readers: enough to
    stay ahead of the builders (a record reads and hashes in 1-2 ms); each more one takes the GIL from
    the loader thread and the builders between its reads. Image loaders: start-up splits the archive's
    images over this many threads, each loading its share into the driver in one native call (the driver
    loads images in parallel: the 0.6B decoder's 88 images took 0.053 s on four threads against 0.093 s on
    one, H100; looking their kernels up gains nothing from threads)."""

    builders: int = 4
    readers: int = 4
    image_loaders: int = 4


LIMITS = Limits()

# Host bytes the driver allocates per template node, with headroom (measured ~12.5 KB on the H200,
# driver 580.159).
WARM_BYTES_PER_NODE = 16 * 1024
WARM_MAX_BYTES_PER_THREAD = 256 << 20
WARM_TTL_S = 600.0
_NAME = "foundry-build"

T = TypeVar("T")
Priority = tuple[int, ...]


class PriorityPool:
    """``threads`` threads named ``<name>_<i>``; ``submit(priority, fn, *args)`` returns a Future."""

    def __init__(self, threads: int, name: str) -> None:
        self._heap: list[tuple[Priority, int, Future[Any], Callable[..., Any], tuple[Any, ...]]] = []
        self._cv = threading.Condition()
        self._order = itertools.count()
        self._closed = False
        self._threads = [threading.Thread(target=self._run, name=f"{name}_{i}", daemon=True) for i in range(threads)]
        for t in self._threads:
            t.start()

    def submit(self, priority: Priority, fn: Callable[..., T], *args: Any) -> Future[T]:
        future: Future[T] = Future()
        with self._cv:
            if self._closed:
                raise RuntimeError("submit() on a PriorityPool that was shut down")
            heapq.heappush(self._heap, (priority, next(self._order), future, fn, args))
            self._cv.notify()
        return future

    def map(self, priority: Priority, fn: Callable[[Any], T], items: Iterable[Any]) -> list[T]:
        """``fn`` over ``items`` at one priority; the results in order (the first error is raised)."""
        futures = [self.submit(priority, fn, item) for item in items]
        return [f.result() for f in futures]

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._heap and not self._closed:
                    self._cv.wait()
                if not self._heap:
                    return
                _, _, future, fn, args = heapq.heappop(self._heap)
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to whoever waits on the future
                future.set_exception(exc)

    def shutdown(self) -> None:
        """Runs what was submitted, then stops the threads."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        for t in self._threads:
            t.join()

    def __enter__(self) -> PriorityPool:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()


class Builders:
    """A builder pool and the heap blocks its threads keep (released with the pool)."""

    def __init__(self, threads: int, warm_bytes: int = 0) -> None:
        self.threads = threads
        self.pool = PriorityPool(threads, _NAME)
        self._keeps: list[Future[int | None]] = []
        if warm_bytes > 0:
            # One warm-up per thread: each holds the barrier until all have started, so no thread
            # takes two. A thread that never arrives (none should) only costs the others 60 s.
            barrier = threading.Barrier(threads)

            def warm() -> int | None:
                keep = heap_warm(warm_bytes)
                with contextlib.suppress(threading.BrokenBarrierError):
                    barrier.wait(60)
                return keep

            self._keeps = [self.pool.submit((-1,), warm) for _ in range(threads)]

    def close(self) -> None:
        """Finishes the pool's work, stops its threads and lets the heap be trimmed again."""
        self.pool.shutdown()
        for f in self._keeps:
            keep = f.result() if f.exception() is None else None
            if keep:
                heap_release(keep)
        self._keeps = []

    def __enter__(self) -> Builders:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class _Warm:
    """The warmed builders waiting for the next LOAD (a forked child has none of the parent's threads:
    an inherited pool would never run, so the child starts without)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    crew: Builders | None = None


_STATE = ProcessState("load.builders", _Warm)


def warm_builders(template_nodes: int, threads: int) -> None:
    """Starts ``threads`` builder threads for the next LOAD, each growing its heap by its share of
    ``template_nodes`` nodes' driver memory, in the background. Once per process until a LOAD
    takes them."""
    if os.environ.get("FOUNDRY_WARM_HEAP", "1") == "0" or template_nodes <= 0 or threads <= 0:
        return
    per_thread = min(template_nodes * WARM_BYTES_PER_NODE // threads, WARM_MAX_BYTES_PER_THREAD)
    state = _STATE.get()
    with state.lock:
        if state.crew is not None:
            return
        state.crew = crew = Builders(threads, per_thread)
    expiry = threading.Timer(WARM_TTL_S, _expire, (crew,))
    expiry.daemon = True
    expiry.start()


def _expire(crew: Builders) -> None:
    """No LOAD took the warmed threads in time: stop them and give their heap back."""
    state = _STATE.get()
    with state.lock:
        if state.crew is not crew:
            return
        state.crew = None
    crew.close()


def take_builders(threads: int) -> Builders:
    """The warmed builders where they exist and have ``threads`` threads, else a new pool. The
    caller closes it."""
    state = _STATE.get()
    with state.lock:
        warm, state.crew = state.crew, None
    if warm is not None:
        if warm.threads == threads:
            return warm
        warm.close()
    return Builders(threads)
