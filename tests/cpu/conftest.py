"""Fixtures more than one CPU test module shares."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.benchvllm import FAKE_ENGINES, Probe
from tests.support.graphs import JsonRunner
from tests.support.sanitized import Sanitized, build_sanitized
from tests.support.subproc import run_python


@pytest.fixture(scope="session")
def sanitized(tmp_path_factory: pytest.TempPathFactory) -> Sanitized:
    """libfoundry and the fake driver under AddressSanitizer + UBSan, built once for the session."""
    return build_sanitized(tmp_path_factory.mktemp("sanitized"))


@pytest.fixture(scope="module")
def app_json_module(fakecuda_dir: Path, foundry_lib: Path) -> JsonRunner:
    """``app_json`` (tests/conftest.py) for a module whose tests share what one process saved (a module-scoped
    fixture cannot take the function-scoped ``app_json``)."""

    def run(code: str, env: dict[str, str] | None = None) -> Any:
        return json.loads(run_python(code, lib_dir=fakecuda_dir, env=env, preload=foundry_lib).strip().splitlines()[-1])

    return run


@pytest.fixture
def fake_sglang(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in SGLang first on the engine processes' path, none of its failure switches set."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(FAKE_ENGINES), os.environ.get("PYTHONPATH")])))
    for name in ("FAKE_SGLANG_SLEEP", "FAKE_SGLANG_HANG", "FAKE_SGLANG_REFUSE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in vLLM first on the engine processes' path (tests/support/fakeengines_pkg)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(FAKE_ENGINES), os.environ.get("PYTHONPATH")])))


@pytest.fixture
def engine_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Probe:
    """Each stand-in engine process notes what it saw as it started, one JSON line each: those notes, read when
    called."""
    path = tmp_path / "probe.jsonl"
    monkeypatch.setenv("FAKE_ENGINE_CACHE_PROBE", str(path))
    return lambda: [json.loads(line) for line in path.read_text().splitlines()]
