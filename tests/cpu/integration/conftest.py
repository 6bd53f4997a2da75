"""Fixtures for the engine adapters' CPU tests: no vLLM, no SGLang, no torch, no GPU. Each test starts with no
adapter session, no pending import hooks and no FOUNDRY_VLLM_* (or, with sglang_engines, FOUNDRY_SGLANG_*)
variables, and leaves none behind."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from foundry.integration.shared import autotune, caches, hooks
from foundry.integration.vllm import lifecycle
from foundry.integration.vllm import session as sessions
from foundry.integration.vllm.config import PluginConfig
from foundry.integration.vllm.metadata import Fingerprint
from foundry.integration.vllm.plugin import register
from tests.support.fakefoundry import FakeFoundry
from tests.support.fakevllm import FakeVllm, build, inject


@pytest.fixture(autouse=True)
def clean_plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in [n for n in os.environ if n.startswith("FOUNDRY_VLLM_")]:
        monkeypatch.delenv(name)
    # SAVE's register() sets FOUNDRY_SNAPSHOT_LIMIT in os.environ: record its value now so that monkeypatch puts
    # it back afterwards, and other tests (whose subprocesses inherit the environment) never see ours.
    # LOAD's register() sets the model-info marker (vllm/caches.py SEEDED_ENV) alike.
    for name in ("FOUNDRY_SNAPSHOT_LIMIT", "FOUNDRY_VLLM_MODEL_INFO_SEEDED"):
        monkeypatch.setenv(name, "unset")
        monkeypatch.delenv(name)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    sessions.reset()
    hooks.forget_pending()
    autotune.forget()
    yield
    caches.stop_keeping()  # a SAVE's keeper ends with its "process"
    sessions.reset()
    hooks.forget_pending()
    autotune.forget()


class Engines:
    """Starts fake vLLM engines under the adapter, each in a fresh "process" (fresh modules and session)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, archive: Path) -> None:
        self.monkeypatch = monkeypatch
        self.archive = archive
        self.isolated = 0

    def prepare(self, mode: str, memory: FakeFoundry | None = None, **build_args: Any) -> FakeVllm:
        fake = build(memory or FakeFoundry(), **build_args)
        inject(fake, self.monkeypatch)
        self.monkeypatch.setenv("FOUNDRY_VLLM_MODE", mode)
        self.monkeypatch.setenv("FOUNDRY_VLLM_ARCHIVE", str(self.archive))
        config = PluginConfig.from_env()
        caches.stop_keeping()  # an earlier SAVE's keeper ended with its process
        sessions.reset()
        hooks.forget_pending()
        autotune.forget()
        sessions.install(sessions.Session(config, fake.memory, isolate=self._isolate))
        self.monkeypatch.setattr(
            lifecycle,
            "describe",
            lambda cfg: Fingerprint.of({"model": cfg.model_config.model, "gpu": "Fake H200"}),
        )
        register()
        return fake

    def _isolate(self) -> Any:
        from contextlib import contextmanager

        @contextmanager
        def counting() -> Iterator[None]:
            self.isolated += 1
            yield

        return counting()


@pytest.fixture
def engines(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Engines:
    return Engines(monkeypatch, tmp_path / "archive")


@pytest.fixture
def sglang_engines(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """Fake SGLang scheduler processes under the SGLang adapter (tests/support/sglang_engines.py)."""
    from foundry.integration.sglang import session as sglang_sessions
    from tests.support.sglang_engines import SglangEngines

    for name in [n for n in os.environ if n.startswith("FOUNDRY_SGLANG_")]:
        monkeypatch.delenv(name)
    sglang_sessions.reset()
    yield SglangEngines(monkeypatch, tmp_path / "archive")
    sglang_sessions.reset()


@pytest.fixture
def key(tmp_path: Path) -> Path:
    """A signing key file (the engine caches are packed and used only signed)."""
    path = tmp_path / "foundry.key"
    path.write_bytes(b"a signing key of thirty-two byte")
    return path
