"""A second engine's bindings to foundry.integration.shared, shaped as an SGLang plugin's would be, for CPU
tests of the shared pieces with a prefix other than vLLM's (FOUNDRY_SGLANG_*, sglang_plugin.json)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from foundry.integration.shared import ArchiveMetadata, Engine, EngineConfig, MetadataFile, Session

SGLANG = Engine(name="SGLang", key="sglang", version="0.5.17")


class SglangConfig(EngineConfig):
    ENGINE = SGLANG


@dataclass(frozen=True)
class SglangMetadata(ArchiveMetadata):
    """An engine value of its own, written under a key of its own."""

    max_total_tokens: int = field(kw_only=True)

    def engine_json(self) -> dict[str, Any]:
        return {"memory_pool": {"max_total_tokens": self.max_total_tokens}}

    @classmethod
    def engine_fields(cls, doc: Mapping[str, Any]) -> dict[str, Any]:
        return {"max_total_tokens": int(doc["memory_pool"]["max_total_tokens"])}


FILE = MetadataFile(SGLANG, SglangMetadata)


@dataclass
class SglangState:
    max_total_tokens: int | None = None


def session(config: SglangConfig, api: Any) -> Session[SglangState, SglangMetadata]:
    return Session(config, api, state=SglangState(), metadata=FILE)


def env(mode: str, archive: object, **more: str) -> dict[str, str]:
    """FOUNDRY_SGLANG_* variables: mode, archive and any more by suffix (``THREADS="4"``)."""
    return {
        SGLANG.var("MODE"): mode,
        SGLANG.var("ARCHIVE"): str(archive),
        **{SGLANG.var(k): v for k, v in more.items()},
    }
