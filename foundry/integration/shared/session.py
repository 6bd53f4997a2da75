"""A plugin's state in one process: created by the first hook that runs where the engine captures or
loads graphs (never in a front-end process that only hands work on), and afresh in a forked child (a fork
inherits the parent's objects, not its CUDA state).

A Session holds what every engine's SAVE and LOAD keep between start-up phases (steps.py reads and writes
it); what only one engine keeps goes in ``state``, an object of that engine's own type.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from .backend import FoundryApi
from .caches import CachePlan
from .config import EngineConfig
from .errors import IntegrationError
from .metadata import ArchiveMetadata, Fingerprint, MetadataFile
from .phases import PhaseTracker
from .ranks import SINGLE, Place, rank_dir

__all__ = ["Session", "SessionStore"]

E = TypeVar("E")  # the engine's own state
M = TypeVar("M", bound=ArchiveMetadata)  # the engine's metadata


def _no_isolation() -> AbstractContextManager[Any]:
    return nullcontext()


@dataclass
class Session(Generic[E, M]):
    config: EngineConfig
    api: FoundryApi
    # A context in which a phase that LOAD repeats after skipping one SAVE ran (the KV cache after memory
    # profiling) allocates from allocator segments of its own; tests pass a no-op.
    isolate: Callable[[], AbstractContextManager[Any]] = _no_isolation
    state: E = field(kw_only=True)
    metadata: MetadataFile[M] = field(kw_only=True)
    caches: CachePlan = field(default_factory=CachePlan, kw_only=True)  # what SAVE packs, how LOAD points at it
    tracker: PhaseTracker = field(init=False)
    pid: int = field(default_factory=os.getpid)
    fingerprint: Fingerprint | None = None
    saved: M | None = None  # LOAD: the archive's metadata, read before the GPU is touched
    pending: Any = None  # LOAD: what start_graph_builds returned
    handed_out: set[int] = field(default_factory=set)  # LOAD: indices of the graphs given to the engine
    keepalive: list[Any] = field(default_factory=list)  # objects that must live as long as the process
    timings: dict[str, Any] = field(default_factory=dict)
    watching: bool = False  # LOAD: a thread waits for the own execs' builds (steps._release_own_execs)
    report_fields: dict[str, Any] = field(default_factory=dict)  # what the engine last put in its report
    place: Place = SINGLE  # this process's rank (steps.begin sets it): which folder of the archive is its own
    keeper: Any = None  # SAVE: what keeps the archive's caches up to date once it is written (caches.Keeper)

    def __post_init__(self) -> None:
        self.tracker = PhaseTracker(self.api)

    @property
    def archive(self) -> Path:
        """This process's archive directory: the one configured, or its rank's folder in it (ranks.py)."""
        return rank_dir(self.config.require_archive(), self.place)

    def require_saved(self) -> M:
        if self.saved is None:
            engine = self.config.engine
            raise IntegrationError(
                "LOAD reached a later start-up phase without having read the archive's metadata (the hook that "
                f"begins LOAD did not run): a bug in the adapter or an unexpected {engine.name} start-up order; "
                "report it with the log"
            )
        return self.saved


S = TypeVar("S", bound=Session[Any, Any])


class SessionStore(Generic[S]):
    """One engine's session in this process: made by ``make`` on first use, and again after a fork."""

    def __init__(self, make: Callable[[], S]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._session: S | None = None

    def current(self) -> S:
        """This process's session, created (from the environment, by ``make``) on first use."""
        with self._lock:
            if self._session is None or self._session.pid != os.getpid():
                self._session = self._make()
            return self._session

    def install(self, session: S) -> None:
        """Makes ``session`` this process's session (tests, or an embedding program)."""
        with self._lock:
            self._session = session

    def reset(self) -> None:
        with self._lock:
            self._session = None
