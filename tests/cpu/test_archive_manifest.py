"""Manifest, content-addressed images, and whole-archive checking."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

import foundry.storage.files as files_module
from foundry.archive import MANIFEST_NAME, Manifest, container_path, read_manifest, write_manifest
from foundry.errors import ArchiveCorruptError, ArchiveForeignError, ArchiveVersionError
from foundry.images import ImageFormat
from foundry.schema import GraphRole, Group
from foundry.storage import image_path, memory_path, open_image, read_memory, write_image, write_memory
from foundry.verify import ProblemKind, check_archive
from tests.support.archive_damage import load_doc, relist, write_doc
from tests.support.samples import write_sample_archive


@pytest.fixture
def archive(tmp_path: Path) -> tuple[Path, Manifest]:
    directory = tmp_path / "hook_archive"
    return directory, write_sample_archive(directory)


# ---------------------------------------------------------------- manifest


def test_manifest_round_trip(archive: tuple[Path, Manifest]) -> None:
    directory, manifest = archive
    assert read_manifest(directory) == manifest
    raw = json.loads((directory / MANIFEST_NAME).read_text())
    assert list(raw)[-1] == "digest"  # sealed: the digest of the bytes before it, last
    doc = load_doc(directory / MANIFEST_NAME)
    assert doc["format"] == "foundry-archive" and doc["format_version"] == 3
    assert [g["stored"] for g in doc["graphs"]] == ["files", "files"] and "bundle" not in doc
    sha = manifest.images[0].sha256
    assert doc["images"][sha] == {
        "file": f"images/{sha}.bin",
        "bytes": manifest.images[0].bytes,
        "format": "elf",
        "variables": [],  # the image's module variables LOAD writes: none
    }
    assert doc["groups"] == [{"topology": manifest.graphs[0].topology, "template": 0, "members": [1], "varying": []}]
    assert [g["role"] for g in doc["graphs"]] == ["template", "member"]
    assert "signature" not in doc


def test_manifest_image_kernels_round_trip(archive: tuple[Path, Manifest]) -> None:
    directory, manifest = archive
    first = dataclasses.replace(manifest.images[0], kernels=("fk_add_f32", "fk_scale_f32"))
    listed = dataclasses.replace(manifest, images=(first, *manifest.images[1:]))
    write_manifest(directory, listed)
    doc = json.loads((directory / MANIFEST_NAME).read_text())
    assert doc["images"][first.sha256]["kernels"] == ["fk_add_f32", "fk_scale_f32"]
    assert all("kernels" not in v for sha, v in doc["images"].items() if sha != first.sha256)
    assert read_manifest(directory) == listed


def test_manifest_keeps_signature_and_ignores_unknown_keys(archive: tuple[Path, Manifest]) -> None:
    directory, manifest = archive
    signed = dataclasses.replace(manifest, signature={"alg": "ed25519", "value": "abc"})
    write_manifest(directory, signed)
    path = directory / MANIFEST_NAME
    doc = load_doc(path)
    doc["something_new"] = [1, 2, 3]
    write_doc(path, doc)
    assert read_manifest(directory) == signed


def edit_manifest(directory: Path, edit: object) -> None:
    path = directory / MANIFEST_NAME
    doc = load_doc(path)
    edit(doc)  # type: ignore[operator]
    write_doc(path, doc)


@pytest.mark.parametrize(
    ("edit", "error", "needle"),
    [
        (lambda d: d.update(format="foundry-graph"), ArchiveForeignError, "foundry-archive"),
        (lambda d: d.update(format_version=9), ArchiveVersionError, "format_version 9"),
        (lambda d: d.pop("groups"), ArchiveCorruptError, "'groups': missing"),
        (lambda d: d["graphs"][0].update(role="leader"), ArchiveCorruptError, r"graphs\[0\].role"),
        (lambda d: d["graphs"][1].update(group=3), ArchiveCorruptError, "group"),
        (lambda d: d["groups"][0].update(members=[]), ArchiveCorruptError, "role 'member'"),
        (lambda d: d["groups"][0].update(members=[1, 1]), ArchiveCorruptError, "twice"),
        (lambda d: d["graphs"][1].update(topology="0" * 64), ArchiveCorruptError, "topology"),
        (lambda d: d["graphs"][0].update(json_sha256="abc"), ArchiveCorruptError, "json_sha256"),
        (
            lambda d: next(iter(d["images"].values())).update(file="../../etc/passwd"),
            ArchiveCorruptError,
            "must be 'images/",
        ),
        (lambda d: d["region"].update(high_water=2**40), ArchiveCorruptError, "high_water"),
        (lambda d: next(iter(d["images"].values())).update(kernels="k"), ArchiveCorruptError, r"kernels.*list"),
        (lambda d: next(iter(d["images"].values())).update(kernels=[7]), ArchiveCorruptError, r"kernels\[0\]"),
        (lambda d: next(iter(d["images"].values())).update(kernels=["k", "k"]), ArchiveCorruptError, "once each"),
        (lambda d: next(iter(d["images"].values())).update(kernels=[""]), ArchiveCorruptError, "non-empty"),
    ],
)
def test_manifest_validation(archive: tuple[Path, Manifest], edit: object, error: type[Exception], needle: str) -> None:
    directory, _ = archive
    edit_manifest(directory, edit)
    with pytest.raises(error, match=needle):
        read_manifest(directory)


def test_missing_manifest(tmp_path: Path) -> None:
    with pytest.raises(ArchiveCorruptError, match=r"no graph_manifest\.json"):
        read_manifest(tmp_path)


def test_write_manifest_refuses_inconsistency(archive: tuple[Path, Manifest]) -> None:
    directory, manifest = archive
    before = (directory / MANIFEST_NAME).read_bytes()
    bad = dataclasses.replace(manifest, groups=(Group(manifest.graphs[0].topology, 1, (0,)),))
    with pytest.raises(ValueError, match="role"):
        write_manifest(directory, bad)
    assert (directory / MANIFEST_NAME).read_bytes() == before
    assert manifest.graphs[0].role == GraphRole.TEMPLATE


# ---------------------------------------------------------------- images


def test_write_image_is_content_addressed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"\x7fELF" + bytes(range(256)) * 4
    ref = write_image(tmp_path, data, "elf")
    sha = hashlib.sha256(data).hexdigest()
    assert (ref.sha256, ref.bytes, ref.format) == (sha, len(data), ImageFormat.ELF)
    path = image_path(tmp_path, sha)
    assert path == tmp_path / "images" / f"{sha}.bin" and path.read_bytes() == data

    def no_write(*args: object) -> None:
        raise AssertionError("an existing image was rewritten")

    monkeypatch.setattr(files_module, "write_atomic", no_write)
    assert write_image(tmp_path, memoryview(data), ImageFormat.ELF) == ref
    monkeypatch.undo()
    path.write_bytes(data[:10])  # a torn file of the wrong size is replaced
    assert write_image(tmp_path, data, "elf") == ref
    assert path.read_bytes() == data
    path.write_bytes(b"\x00" + data[1:])  # damaged in place, same size: saving again repairs it
    assert write_image(tmp_path, data, "elf") == ref
    assert path.read_bytes() == data
    with pytest.raises(ValueError):
        write_image(tmp_path, data, "zip")
    with pytest.raises(ValueError):
        write_image(tmp_path, b"", "elf")


def test_open_image(tmp_path: Path) -> None:
    data = b"PTX .version 8.0" * 100
    ref = write_image(tmp_path, data, ImageFormat.PTX)
    image = open_image(tmp_path, ref.sha256, verify=True)
    assert image == data and isinstance(image, bytearray)
    image[0] = 1  # a private copy: writable in this process, the file stays as it was
    path = image_path(tmp_path, ref.sha256)
    assert path.read_bytes() == data
    raw = bytearray(path.read_bytes())
    raw[5] ^= 1
    path.write_bytes(bytes(raw))
    assert open_image(tmp_path, ref.sha256, verify=False) == raw
    with pytest.raises(ArchiveCorruptError, match="damaged"):
        open_image(tmp_path, ref.sha256, verify=True)
    path.write_bytes(b"")
    with pytest.raises(ArchiveCorruptError, match="empty"):
        open_image(tmp_path, ref.sha256, verify=False)
    missing = "ab" * 32
    with pytest.raises(ArchiveCorruptError, match=f"{tmp_path / 'images'}/{missing}.bin.*is missing"):
        open_image(tmp_path, missing, verify=False)
    with pytest.raises(ValueError):
        image_path(tmp_path, "../escape")


# ---------------------------------------------------------------- check_archive


def test_sound_archive_has_no_problems(archive: tuple[Path, Manifest]) -> None:
    directory, _ = archive
    assert check_archive(directory) == []


def test_flipped_byte_in_an_image(archive: tuple[Path, Manifest]) -> None:
    directory, manifest = archive
    path = image_path(directory, manifest.images[1].sha256)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x04
    path.write_bytes(bytes(raw))
    problems = check_archive(directory)
    assert [(p.path, p.kind) for p in problems] == [(str(path), ProblemKind.CHECKSUM)]
    assert manifest.images[1].sha256 in problems[0].message


def test_missing_image(archive: tuple[Path, Manifest]) -> None:
    directory, manifest = archive
    image_path(directory, manifest.images[0].sha256).unlink()
    problems = check_archive(directory)
    assert [p.kind for p in problems] == [ProblemKind.MISSING]
    assert manifest.images[0].sha256 in str(problems[0])


def test_corrupted_graph_record(archive: tuple[Path, Manifest]) -> None:
    directory, _ = archive
    cpath = container_path(directory / "graph_1.json")
    raw = bytearray(cpath.read_bytes())
    raw[150] ^= 0x20
    cpath.write_bytes(bytes(raw))
    problems = check_archive(directory)
    assert len(problems) == 1 and problems[0].kind == ProblemKind.CORRUPT
    assert "graph_1.cugraph" in problems[0].message and "damaged" in problems[0].message


def test_edited_graph_json(archive: tuple[Path, Manifest]) -> None:
    directory, _ = archive
    path = directory / "graph_0.json"
    doc = load_doc(path)
    doc["name"] = "renamed"
    write_doc(path, doc)
    problems = check_archive(directory)
    # its digest is not the manifest's: not read further, as LOAD does not decode it
    assert [(p.kind, p.path) for p in problems] == [(ProblemKind.CHECKSUM, str(path))]
    assert "not read further" in problems[0].message
    relist(path)  # as a forger would: the manifest names it otherwise, and so does the record
    problems = check_archive(directory)
    assert [(p.kind, p.path) for p in problems] == [(ProblemKind.MISMATCH, str(path))]  # LOAD's one refusal
    assert "disagree: the graph's name" in problems[0].message


def test_record_from_another_save(archive: tuple[Path, Manifest]) -> None:
    directory, _ = archive
    shutil.copyfile(container_path(directory / "graph_1.json"), container_path(directory / "graph_0.json"))
    problems = check_archive(directory)
    assert [p.kind for p in problems] == [ProblemKind.CORRUPT]
    assert "different saves" in problems[0].message


def test_missing_graph_and_broken_manifest(archive: tuple[Path, Manifest]) -> None:
    directory, _ = archive
    os.unlink(directory / "graph_1.json")
    assert [p.kind for p in check_archive(directory)] == [ProblemKind.MISSING]
    edit_manifest(directory, lambda d: d.update(format_version=9))
    assert [p.kind for p in check_archive(directory)] == [ProblemKind.VERSION]
    (directory / MANIFEST_NAME).unlink()
    assert [p.kind for p in check_archive(directory)] == [ProblemKind.MISSING]


def test_image_used_by_a_graph_but_not_listed(archive: tuple[Path, Manifest]) -> None:
    directory, manifest = archive
    write_manifest(directory, dataclasses.replace(manifest, images=manifest.images[:1]))
    problems = check_archive(directory)
    # both graphs use it: each uses an image the manifest does not list, and disagrees with it on that
    assert sorted(p.kind.value for p in problems) == ["mismatch", "mismatch", "missing", "missing"]
    assert all(manifest.images[1].sha256 in p.message for p in problems)


def test_state_memory_is_content_addressed_checked_and_repaired(tmp_path: Path) -> None:
    data = bytes(range(256)) * 8
    sha = hashlib.sha256(data).hexdigest()
    write_memory(tmp_path, data, sha)
    path = memory_path(tmp_path, sha)
    assert path == tmp_path / "memory" / f"{sha}.bin" and read_memory(tmp_path, sha, len(data)) == data
    path.write_bytes(b"\xff" + data[1:])
    with pytest.raises(ArchiveCorruptError, match="damaged"):
        read_memory(tmp_path, sha, len(data))
    write_memory(tmp_path, data, sha)  # saving again repairs the damaged copy
    assert read_memory(tmp_path, sha, len(data)) == data
    path.unlink()
    with pytest.raises(ArchiveCorruptError, match=r"missing.*copy the archive completely"):
        read_memory(tmp_path, sha, len(data))


@pytest.mark.parametrize(
    ("created", "sound"),
    [
        ("2025-01-31T12:00:00+00:00", True),
        ("2025-01-31T12:00:00-05:30", True),
        ("2025-01-31T12:00:00Z", False),  # taken by Python 3.11's fromisoformat, not by 3.10's
        ("20250131T120000+0000", False),  # the basic format: 3.11 only
        ("2025-01-31T12:00:00.5+00:00", False),
        ("2025-01-31 12:00:00+00:00", False),
        ("2025-01-31T12:00:00", False),  # no offset
        ("2025-13-31T12:00:00+00:00", False),  # no 13th month
        ("２０２５-01-31T12:00:00+00:00", False),  # digits, but not ASCII ones
    ],
)
def test_created_is_read_alike_whatever_the_python(archive: tuple[Path, Manifest], created: str, sound: bool) -> None:
    """``created`` is taken exactly as SAVE writes it, whatever the Python that reads it (``fromisoformat``
    takes more forms from 3.11 on)."""
    directory, _ = archive
    edit_manifest(directory, lambda d: d.update(created=created))
    if sound:
        assert read_manifest(directory).created == created
        return
    with pytest.raises(ArchiveCorruptError, match=r"'created'.*2025-01-31T12:00:00\+00:00"):
        read_manifest(directory)
