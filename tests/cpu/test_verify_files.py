"""`foundry verify` as a function (foundry.verify.verify_archive), on small archives built in
tests/support/verify_archives.py: a sound archive passes; each damaged or foreign file, missing kernel
and broken template member is found, named, and reported by the check it belongs to.
Pointer scan and identity: test_verify_pointers.py."""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from foundry.archive import read_manifest, read_meta, write_graph
from foundry.errors import ArchiveCorruptError
from foundry.images import ImageFormat
from foundry.load import preflight
from foundry.records import Delta
from foundry.schema import MemorySpec, TemplateRef
from foundry.storage import image_path, sha256_bytes, write_image
from foundry.verify import Check, ProblemKind, check_archive, verify_archive
from tests.fakecuda.images import make_cubin, make_ptx
from tests.support.archive_damage import load_doc, relist, write_doc
from tests.support.encode import encode_delta
from tests.support.samples import sample_identity, sample_meta, sample_record
from tests.support.verify_archives import (
    IMAGES,
    build_archive,
    forge_graph,
    member_record,
    only_failure,
    problem,
    remanifest,
    rewrite,
    write_member,
)


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    return build_archive(tmp_path / "arch")


# ---------------------------------------------------------------------------------------- sound archive
def test_sound_archive_with_a_member_passes_every_check(archive: Path) -> None:
    report = verify_archive(archive, current_identity=sample_identity())
    assert report.ok, [str(p) for p in report.problems]
    assert report.mode == "archive" and report.graphs == 2 and report.images == 2
    status = {c.check: c.status for c in report.checks}
    assert status == {**{c: "passed" for c in Check}, Check.SIGNATURE: "skipped"}
    assert report.notes == ()  # real cubins: every kernel name was looked up
    assert report.verdict.startswith("OK:") and "skipped: signature" in report.verdict
    assert (archive / "graph_1.cugraph").read_bytes()[64:68] == b"FGD1"  # the member really is a delta
    assert check_archive(archive) == []
    doc = report.to_json()
    assert json.loads(json.dumps(doc)) == doc and doc["ok"] is True and doc["problems"] == []


def test_single_member_graph_json_is_verified_with_its_template(archive: Path) -> None:
    report = verify_archive(archive / "graph_1.json", current_identity=sample_identity())
    assert report.ok, [str(p) for p in report.problems]
    assert report.mode == "graph" and report.graphs == 1 and report.images == 2  # the template is not counted
    status = {c.check: c.status for c in report.checks}
    assert status[Check.FOREIGN] == "skipped" and status[Check.TEMPLATES] == status[Check.POINTERS] == "passed"
    assert "unsigned" in next(c.reason for c in report.checks if c.check == Check.SIGNATURE)


def test_missing_path_and_non_archive_directory(tmp_path: Path) -> None:
    report = verify_archive(tmp_path / "nothing.json")
    problem(report, Check.FILES, ProblemKind.MISSING, "nothing.json", "is missing")
    assert {c.status for c in report.checks if c.check != Check.FILES} == {"skipped"}
    empty = tmp_path / "empty"
    empty.mkdir()
    report = verify_archive(empty)
    problem(report, Check.FILES, ProblemKind.MISSING, "empty", "graph_manifest.json")


# --------------------------------------------------------------------------------------------- files
def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def truncate(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def patch(path: Path, offset: int, data: bytes) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[:offset] + data + raw[offset + len(data) :])


def image0(a: Path) -> Path:
    return image_path(a, sha256_bytes(IMAGES[0]))


