"""The vLLM plugin's session in one process (shared/session.py), created by the first hook that runs in a
worker, never in the front-end; and what only vLLM's start-up keeps between phases."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..shared.allreduce import Recorder
from ..shared.autotune import Replay
from ..shared.backend import PublicFoundryApi
from ..shared.caches import CachePlan
from ..shared.metadata import MetadataFile
from ..shared.session import Session as SharedSession
from ..shared.session import SessionStore
from .caches import PLAN
from .config import PluginConfig
from .metadata import FILE, VllmMetadata

__all__ = ["Session", "VllmState", "current", "install", "reset"]


@dataclass
class VllmState:
    runner: str | None = None  # "v2" or "v1": the model runner this worker builds
    kv_cache_bytes: int | None = None  # SAVE: what determine_available_memory returned
    num_gpu_blocks: int | None = None  # SAVE: the KV cache's block count
    compiles: bool = False  # the model runs torch.compiled (its compile cache is one of the caches SAVE packs)
    architectures: tuple[str, ...] = ()  # the model's classes (vLLM's model-info cache holds a file for each)
    # LOAD: each compiled piece's loaded graphs, (piece, batch key, graph, outputs), for wrappers made later
    loaded_pieces: dict[Any, list[tuple[Any, dict[str, Any], Any, Any]]] | None = None
    replay: Replay | None = None  # LOAD: SAVE's kernel choices, and how many kernels took them (shared/autotune.py)
    allreduce: Recorder | None = None  # SAVE: the custom all-reduce's registrations (shared/allreduce.py)
    small_room: int = 0  # the room the region's small-allocation granule opened with before vLLM's snapshot


@dataclass
class Session(SharedSession[VllmState, VllmMetadata]):
    state: VllmState = field(default_factory=VllmState, kw_only=True)
    metadata: MetadataFile[VllmMetadata] = field(default=FILE, kw_only=True)
    caches: CachePlan = field(default=PLAN, kw_only=True)


def _make() -> Session:
    from .memory import isolated_pool

    return Session(PluginConfig.from_env(), PublicFoundryApi(), isolated_pool)


_STORE: SessionStore[Session] = SessionStore(_make)
current = _STORE.current
install = _STORE.install
reset = _STORE.reset
