"""Foundry's Triton cache manager with the real Triton (foundry/integration/shared/tritoncache.py), each step a
fresh process (tests/gpu/triton_cache.py): SAVE's process notes the entry a compile writes and counts its files;
LOAD's, with the machine's own cache empty and the entry in the archive's copy, runs the kernel from the copy
without compiling; a kernel the copy lacks is compiled into the machine's own cache, where Triton puts it natively;
and the machine's own kernels stay found beside the copy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO

pytest.importorskip("triton", reason="needs Triton")

SCRIPT = REPO / "tests" / "gpu" / "triton_cache.py"
MANAGER = "foundry.integration.shared.tritoncache:FoundryCacheManager"


def _run(kernel: str, own: Path, out: Path, copy: Path | None = None) -> dict[str, Any]:
    env = {**os.environ, "TRITON_CACHE_DIR": str(own), "TRITON_CACHE_MANAGER": MANAGER, "PYTHONPATH": str(REPO)}
    env.pop("FOUNDRY_TRITON_CACHE_COPY", None)
    if copy is not None:
        env["FOUNDRY_TRITON_CACHE_COPY"] = str(copy)
    subprocess.run([sys.executable, str(SCRIPT), kernel, str(out)], env=env, check=True, timeout=600, cwd=REPO)
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_a_kernel_noted_at_save_runs_from_the_copy_and_new_ones_compile_into_the_machines_cache(
    tmp_path: Path,
) -> None:
    saved = _run("add_one", tmp_path / "save-cache", tmp_path / "save.json")
    assert saved["first"] == [1.0, 2.0, 3.0] and saved["writes"] > 0, saved
    entries = [Path(p) for p in saved["used"]]
    assert entries and all(p.parent == tmp_path / "save-cache" for p in entries), saved
    copy = tmp_path / "copy"  # what LOAD copies out of the archive: the entries SAVE's process opened
    for entry in entries:
        shutil.copytree(entry, copy / entry.name)

    fresh = tmp_path / "fresh-cache"
    loaded = _run("add_one", fresh, tmp_path / "load.json", copy)
    assert loaded["first"] == [1.0, 2.0, 3.0] and loaded["writes"] == 0, loaded  # nothing compiled
    assert any(Path(p).parent == copy for p in loaded["used"]), loaded
    assert not _files(fresh), _files(fresh)

    other = _run("times_two", fresh, tmp_path / "other.json", copy)
    assert other["first"] == [0.0, 2.0, 4.0] and other["writes"] > 0, other
    assert _files(fresh) and not any(str(p).startswith(str(copy)) for p in _files(fresh))

    again = _run("times_two", fresh, tmp_path / "again.json", copy)  # the machine's own kernel, found beside the copy
    assert again["writes"] == 0 and any(Path(p).parent == fresh for p in again["used"]), again
