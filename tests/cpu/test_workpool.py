"""The loader's priority thread pool: most wanted work first, errors to the waiter, clean shutdown."""

from __future__ import annotations

import threading

import pytest

from foundry.load.threads import PriorityPool


def test_lowest_priority_first_then_submission_order() -> None:
    ran: list[str] = []
    gate = threading.Event()
    with PriorityPool(1, "test-pool") as pool:
        blocker = pool.submit((0,), gate.wait)  # holds the only thread while the rest queue up
        futures = [
            pool.submit(p, ran.append, name)
            for p, name in [((5,), "late-a"), ((1,), "first"), ((5,), "late-b"), ((2, 0), "second"), ((2, 1), "third")]
        ]
        gate.set()
        assert blocker.result(timeout=60) is True
        for f in futures:
            f.result(timeout=60)
    assert ran == ["first", "second", "third", "late-a", "late-b"]


def test_errors_reach_the_waiter_and_the_pool_goes_on() -> None:
    def boom(x: int) -> int:
        raise ValueError(f"bad {x}")

    with PriorityPool(2, "test-pool") as pool:
        failed = pool.submit((0,), boom, 3)
        with pytest.raises(ValueError, match="bad 3"):
            failed.result(timeout=60)
        assert pool.map((1,), lambda x: x * x, range(6)) == [0, 1, 4, 9, 16, 25]
        with pytest.raises(ValueError, match="bad 2"):
            pool.map((1,), lambda x: boom(x) if x == 2 else x, range(4))


def test_shutdown_runs_queued_work_then_refuses_more() -> None:
    done: list[int] = []
    pool = PriorityPool(3, "test-pool")
    names = {t.name for t in pool._threads}
    futures = [pool.submit((i % 2,), done.append, i) for i in range(50)]
    pool.shutdown()
    assert all(f.done() for f in futures) and sorted(done) == list(range(50))
    assert names == {"test-pool_0", "test-pool_1", "test-pool_2"}
    assert not any(t.is_alive() for t in pool._threads)
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit((0,), done.append, 99)
