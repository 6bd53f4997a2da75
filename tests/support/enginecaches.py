"""Processes of machines for the engine-cache tests (tests/cpu/integration/test_engine_caches_*.py): each with
its home, the cache switches unset and the stand-in Triton (faketriton.py) fresh, as a new process has them."""

from __future__ import annotations

from pathlib import Path

import pytest

import foundry
from foundry.integration.shared import tritoncache
from foundry.schema import CACHES_DOCUMENT, CachePayload
from tests.support import faketriton

__all__ = ["CACHE_VARIABLES", "listing", "machine", "packing"]

CACHE_VARIABLES = ("TRITON_CACHE_DIR", "TRITON_CACHE_MANAGER", tritoncache.COPY_ENV, "VLLM_CACHE_ROOT",
                   "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME", "VLLM_USE_MEGA_AOT_ARTIFACT",
                   "FOUNDRY_SIGNING_KEY", "TVM_FFI_CACHE_DIR", "FOUNDRY_VLLM_MODEL_INFO_SEEDED")  # fmt: skip


def machine(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """A process of a machine whose home is ``home``: caches where the engines keep them by default, none of
    the switches set (monkeypatch puts back what the plugin sets), no Triton entries noted or files written."""
    home.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    for name in CACHE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(tritoncache, "_USED", set())
    monkeypatch.setattr(tritoncache, "_WRITES", [0])
    faketriton.inject(monkeypatch)


def packing(monkeypatch: pytest.MonkeyPatch, home: Path, key: Path | None, engine: str = "VLLM", **env: str) -> None:
    """A SAVE process of a machine at ``home`` asked to pack the engine's caches (signed with ``key``, if any)."""
    machine(monkeypatch, home)
    if key is not None:
        monkeypatch.setenv("FOUNDRY_SIGNING_KEY", str(key))
    for name, value in {f"FOUNDRY_{engine}_PACK_CACHES": "1", **env}.items():
        monkeypatch.setenv(name, value)


def listing(archive: Path) -> dict[str, list[str]]:
    """The archive's engine caches: each cache's listed paths (read as LOAD reads them, under the key in force)."""
    payload = CachePayload.from_json(foundry.read_archive_document(archive, CACHES_DOCUMENT), CACHES_DOCUMENT)
    return {t.name: [f.path for f in t.files] for t in payload.trees}
