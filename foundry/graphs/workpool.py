"""A thread pool that runs the most wanted work first.

The loader's builders take a group's template build, then, once its members' kernels are known,
the step that makes the group ready. In a first-in-first-out pool that step queues behind every
other group's build, so the first graph a server asks for waits for nearly all of them (measured:
LOAD first 0.22 s of 0.24 s with 4 builders). Here work runs lowest priority first, in submission
order among equals.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["PriorityPool"]

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