def edit_json(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    doc = load_doc(path)
    edit(doc)
    write_doc(path, doc)


def add_memory(a: Path) -> Path:
    data = bytes(range(256)) * 16
    sha = sha256_bytes(data)
    (a / "memory").mkdir()
    (a / "memory" / f"{sha}.bin").write_bytes(data)
    rewrite(a, "graph_0", memory=MemorySpec(sha, len(data), ((0x1000, len(data)),)))
    assert verify_archive(a).ok
    return a / "memory" / f"{sha}.bin"


FILE_DAMAGE = [
    pytest.param(lambda a: flip(image0(a), 200), ProblemKind.CHECKSUM, ".bin", "content SHA-256", id="image-bitflip"),
    pytest.param(lambda a: truncate(image0(a), 100), ProblemKind.CHECKSUM, ".bin", "100 bytes", id="image-truncated"),
    pytest.param(lambda a: image0(a).unlink(), ProblemKind.MISSING, ".bin", "is missing", id="image-missing"),
    pytest.param(
        lambda a: flip(a / "graph_0.cugraph", -3), ProblemKind.CORRUPT, "graph_0.json", "damaged", id="record-bitflip"
    ),
    pytest.param(
        lambda a: truncate(a / "graph_0.cugraph", 90),
        ProblemKind.CHECKSUM,
        "graph_0.json",
        "truncated",
        id="record-truncated",
    ),
    pytest.param(
        lambda a: flip(a / "graph_1.cugraph", 100), ProblemKind.CORRUPT, "graph_1.json", "damaged", id="delta-bitflip"
    ),
    pytest.param(
        lambda a: flip(a / "graph_0.json", 40),
        ProblemKind.CHECKSUM,
        "graph_0.json",
        "changed after the manifest was written",
        id="json-bitflip",
    ),
    pytest.param(
        lambda a: truncate(a / "graph_1.json", 50), ProblemKind.CHECKSUM, "graph_1.json", "SHA-256", id="json-truncated"
    ),
    pytest.param(  # the manifest restated, as a forger would: a JSON it does not list is not read further
        lambda a: (edit_json(a / "graph_0.json", lambda d: d.update(format_version=6)), relist(a / "graph_0.json")),
        ProblemKind.VERSION,
        "graph_0.json",
        "format_version 6",
        id="json-version",
    ),
    pytest.param(
        lambda a: edit_json(a / "graph_manifest.json", lambda d: d.update(format_version=9)),
        ProblemKind.VERSION,
        "arch",
        "format_version 9",
        id="manifest-version",
    ),
    pytest.param(
        lambda a: patch(a / "graph_0.cugraph", 8, struct.pack("<I", 7)),
        ProblemKind.VERSION,
        "graph_0.json",
        "container version",
        id="container-version",
    ),
    pytest.param(lambda a: flip(add_memory(a), 7), ProblemKind.CHECKSUM, ".bin", "state memory", id="memory-bitflip"),
    pytest.param(lambda a: add_memory(a).unlink(), ProblemKind.MISSING, ".bin", "state memory", id="memory-missing"),
]


@pytest.mark.parametrize(("damage", "kind", "path_end", "fragment"), FILE_DAMAGE)
def test_damaged_file_is_found_by_the_files_check(
    archive: Path, damage: Callable[[Path], None], kind: ProblemKind, path_end: str, fragment: str
) -> None:
    damage(archive)
    report = verify_archive(archive)
    problem(report, Check.FILES, kind, path_end, fragment)
    assert Check.FILES in {c.check for c in report.checks if c.status == "failed"}
    assert report.verdict.startswith("FAILED:") and "files" in report.verdict


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("notes.txt", "not part of the archive"),
        ("images/helper.so", "not part of the archive"),
        (".graph_0.json.0123456789ab.foundry-tmp", "interrupted write"),
        ("graph_7.json", "does not list"),
    ],
)
def test_foreign_file_is_named(archive: Path, name: str, fragment: str) -> None:
    (archive / name).write_bytes(b"\x7fELF not ours")
    problems = only_failure(verify_archive(archive), Check.FOREIGN)
    assert [(p.kind, Path(p.path).name) for p in problems] == [(ProblemKind.FOREIGN, Path(name).name)]
    assert fragment in problems[0].message


def test_unused_image_left_by_an_earlier_save_is_only_noted(archive: Path) -> None:
    stale = make_cubin(["_Z5stalev"])
    write_image(archive, stale, ImageFormat.ELF)
    report = verify_archive(archive)
    assert report.ok
    assert any(sha256_bytes(stale) in n and "LOAD ignores it" in n for n in report.notes)


