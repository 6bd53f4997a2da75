"""The adapter's state in one process: created by the first hook that runs in a worker, never in the
front-end, and afresh in a forked child (a fork inherits the parent's objects, not its CUDA state)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from ..shared.backend import FoundryApi, PublicFoundryApi
from ..shared.errors import IntegrationError
from ..shared.metadata import Fingerprint, GraphEntry
from ..shared.phases import PhaseTracker
from .config import PluginConfig
from .metadata import VllmMetadata

__all__ = ["Session", "current", "install", "reset"]


def _no_isolation() -> AbstractContextManager[Any]:
    return nullcontext()


@dataclass
class Session:
    config: PluginConfig
    api: FoundryApi
    # A context in which the KV-cache phase allocates from allocator segments of its own (memory.py);
    # tests pass a no-op.
    isolate: Callable[[], AbstractContextManager[Any]] = _no_isolation
    tracker: PhaseTracker = field(init=False)
    pid: int = field(default_factory=os.getpid)
    fingerprint: Fingerprint | None = None
    runner: str | None = None
    saved: VllmMetadata | None = None  # LOAD: the archive's metadata, read before the GPU is touched
    pending: Any = None  # LOAD: what start_graph_builds returned
    kv_cache_bytes: int | None = None  # SAVE: what determine_available_memory returned
    num_gpu_blocks: int | None = None
    graphs: list[GraphEntry] = field(default_factory=list)
    keepalive: list[Any] = field(default_factory=list)  # objects that must live as long as the process
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tracker = PhaseTracker(self.api)

    def require_saved(self) -> VllmMetadata:
        if self.saved is None:
            raise IntegrationError(
                "LOAD reached a later start-up phase without having read the archive's metadata (the worker's "
                "init_device hook did not run): a bug in the adapter or an unexpected vLLM start-up order; report it "
                "with the log"
            )
        return self.saved


_LOCK = threading.Lock()
_SESSION: Session | None = None


def current() -> Session:
    """This process's session, created from the environment on first use."""
    global _SESSION
    with _LOCK:
        if _SESSION is None or _SESSION.pid != os.getpid():
            from .memory import isolated_pool

            _SESSION = Session(PluginConfig.from_env(), PublicFoundryApi(), isolated_pool)
        return _SESSION


def install(session: Session) -> None:
    """Makes ``session`` this process's session (tests, or an embedding program)."""
    global _SESSION
    with _LOCK:
        _SESSION = session


def reset() -> None:
    global _SESSION
    with _LOCK:
        _SESSION = None
