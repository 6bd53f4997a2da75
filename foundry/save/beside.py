"""SAVE's work beside the program's thread: reading a captured graph, hashing and syncing, all of which let
the interpreter lock go.

SAVE spends much of its time in Python (reading module variables, building metadata). The walk of a
captured graph into its record (native: foundry.save.graph.extract_beside, started at capture_end), a
record's SHA-256 (hashlib lets the lock go while it hashes a buffer of 2 KiB or more) and the sync that
makes an archive durable (``os.sync`` lets it go for the whole call) need no Python while they run, so
they run on worker threads while the program goes on, and their results are waited for where they are
first needed. Each result is the same as done in line; only when it is ready differs.

A worker needs the interpreter lock back when its call returns, which takes up to the switch
interval (5 ms) while the main thread runs Python: fine for a few large calls per graph, not for many
small ones, so small buffers are hashed in line.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from foundry._state import ProcessState

__all__ = ["IN_LINE_BYTES", "WORKERS", "beside", "done", "sha256_beside", "sync_beside", "wait_beside"]

T = TypeVar("T")

IN_LINE_BYTES = 1 << 20
"""Buffers smaller than this are hashed in line: the hash takes less than a worker's hand-back costs."""
WORKERS = 2
"""A graph's walk or a record's hash beside the sync or another hash: SAVE has no more than two in flight
(a capture waits for the walks before it, ``wait_beside``)."""


@dataclass
class _Workers:
    """The worker threads, started at the first use in a process (a forked child starts its own), and
    the work handed to them that has not ended."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    pool: ThreadPoolExecutor | None = None
    running: set[Future[Any]] = field(default_factory=set)


_STATE = ProcessState("save.beside", _Workers)


def beside(fn: Callable[[], T]) -> Future[T]:
    """``fn()`` on a worker thread; its result (or exception) comes from the Future. The worker holds
    ``fn`` (and what it holds) a moment after the Future is done: what must be let go before then,
    ``fn`` lets go itself."""
    state = _STATE.get()
    with state.lock:
        if state.pool is None:
            state.pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="foundry-save")
        future = state.pool.submit(fn)
        state.running.add(future)
    future.add_done_callback(_ended)
    return future


def _ended(future: Future[T]) -> None:
    state = _STATE.get()
    with state.lock:
        state.running.discard(future)


def wait_beside() -> None:
    """Returns once every call handed to the workers so far has ended (its errors stay in its Future)."""
    state = _STATE.get()
    with state.lock:
        running = list(state.running)
    for future in running:
        future.exception()  # nothing cancels work handed to the workers


def done(value: T) -> Future[T]:
    """A Future that holds ``value`` already."""
    out: Future[T] = Future()
    out.set_result(value)
    return out


def sha256_beside(data: bytes | bytearray | memoryview) -> Future[bytes]:
    """The SHA-256 digest of ``data``, computed on a worker when ``data`` is large. The caller must not
    change ``data`` until the result is in (SAVE hashes records, which are immutable bytes)."""
    if memoryview(data).nbytes < IN_LINE_BYTES:
        return done(hashlib.sha256(data).digest())
    return beside(lambda: hashlib.sha256(data).digest())


def sync_beside() -> Future[None]:
    """``os.sync()`` on a worker: every file written before this call is durable once the result is in."""
    return beside(os.sync)
