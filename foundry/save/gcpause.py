"""SAVE pauses CPython's cyclic collector.

SAVE builds a Python object per node (tens of thousands per decoder); the collector runs every few
hundred allocations and, in a process holding torch and a model, each run walks many live objects.
Those objects hold no cycles, so pausing it costs nothing and saves time (measured in docs/DESIGN.md).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from foundry._state import ProcessState

__all__ = ["gc_paused"]


@dataclass
class _Pause:
    """Pauses in force, by thread, and whether the collector was on before the first began."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    holders: dict[int, int] = field(default_factory=dict)
    was_enabled: bool = False


def _after_fork(parent: _Pause) -> _Pause:
    # Only the forking thread lives on in the child: pauses other threads held can never end there,
    # so the collector comes back on unless the forking thread itself is inside a pause.
    me = threading.get_ident()
    child = _Pause(holders={me: parent.holders[me]} if me in parent.holders else {}, was_enabled=parent.was_enabled)
    if not child.holders and parent.holders and parent.was_enabled:
        gc.enable()
    return child


_STATE = ProcessState("save.gc_pause", _Pause, after_fork=_after_fork)


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off inside (nested and concurrent uses included); as it was after the
    last one leaves. Also a decorator."""
    state = _STATE.get()
    me = threading.get_ident()
    with state.lock:
        if not state.holders:
            state.was_enabled = gc.isenabled()
            gc.disable()
        state.holders[me] = state.holders.get(me, 0) + 1
    try:
        yield
    finally:
        with state.lock:
            left = state.holders[me] - 1
            if left:
                state.holders[me] = left
            else:
                del state.holders[me]
            if not state.holders and state.was_enabled:
                gc.enable()
