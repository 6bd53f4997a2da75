"""The SGLang plugin's session in one process (shared/session.py), created by the first hook that runs in
SGLang's scheduler process (where the model runs), never in the Engine's or the HTTP server's process; and
what only SGLang's start-up keeps between phases."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from ..shared.backend import PublicFoundryApi
from ..shared.caches import CachePlan
from ..shared.memory import isolated_pool
from ..shared.metadata import MetadataFile
from ..shared.session import Session as SharedSession
from ..shared.session import SessionStore
from .caches import PLAN
from .config import PluginConfig
from .metadata import FILE, SglangMetadata

__all__ = ["Session", "SglangState", "current", "install", "reset"]


@dataclass
class SglangState:
    available_bytes: int | None = None  # SAVE: what SGLang measured for the KV cache
    pool: tuple[int, int] | None = None  # SAVE: (max_total_num_tokens, max_running_requests)
    prefill_gate_skip: bool | None = None  # SAVE: the prefill-graph memory gate's answer
    decode_phase: ExitStack | None = None  # the decode runner's buffers phase, while it is open
    installed: set[str] = field(default_factory=set)  # LOAD: the graph files handed to SGLang's runners
    loaded_runners: set[str] = field(default_factory=set)  # LOAD: the runners given their graphs
    captured: list[tuple[str, Any]] = field(default_factory=list)  # SAVE: (runner, runner object) captured
    allreduce: Any = None  # SAVE: the custom all-reduce's registrations (allreduce.py), where one runs


@dataclass
class Session(SharedSession[SglangState, SglangMetadata]):
    state: SglangState = field(default_factory=SglangState, kw_only=True)
    metadata: MetadataFile[SglangMetadata] = field(default=FILE, kw_only=True)
    caches: CachePlan = field(default=PLAN, kw_only=True)


def _make() -> Session:
    return Session(PluginConfig.from_env(), PublicFoundryApi(), isolated_pool)


_STORE: SessionStore[Session] = SessionStore(_make)
current = _STORE.current
install = _STORE.install
reset = _STORE.reset
