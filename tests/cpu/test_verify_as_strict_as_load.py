"""``foundry verify`` and LOAD's pre-GPU checks (``foundry.load.preflight``) apply one set of rules: what
LOAD refuses, both refuse, in archive and graph mode, and LOAD itself refuses it before the GPU. Each
case below is a damage or an edit (sealed again, as a forger would) that one of them used to let
through."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from foundry import _state
from foundry.errors import ArchiveCorruptError, ArchiveError
from foundry.format import MANIFEST_NAME, read_manifest
from foundry.load import preflight, read_source
from foundry.verify import Check, ProblemKind, verify_archive
from tests.support.archive_damage import edit_doc
from tests.support.samples import sample_record
from tests.support.verify_archives import build_archive, forge_graph, problem

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_archive"
GRAPHS = ("ew_bs32.json", "ew_bs64.json")  # ew_bs32 is stored as changes to ew_bs64


@pytest.fixture
def arch(tmp_path: Path) -> Path:
    _state.reset_all()
    copy = tmp_path / "arch"
    shutil.copytree(FIXTURE, copy)
    return copy


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    """graph_0 (template) and graph_1 (its member) of tests.support.verify_archives."""
    _state.reset_all()
    return build_archive(tmp_path / "sample")


def _preflight_refuses(paths: list[Path], *needles: str) -> str:
    _state.reset_all()
    with pytest.raises(ArchiveError) as refused:
        preflight(paths)
    message = str(refused.value)
    assert all(n in message for n in needles), message
    return message


@pytest.mark.parametrize("link", ["dangling", "to-a-copy-outside"])
def test_a_listed_graph_json_linking_out_of_the_archive_is_refused(arch: Path, tmp_path: Path, link: str) -> None:
    member = arch / "ew_bs32.json"
    target = Path("/nonexistent/ew_bs32.json")
    if link == "to-a-copy-outside":
        target = tmp_path / "elsewhere.json"
        shutil.copy(member, target)
    member.unlink()
    member.symlink_to(target)
    report = verify_archive(arch)
    assert not report.ok
    problem(report, Check.FILES, ProblemKind.CORRUPT, "ew_bs32.json", "outside", "symbolic link")
    _preflight_refuses([arch / g for g in GRAPHS])
    with pytest.raises(ArchiveCorruptError):  # LOAD, whose first step this is
        read_source(member)
