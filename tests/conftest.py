"""Shared fixtures: the fake CUDA driver and a way to run "an application" under Foundry's interposer.

CPU-tier scenarios run in subprocesses, because driver state is per process (like the real one) and
LD_PRELOAD must be set before start-up. ``app(code)`` runs ``code`` with libfoundry preloaded and the
fake libcuda.so.1 first on the library path, and returns its stdout.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support.fakecuda_fixture import fakecuda_build_dir  # noqa: E402
from tests.support.subproc import run_python  # noqa: E402

AppRunner = Callable[..., str]


@pytest.fixture(scope="session")
def fakecuda_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the fake libcuda.so.1, built once per session."""
    return fakecuda_build_dir(tmp_path_factory)


@pytest.fixture(scope="session")
def foundry_lib() -> Path:
    """The libfoundry.so the installed package uses (the one CI built with `pip install`)."""
    from foundry.native.lib import library_path

    return library_path()


@pytest.fixture
def app(fakecuda_dir: Path, foundry_lib: Path) -> AppRunner:
    """Runs Python code as an application under the interposer on the fake driver; returns stdout."""

    def run(
        code: str,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        cwd: Path | str | None = None,
        preload: bool = True,
        timeout: float = 120,
    ) -> str:
        return run_python(
            code,
            lib_dir=fakecuda_dir,
            env=env,
            preload=foundry_lib if preload else None,
            check=check,
            cwd=cwd,
            timeout=timeout,
        )

    return run


@pytest.fixture
def app_json(app: AppRunner) -> Callable[..., Any]:
    """Like ``app``, parsing the last line of stdout as JSON."""

    def run(code: str, **kwargs: Any) -> Any:
        return json.loads(app(code, **kwargs).strip().splitlines()[-1])

    return run
