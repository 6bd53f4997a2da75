"""SGLang's part of the plugin's metadata file, ``sglang_plugin.json`` (shared/metadata.py holds the rest):
the KV-cache budget SGLang measured at SAVE and the pool it made of it, so that LOAD skips the measurement
and checks it gets the same pool; the answer SGLang's prefill-graph memory gate gave; and, for every
breakable-graph segment that an eager step follows, that step (breaks.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..shared.metadata import ArchiveMetadata, Fingerprint, GraphEntry, MetadataFile, PhaseMark
from .config import SGLANG

__all__ = ["FILE", "Fingerprint", "GraphEntry", "PhaseMark", "SglangMetadata", "read_metadata"]


@dataclass(frozen=True)
class SglangMetadata(ArchiveMetadata):
    available_bytes: int = field(kw_only=True)  # KVCacheConfigurator._profile_available_bytes at SAVE
    max_total_num_tokens: int = field(kw_only=True)  # the KV pool SGLang made of it
    max_running_requests: int = field(kw_only=True)
    prefill_gate_skip: bool | None = field(default=None, kw_only=True)  # None: SGLang did not ask
    # graph file -> the eager step that follows that segment of a breakable graph (breaks.py)
    breaks: Mapping[str, Any] = field(default_factory=dict, kw_only=True)

    def engine_json(self) -> dict[str, Any]:
        return {
            "memory_pool": {
                "available_bytes": self.available_bytes,
                "max_total_num_tokens": self.max_total_num_tokens,
                "max_running_requests": self.max_running_requests,
            },
            "prefill_gate": None if self.prefill_gate_skip is None else {"skip": self.prefill_gate_skip},
            "breaks": dict(self.breaks),
        }

    @classmethod
    def engine_fields(cls, doc: Mapping[str, Any]) -> dict[str, Any]:
        pool = doc["memory_pool"]
        gate = doc["prefill_gate"]
        breaks = doc["breaks"]
        if not isinstance(breaks, dict):
            raise ValueError("breaks is not a JSON object")
        return {
            "available_bytes": int(pool["available_bytes"]),
            "max_total_num_tokens": int(pool["max_total_num_tokens"]),
            "max_running_requests": int(pool["max_running_requests"]),
            "prefill_gate_skip": None if gate is None else bool(gate["skip"]),
            "breaks": breaks,
        }


FILE = MetadataFile(SGLANG, SglangMetadata)
read_metadata = FILE.read
