"""LOAD's builder threads started at process start: their heaps really are paged in ahead, the next
LOAD takes them over, and they never outlive what they were started for (closed, forked)."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from foundry.load import threads as builders
from foundry.native.lib import native
from tests.support.subproc import run_json

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc arenas and RUSAGE_THREAD")


# On a new thread of a fresh process: optionally warm its heap, then allocate and write 24 MiB in 3 KiB pieces
# (the driver's pattern, roughly) and count that thread's minor page faults for it. A fresh process because a new
# thread takes the arena of a thread that ended before it where there is one, its pages mapped already: how many
# there are in this process depends on what ran before and on when those threads ended.
FAULTS = """
import ctypes, json, resource, threading
from foundry.native.lib import native
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
out = []

def run():
    keep = native().fdy_heap_warm(WARM_BYTES) if WARM_BYTES else None
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    blocks = [libc.malloc(3072) for _ in range(8192)]
    for b in blocks:
        ctypes.memset(b, 7, 3072)
    out.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
    for b in blocks:
        libc.free(b)
    if keep:
        native().fdy_heap_release(keep)

t = threading.Thread(target=run)
t.start()
t.join()
print(json.dumps(out[0]))
"""


def _faults_for_driver_like_work(warm_bytes: int) -> int:
    return int(run_json(f"WARM_BYTES = {warm_bytes}\n" + FAULTS))


def test_a_warmed_heap_takes_the_driver_like_allocations_without_page_faults() -> None:
    cold = _faults_for_driver_like_work(0)
    warm = _faults_for_driver_like_work(48 << 20)
    # 24 MiB is 6144 pages; a cold thread faults nearly all of them in (measured ~6.2k), a warmed one
    # a handful (its bookkeeping).
    assert cold > 4000, cold
    assert warm < cold // 10, (warm, cold)


def test_nothing_to_warm_returns_no_block() -> None:
    assert not native().fdy_heap_warm(0)
    assert not native().fdy_heap_warm(1000)  # less than two blocks


def test_the_next_load_takes_the_warmed_threads_once() -> None:
    builders.warm_builders(1000, 3)
    crew = builders.take_builders(3)
    try:
        assert crew.threads == 3
        keeps = [f.result(timeout=30) for f in crew._keeps]
        assert len(keeps) == 3 and all(keeps)  # one warm-up ran on each of the three threads
        assert crew.pool.map((0,), lambda x: x + 1, range(5)) == [1, 2, 3, 4, 5]
        again = builders.take_builders(3)  # taken once: a second LOAD gets a pool of its own
        assert again is not crew and again._keeps == []
        again.close()
    finally:
        crew.close()
    assert crew._keeps == []


def test_a_load_with_another_thread_count_gets_a_fresh_pool() -> None:
    builders.warm_builders(1000, 2)
    with builders.take_builders(4) as crew:
        assert crew.threads == 4 and crew._keeps == []
    assert builders._STATE.get().crew is None


def test_turned_off_or_empty_archives_start_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    builders.warm_builders(0, 4)
    assert builders._STATE.get().crew is None
    monkeypatch.setenv("FOUNDRY_WARM_HEAP", "0")
    builders.warm_builders(5000, 4)
    assert builders._STATE.get().crew is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_does_not_inherit_the_parents_threads() -> None:
    builders.warm_builders(1000, 2)
    pid = os.fork()
    if pid == 0:  # the child: the parent's pool has no threads here; a LOAD must get a working one
        code = 1
        try:
            with builders.take_builders(2) as crew:
                code = 0 if crew._keeps == [] and crew.pool.map((0,), abs, [-3]) == [3] else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    builders.take_builders(2).close()


class _Timer:
    """threading.Timer as warm_builders arms it, recorded into ``armed`` when started, and never fired."""

    def __init__(self, armed: list[_Timer], interval: float, function: Any, args: Any) -> None:
        self.armed, self.interval, self.function, self.args, self.daemon = armed, interval, function, args, False

    def start(self) -> None:
        self.armed.append(self)


def test_warmed_threads_no_load_takes_stop_and_give_their_heap_back(monkeypatch: pytest.MonkeyPatch) -> None:
    # The expiry is run here when the test says, not by a timer racing the test: what it does is the same.
    armed: list[_Timer] = []
    monkeypatch.setattr(builders.threading, "Timer", lambda *a: _Timer(armed, *a))
    builders.warm_builders(1000, 2)
    crew = builders._STATE.get().crew
    assert crew is not None and [t.interval for t in armed] == [builders.WARM_TTL_S]
    armed[0].function(*armed[0].args)  # the TTL is up and no LOAD took them
    assert builders._STATE.get().crew is None and crew._keeps == []
    assert all(not t.is_alive() for t in crew.pool._threads)
    with builders.take_builders(2) as fresh:  # and the next LOAD still gets builders
        assert fresh is not crew and fresh.pool.map((0,), abs, [-1]) == [1]
