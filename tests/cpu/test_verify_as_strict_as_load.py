"""``foundry verify`` and LOAD's pre-GPU checks (``foundry.load.preflight``) apply one set of rules: what
LOAD refuses, both refuse, in archive and graph mode, and LOAD itself refuses it before the GPU. Each
case below is a damage or an edit (sealed again, as a forger would) that one of them used to let
through."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from foundry import _state
from foundry.errors import ArchiveCorruptError, ArchiveError
from foundry.format import MANIFEST_NAME, read_manifest, read_meta
from foundry.load import load_cuda_modules_and_libraries, preflight, read_source
from foundry.verify import Check, ProblemKind, Report, verify_archive
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


def _forge_graph_json(arch: Path, name: str, edit: Callable[[dict[str, Any]], object]) -> None:
    """Edits a graph JSON of the archive and, as a forger would, its checksum in the manifest."""
    edit_doc(arch / name, edit)
    digest = hashlib.sha256((arch / name).read_bytes()).hexdigest()
    edit_doc(arch / MANIFEST_NAME, lambda d: [g.update(json_sha256=digest) for g in d["graphs"] if g["json"] == name])


def _reported(report: Report, check: Check, path_end: str, *needles: str) -> bool:
    """Whether ``check`` reported a problem in the file ``path_end`` naming every needle."""
    return any(
        p.check == check and p.path.endswith(path_end) and all(n in p.message for n in needles) for p in report.problems
    )


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


def test_graph_mode_checks_the_template_it_reads(sample: Path) -> None:
    """The member is checked with its template, whose record LOAD builds it from: a template record
    naming 0xFFFFFFFF functions (its metadata lists 3) is refused from the member's JSON too."""
    forge_graph(sample, "graph_0", dataclasses.replace(sample_record(), function_count=0xFFFFFFFF))
    for target in (sample, sample / "graph_1.json"):
        problem(verify_archive(target), Check.FILES, ProblemKind.MISMATCH, "graph_0.json", "4294967295 functions")
    _preflight_refuses([sample / "graph_1.json"], "4294967295 functions")


def test_a_variable_listing_that_disagrees_with_the_manifest_is_refused_before_the_gpu(sample: Path) -> None:
    carried = {"name": "ctab", "bytes": 4, "sha256": "ab" * 32}

    def add(doc: dict[str, Any]) -> None:
        next(iter(doc["images"].values()))["variables"] = [carried]

    edit_doc(sample / MANIFEST_NAME, add)
    for target in (sample, sample / "graph_1.json"):
        assert _reported(verify_archive(target), Check.FILES, "graph_1.json", "module variables", "ctab (4 bytes")
    # LOAD's first step refuses it, before any image is loaded.
    with pytest.raises(ArchiveCorruptError, match="module variables of kernel image"):
        read_source(sample / "graph_1.json")
    _preflight_refuses([sample / "graph_1.json"], "module variables")


def test_an_output_running_past_the_address_space_is_refused(arch: Path) -> None:
    _forge_graph_json(arch, "ew_bs64.json", lambda d: d["outputs"][0].update(nbytes=2**63))
    report = verify_archive(arch / "ew_bs64.json")
    assert _reported(report, Check.POINTERS, "ew_bs64.json", "output 0")
    _preflight_refuses([arch / "ew_bs64.json"], "output 0")


@pytest.mark.parametrize("hint", ["damaged", "of-another-region"])
def test_region_json_beside_a_manifest_is_held_to_one_rule(arch: Path, hint: str) -> None:
    """LOAD takes the manifest's region, and still refuses a damaged hint, or one naming another region,
    beside it: as verify and preflight do, through the same check."""
    if hint == "damaged":
        (arch / "region.json").write_bytes((arch / "region.json").read_bytes().replace(b"4294967296", b"4294967297"))
    else:
        edit_doc(arch / "region.json", lambda d: d.update(size=d["size"] // 2))
    for target in (arch, arch / "ew_bs32.json"):
        assert _reported(verify_archive(target), Check.FILES, "region.json")
    _preflight_refuses([arch / g for g in GRAPHS], "region.json")
    with pytest.raises(ArchiveCorruptError, match=r"region\.json"):  # raised before the region is reserved
        load_cuda_modules_and_libraries(arch)


def test_a_manifest_region_that_disagrees_with_its_graphs_is_reported(sample: Path) -> None:
    """The manifest's region comes from the allocation log its graphs' regions come from: its
    high-water mark is at least theirs, and its log holds every allocation they list."""

    def lower(doc: dict[str, Any]) -> None:
        doc["region"]["high_water"] = 0x20_0000
        doc["region"]["events"] = [doc["region"]["events"][0]]

    edit_doc(sample / MANIFEST_NAME, lower)
    for target in (sample, sample / "graph_1.json"):
        report = verify_archive(target)
        assert _reported(report, Check.FILES, MANIFEST_NAME, "used up to offset 0x200000", "0x600000")
        assert _reported(report, Check.FILES, MANIFEST_NAME, "1 allocation that the manifest's allocation log")
    _preflight_refuses([sample / "graph_1.json"], "used up to offset")


def test_a_manifest_holding_a_graphs_region_as_it_is_passes(sample: Path) -> None:
    """SAVE writes a manifest after the region was released with the last graph's region as it is."""
    graph_region = read_meta(sample / "graph_1.json").region
    edit_doc(sample / MANIFEST_NAME, lambda d: d.update(region=graph_region.to_json()))
    assert verify_archive(sample).ok and verify_archive(sample / "graph_1.json").ok


@pytest.mark.parametrize("created", ["garbage", "2025-13-45T00:00:00+00:00", "2025-01-01T00:00:00", 17])
def test_a_garbage_created_date_is_refused(arch: Path, created: Any) -> None:
    edit_doc(arch / MANIFEST_NAME, lambda d: d.update(created=created))
    with pytest.raises(ArchiveCorruptError, match="created"):
        read_manifest(arch)
    for target in (arch, arch / "ew_bs32.json"):
        assert not verify_archive(target).ok
    _preflight_refuses([arch / g for g in GRAPHS], "created")