# ------------------------------------------------------------------------------------------- kernels
def test_kernel_missing_from_its_image_is_named(tmp_path: Path) -> None:
    images = (make_cubin(["_Z6kernel0Pf"]), IMAGES[1])  # function 2 lives in image 0, which lacks it
    report = verify_archive(build_archive(tmp_path / "arch", images))
    problems = only_failure(report, Check.KERNELS)
    # Both graphs use the kernel, and the manifest lists it for that image.
    assert [Path(p.path).name for p in problems] == ["graph_0.json", "graph_1.json", "graph_manifest.json"]
    assert "kernel _Z6kernel2Pf in image" in problems[2].message
    for p in problems[:2]:
        assert p.kind == ProblemKind.MISSING and "function 2 (_Z6kernel2Pf)" in p.message
        assert sha256_bytes(images[0]) in p.message and "LOAD would not find the kernel" in p.message


def test_manifest_kernel_lists_are_checked_against_images_and_graphs(archive: Path) -> None:
    manifest_path = archive / "graph_manifest.json"
    doc = load_doc(manifest_path)
    listed = {sha: v["kernels"] for sha, v in doc["images"].items()}
    assert sorted(k for ks in listed.values() for k in ks) == sorted(
        {f["name"] for i in range(2) for f in json.loads((archive / f"graph_{i}.json").read_text())["functions"]}
    )  # build_archive lists them as save_graph_manifest does, and the sound archive passes (test above)
    first = next(iter(doc["images"]))
    doc["images"][first]["kernels"] = [*listed[first], "_Z7missingv"]
    write_doc(manifest_path, doc)
    problems = only_failure(verify_archive(archive), Check.KERNELS)
    assert [(p.kind, Path(p.path).name) for p in problems] == [(ProblemKind.MISSING, "graph_manifest.json")]
    assert "_Z7missingv" in problems[0].message and "does not define it" in problems[0].message
    dropped = listed[first][0]
    doc["images"][first]["kernels"] = listed[first][1:]
    write_doc(manifest_path, doc)
    problems = only_failure(verify_archive(archive), Check.KERNELS)
    assert {(p.kind, Path(p.path).name) for p in problems} == {
        (ProblemKind.MISMATCH, "graph_0.json"),
        (ProblemKind.MISMATCH, "graph_1.json"),
    }
    assert all(dropped in p.message and "would not load it ahead" in p.message for p in problems)


def test_image_of_another_format_than_recorded(tmp_path: Path) -> None:
    images = (make_ptx(["_Z6kernel0Pf", "_Z6kernel2Pf"]), IMAGES[1])  # PTX recorded as ELF
    report = verify_archive(build_archive(tmp_path / "arch", images))
    problems = only_failure(report, Check.KERNELS)
    assert [p.kind for p in problems] == [ProblemKind.MISMATCH]
    assert "recorded as elf" in problems[0].message and "are ptx" in problems[0].message


# ----------------------------------------------------------------------------------------- templates
def test_delta_whose_template_was_saved_again(archive: Path) -> None:
    base = sample_record()
    resaved = dataclasses.replace(base, nodes=(dataclasses.replace(base.nodes[0], grid=(1, 1, 1)), *base.nodes[1:]))
    rewrite(archive, "graph_0", resaved, retarget=False)  # every checksum of the archive is consistent again
    (p,) = only_failure(verify_archive(archive), Check.TEMPLATES)
    assert p.kind == ProblemKind.MISMATCH and p.path.endswith("graph_1.json")
    assert "saved again after this member" in p.message and "whose record is now" in p.message


def test_override_of_a_node_of_another_type_or_that_does_not_exist(archive: Path) -> None:
    template_sha = read_meta(archive / "graph_0.json").record.sha256  # type: ignore[union-attr]
    other = member_record(sample_record())
    kernel = other.nodes[0]
    write_member(archive, Delta(template_sha, 3, ((0, kernel), (1, kernel))), other)  # node 1 is a memset
    remanifest(archive, varying=(0, 1))
    problems = only_failure(verify_archive(archive), Check.TEMPLATES)
    assert any("replaces node 1, a memset node" in p.message for p in problems)
    write_member(archive, Delta(template_sha, 3, ((0, kernel), (99, kernel))), other)
    remanifest(archive, varying=(0, 99))
    problems = only_failure(verify_archive(archive), Check.TEMPLATES)
    assert any("overrides node 99; the template has 7 nodes" in p.message for p in problems)


