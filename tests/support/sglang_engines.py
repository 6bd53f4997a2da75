"""Fake SGLang scheduler processes under the adapter, for CPU tests: each ``prepare`` is a fresh process (fresh
fake modules, registry and session), with FOUNDRY_SGLANG_* set for the mode asked."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from foundry.integration.sglang import lifecycle
from foundry.integration.sglang import session as sessions
from foundry.integration.sglang.config import PluginConfig
from foundry.integration.sglang.metadata import read_metadata
from foundry.integration.shared import caches
from foundry.integration.shared.metadata import Fingerprint
from tests.support.fakefoundry import FakeFoundry
from tests.support.fakesglang import FakeSglang, build, inject


def fingerprint(runner: Any) -> Fingerprint:
    """The test stand-in for fingerprint.describe (which needs torch and SGLang): the model and the graph sizes."""
    config = runner.server_args.cuda_graph_config
    return Fingerprint.of(
        {
            "model": runner.server_args.model_path,
            "decode": config.decode,
            "prefill": config.prefill,
            "tp_size": runner.server_args.tp_size,
            "gpu": "Fake H100",
        }
    )


class SglangEngines:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, archive: Path) -> None:
        self.monkeypatch = monkeypatch
        self.archive = archive
        self.isolated = 0

    def prepare(self, mode: str, memory: FakeFoundry | None = None, **build_args: Any) -> FakeSglang:
        fake = build(memory or FakeFoundry(), **build_args)
        inject(fake, self.monkeypatch)
        self.monkeypatch.setenv("FOUNDRY_SGLANG_MODE", mode)
        self.monkeypatch.setenv("FOUNDRY_SGLANG_ARCHIVE", str(self.archive))
        self.monkeypatch.setattr(lifecycle, "describe", fingerprint)
        caches.stop_keeping()  # an earlier SAVE's keeper ended with its process
        sessions.reset()
        if mode in ("save", "load"):
            sessions.install(sessions.Session(PluginConfig.from_env(), fake.memory, isolate=self._isolate))
        return fake

    def prepare_load(self, **build_args: Any) -> FakeSglang:
        """A LOAD process whose Foundry restore moves the cursor past the archive's high-water mark."""
        memory = FakeFoundry(high_water_saved=read_metadata(self.archive).high_water)
        return self.prepare("load", memory, **build_args)

    @contextmanager
    def _isolation(self) -> Iterator[None]:
        self.isolated += 1
        yield

    def _isolate(self) -> Any:
        return self._isolation()
