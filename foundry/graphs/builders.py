"""LOAD's builder threads, started at process start with their heaps already paged in.

The driver allocates ~12 KB of host memory per node it builds and instantiates, from the calling
thread's malloc arena. In a fresh process those pages are new, and the first touch of each is a
page fault: 74k of them in the 0.6B decoder's LOAD, which made the driver's work take 0.165 s
instead of 0.09 s (H200, session 4). ``load_cuda_modules_and_libraries`` therefore starts the
builder threads early, in the background, and each grows its own arena by its share of what the
archive's templates will need (native ``fdy_heap_warm``); ``start_graph_builds`` then takes those
threads over. The memory is what LOAD would have allocated anyway; it is kept from being trimmed
until the LOAD that takes the threads ends, or for WARM_TTL_S if no LOAD comes (a program that
loads its graphs one by one never does). Set ``FOUNDRY_WARM_HEAP=0`` to turn this off.
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import Future

from .._native import native
from .workpool import PriorityPool

__all__ = ["Builders", "take_builders", "warm_builders"]

# Host bytes the driver allocates per template node, with headroom (measured ~12.5 KB on the H200,
# driver 580.159: 74k pages faulted for the 24k nodes of 25 templates).
WARM_BYTES_PER_NODE = 16 * 1024
WARM_MAX_BYTES_PER_THREAD = 256 << 20
WARM_TTL_S = 600.0
_NAME = "foundry-build"


class Builders:
    """A builder pool and the heap blocks its threads keep (released with the pool)."""

    def __init__(self, threads: int, warm_bytes: int = 0) -> None:
        self.threads = threads
        self.pool = PriorityPool(threads, _NAME)
        self.pid = os.getpid()
        self._keeps: list[Future[int | None]] = []
        if warm_bytes > 0:
            # One warm-up per thread: each holds the barrier until all have started, so no thread
            # takes two. A thread that never arrives (none should) only costs the others 60 s.
            barrier = threading.Barrier(threads)

            def warm() -> int | None:
                keep: int | None = native().fdy_heap_warm(warm_bytes)
                with contextlib.suppress(threading.BrokenBarrierError):
                    barrier.wait(60)
                return keep

            self._keeps = [self.pool.submit((-1,), warm) for _ in range(threads)]

    def close(self) -> None:
        """Finishes the pool's work, stops its threads and lets the heap be trimmed again."""
        self.pool.shutdown()
        lib = native()
        for f in self._keeps:
            keep = f.result() if f.exception() is None else None
            if keep:
                lib.fdy_heap_release(keep)
        self._keeps = []

    def __enter__(self) -> Builders:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_lock = threading.Lock()
_warm: Builders | None = None


def warm_builders(template_nodes: int, threads: int) -> None:
    """Starts ``threads`` builder threads for the next LOAD, each growing its heap by its share of
    ``template_nodes`` nodes' driver memory, in the background. Once per process until a LOAD
    takes them."""
    global _warm
    if os.environ.get("FOUNDRY_WARM_HEAP", "1") == "0" or template_nodes <= 0 or threads <= 0:
        return
    per_thread = min(template_nodes * WARM_BYTES_PER_NODE // threads, WARM_MAX_BYTES_PER_THREAD)
    with _lock:
        if _warm is not None and _warm.pid == os.getpid():
            return
        _warm = Builders(threads, per_thread)
        expiry = threading.Timer(WARM_TTL_S, _expire, (_warm,))
    expiry.daemon = True
    expiry.start()


def _expire(crew: Builders) -> None:
    """No LOAD took the warmed threads in time: stop them and give their heap back."""
    global _warm
    with _lock:
        if _warm is not crew:
            return
        _warm = None
    crew.close()


def take_builders(threads: int) -> Builders:
    """The warmed builders where they exist and have ``threads`` threads, else a new pool. The
    caller closes it."""
    global _warm
    with _lock:
        warm, _warm = _warm, None
    if warm is not None and warm.pid == os.getpid():
        if warm.threads == threads:
            return warm
        warm.close()
    return Builders(threads)


def _forget_in_child() -> None:
    # A forked child has none of the parent's threads: a pool inherited from it would never run.
    global _lock, _warm
    _lock = threading.Lock()
    _warm = None


os.register_at_fork(after_in_child=_forget_in_child)