def test_manifest_varying_list_must_match_the_deltas(archive: Path) -> None:
    remanifest(archive, varying=(0,))
    (p,) = only_failure(verify_archive(archive), Check.TEMPLATES)
    assert "overrides nodes [0, 5], but the manifest says nodes [0] vary in group 0" in p.message


def test_manifest_group_without_a_varying_list_is_not_held_to_one(archive: Path) -> None:
    """Manifests written before groups recorded ``varying``: the key is absent, read as None, and
    written back absent; the deltas are still checked against their template."""
    path = archive / "graph_manifest.json"
    doc = load_doc(path)
    for group in doc["groups"]:
        del group["varying"]
    write_doc(path, doc)
    manifest = read_manifest(archive)
    assert [g.varying for g in manifest.groups] == [None]
    assert "varying" not in manifest.to_json()["groups"][0]
    assert verify_archive(archive).ok


def test_graph_stored_as_changes_to_itself(archive: Path) -> None:
    from foundry.load.source import read_source

    other = member_record(sample_record())
    delta = Delta("ab" * 32, 3, ((0, other.nodes[0]),))
    write_member(archive, delta, other, template="graph_1.json")
    remanifest(archive, varying=(0,))
    report = verify_archive(archive)
    only_failure(report, Check.TEMPLATES)
    problem(report, Check.TEMPLATES, ProblemKind.CORRUPT, "graph_1.json", "stored as changes to itself")
    with pytest.raises(ArchiveCorruptError, match="stored as changes to itself"):
        read_source(archive / "graph_1.json")


def test_template_cycle_is_refused_by_load_not_recursed(archive: Path) -> None:
    """graph_1 is changes to graph_0, and graph_0 (rewritten as a delta) changes to graph_1."""
    from foundry.load.source import read_source

    member_sha = read_meta(archive / "graph_1.json").record.sha256  # type: ignore[union-attr]
    base = sample_record()
    meta = dataclasses.replace(
        sample_meta("graph_0", base, IMAGES, "."), template=TemplateRef("graph_1.json", member_sha)
    )
    write_graph(archive / "graph_0.json", meta, encode_delta(Delta(member_sha, 3, ((0, base.nodes[0]),))))
    remanifest(archive)  # listed as it is now: the cycle itself is what LOAD must refuse
    with pytest.raises(ArchiveCorruptError, match=r"graph_0\.json, which is itself stored as changes") as refused:
        read_source(archive / "graph_1.json")
    report = verify_archive(archive)  # says the same, with the same rule
    assert str(refused.value) in [p.message for p in report.problems_of(Check.TEMPLATES)]


# ---------------------------------------------------------------------------------------------- graph mode
def test_graph_mode_checks_the_template_it_reads(archive: Path) -> None:
    """The member is checked with its template, whose record LOAD builds it from: a template record
    naming 0xFFFFFFFF functions (its metadata lists 3) is reported from the member's JSON too, and LOAD's
    eager run raises it as verify reports it."""
    forge_graph(archive, "graph_0", dataclasses.replace(sample_record(), function_count=0xFFFFFFFF))
    for target in (archive, archive / "graph_1.json"):
        problem(verify_archive(target), Check.FILES, ProblemKind.MISMATCH, "graph_0.json", "4294967295 functions")
    with pytest.raises(ArchiveCorruptError, match="4294967295 functions"):
        preflight([archive / "graph_1.json"])


def test_a_manifest_holding_a_graphs_region_as_it_is_passes(archive: Path) -> None:
    """SAVE writes a manifest after the region was released with the last graph's region as it is."""
    graph_region = read_meta(archive / "graph_1.json").region
    edit_json(archive / "graph_manifest.json", lambda d: d.update(region=graph_region.to_json()))
    assert verify_archive(archive).ok and verify_archive(archive / "graph_1.json").ok
