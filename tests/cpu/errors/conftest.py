"""Fixtures of the SAVE and LOAD error tests: the application runner and one good archive per module."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.archive_damage import copy_archive
from tests.support.errors_app import Runner, app_runner, save_good_archive


@pytest.fixture(scope="module")
def run_app(fakecuda_dir: Path, foundry_lib: Path) -> Runner:
    """Runs application code under the interposer on the fake driver; returns its last JSON line."""
    return app_runner(fakecuda_dir, foundry_lib)


@pytest.fixture(scope="module")
def good_archive(run_app: Runner, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[list[float]]]:
    """An archive of one graph (add, then scale) with its manifest, and the native outputs."""
    return save_good_archive(run_app, tmp_path_factory.mktemp("good") / "arch")


@pytest.fixture
def archive(good_archive: tuple[Path, list[list[float]]], tmp_path: Path) -> Path:
    """A private copy of the good archive, free to damage."""
    return copy_archive(good_archive[0], tmp_path / "arch")
