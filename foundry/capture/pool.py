"""The memory pool Foundry's captures share by default, one per device, and the stream they run on.

vLLM and SGLang capture every batch size's graph into one pool, so that the graphs do not each hold their own
activations; ``foundry.graph`` does the same unless it is given a pool. PyTorch drops a pool's use count to zero
when the last graph using it is reset or deleted, and then refuses (an internal assert) any capture that names
the old handle: the graphs captured into a pool are counted here, and once none is left the next capture gets a
new pool.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from foundry._state import ProcessState

__all__ = ["capture_stream", "claim_shared_pool", "release_shared_pool", "shared_pool"]


@dataclass
class _Pools:
    """Per device: the shared pool, the torch graphs captured into it, whether it has had a capture, and the
    stream captures run on."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    pools: dict[int, Any] = field(default_factory=dict)
    users: dict[int, weakref.WeakSet[Any]] = field(default_factory=dict)
    used: set[int] = field(default_factory=set)
    streams: dict[int, torch.cuda.Stream] = field(default_factory=dict)


_STATE = ProcessState("capture.pools", _Pools)


def shared_pool(device: int | None = None) -> Any:
    """The memory pool Foundry's captures share by default (one per device), as vLLM shares one."""
    dev = torch.cuda.current_device() if device is None else device
    s = _STATE.get()
    with s.lock:
        users = s.users.setdefault(dev, weakref.WeakSet())
        if dev not in s.pools or (dev in s.used and not users):
            s.pools[dev] = torch.cuda.graph_pool_handle()
            s.used.discard(dev)
        return s.pools[dev]


def claim_shared_pool(dev: int, torch_graph: Any) -> None:
    """``torch_graph`` was captured into ``dev``'s shared pool: the pool is kept while it lives."""
    s = _STATE.get()
    with s.lock:
        s.users.setdefault(dev, weakref.WeakSet()).add(torch_graph)
        s.used.add(dev)


def release_shared_pool(dev: int, torch_graph: Any) -> None:
    """``torch_graph`` was reset: it no longer counts as the pool's user."""
    s = _STATE.get()
    with s.lock:
        users = s.users.get(dev)
        if users is not None:
            users.discard(torch_graph)


def capture_stream(device: int) -> torch.cuda.Stream:
    """The stream Foundry's captures on ``device`` run on when the caller names none: one per device, made once."""
    s = _STATE.get()
    with s.lock:
        stream = s.streams.get(device)
        if stream is None:  # made only here: a torch.cuda.Stream is a driver stream
            stream = s.streams[device] = torch.cuda.Stream(device)
        return stream
