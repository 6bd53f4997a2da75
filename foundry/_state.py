"""Everything Foundry keeps for the life of a process, registered in one place.

Each owner declares its state once, at import, as ``ProcessState(name, factory)``: one object (a
dataclass with its own lock) holding all of that owner's caches and bookkeeping. ``states()`` lists
every piece, ``reset_all()`` drops them all (tests use it to start from a fresh process's state), and
a forked child gets fresh state too, as a new process would: the parent's threads, its CUDA handles
(a child cannot use the parent's CUDA context) and locks held by other threads at the fork are not
the child's. An owner whose state stays valid in the child (a configured key, the parse of a file)
passes ``after_fork``, which makes the child's copy from the parent's.

Immutable facts memoized where they are looked up (the loaded library, driver entry points, a
device's name) are not state in this sense: they never change in a process and survive a fork.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["ProcessState", "reset_all", "states"]

T = TypeVar("T")

_registry_lock = threading.Lock()
_registry: dict[str, ProcessState[object]] = {}


class ProcessState(Generic[T]):
    """One owner's process-wide state, created on first use by ``factory``."""

    def __init__(self, name: str, factory: Callable[[], T], after_fork: Callable[[T], T] | None = None) -> None:
        self.name = name
        self._factory = factory
        self._after_fork = after_fork
        self._value: T | None = None
        self._lock = threading.Lock()
        with _registry_lock:
            if name in _registry:
                raise ValueError(f"process state {name!r} is declared twice")
            _registry[name] = self  # type: ignore[assignment]  # the registry holds every T

    def get(self) -> T:
        value = self._value
        if value is None:
            with self._lock:
                if self._value is None:
                    self._value = self._factory()
                value = self._value
        return value

    @property
    def created(self) -> bool:
        """Whether anything used this state since the process (or the last reset) began."""
        return self._value is not None

    def reset(self) -> None:
        """Drops the state; the next ``get()`` creates it afresh. Threads still holding the old
        object keep using it, so tests reset between scenarios, not in the middle of one."""
        with self._lock:
            self._value = None

    def _in_forked_child(self) -> None:
        self._lock = threading.Lock()
        value = self._value
        self._value = self._after_fork(value) if value is not None and self._after_fork is not None else None


def states() -> dict[str, ProcessState[object]]:
    """Every piece of process-wide state, by name."""
    with _registry_lock:
        return dict(_registry)


def reset_all() -> None:
    """Drops every piece of process-wide state (see ``ProcessState.reset``)."""
    for state in states().values():
        state.reset()


def _after_fork_in_child() -> None:
    global _registry_lock
    _registry_lock = threading.Lock()
    for state in _registry.values():
        state._in_forked_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
