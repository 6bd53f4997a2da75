"""Documents (docs/FORMAT.md, "Documents"): sealed JSON objects a program keeps in its archive, listed in the
manifest by name, size and SHA-256. Written and listed only as the rules allow, read back only as listed (the
signature proven first where a key is in force), checked by `foundry verify`, and counted as part of the
archive by its foreign-file check. On the small archives of tests/support/verify_archives.py."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

import foundry
from foundry.archive import MANIFEST_NAME, read_manifest, write_manifest
from foundry.errors import ArchiveCorruptError, ArchiveSignatureError, SaveError
from foundry.schema import RecordRef
from foundry.storage import REGION_HINT, document_ref, sha256_bytes, write_document
from foundry.storage import documents as documents_module
from foundry.storage.documents import MAX_DOCUMENT_BYTES, document_name_problem
from foundry.trust import SigningKey
from foundry.verify import Check, ProblemKind, verify_archive
from tests.support.archive_damage import load_doc, write_doc
from tests.support.samples import sample_identity
from tests.support.verify_archives import build_archive, only_failure, problem, remanifest

NAME = "tool_plugin.json"
DOC = {"format": "tool", "steps": [1, 2, 3], "name": "ünïcode"}
KEY = SigningKey(b"a signing key of thirty-two byte")


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """The verify archive with one document, listed."""
    directory = build_archive(tmp_path / "arch")
    ref = write_document(directory, NAME, DOC)
    remanifest(directory, documents=(ref,))
    return directory


# ---------------------------------------------------------------------------------------------- writing
def test_a_document_is_written_sealed_and_listed_as_written(tmp_path: Path) -> None:
    ref = write_document(tmp_path, NAME, DOC)
    data = (tmp_path / NAME).read_bytes()
    assert ref == RecordRef(NAME, len(data), sha256_bytes(data)) == document_ref(tmp_path, NAME)
    assert data.endswith(b'"\n}\n') and b'\n  "digest": "' in data  # sealed, as every archive JSON file
    assert json.loads(data) == {**DOC, "digest": json.loads(data)["digest"]}
    assert not [p for p in tmp_path.iterdir() if p.name != NAME]  # no temporary file left


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("../x.json", "not a bare file name"),
        ("sub/x.json", "not a bare file name"),
        ("/etc/x.json", "is an absolute path"),
        ("x.txt", "not the name of a .json file"),
        (".hidden.json", "not the name of a .json file"),
        ("graph_manifest.json", "one of Foundry's own files"),
        ("region.json", "one of Foundry's own files"),
        ("", "is empty"),
    ],
)
def test_a_document_name_outside_the_rules_is_refused_before_writing(tmp_path: Path, name: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        write_document(tmp_path / "arch", name, DOC)
    assert not (tmp_path / "arch").exists()


@pytest.mark.parametrize(
    ("doc", "why"), [([1, 2], "must be a JSON object"), ({"x": float("nan")}, "not JSON|NaN|Out of range"),
                     ({"x": object()}, "is not JSON"), ({"digest": "x"}, "must not have a 'digest' key")],
)  # fmt: skip
def test_a_document_that_is_not_a_json_object_is_refused(tmp_path: Path, doc: Any, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        write_document(tmp_path, NAME, doc)
    assert not (tmp_path / NAME).exists()


def test_a_document_larger_than_readers_take_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(documents_module, "MAX_DOCUMENT_BYTES", 256)
    with pytest.raises(ValueError, match="more than the 256 a reader takes"):
        write_document(tmp_path, NAME, {"x": "y" * 300})


def test_save_graph_manifest_refuses_to_list_a_document_it_could_not_read(tmp_path: Path) -> None:
    """Checked before anything else, before it even asks for the graphs saved."""
    (tmp_path / "plain.json").write_text("{}")  # not sealed
    for documents, why in (
        (["missing.json"], "'missing.json'.*is missing"),
        (["plain.json"], "'plain.json'.*no 'digest' key"),
        (["../up.json"], "not a bare file name"),
        (["plain.json", "plain.json"], "named twice"),
    ):
        with pytest.raises(SaveError, match=why):
            foundry.save_graph_manifest(tmp_path, documents=documents)
    with pytest.raises(TypeError, match="a list of file names"):
        foundry.save_graph_manifest(tmp_path, documents="plain.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.json"]


# ---------------------------------------------------------------------------------------------- the manifest
def test_the_manifest_lists_documents_and_reads_manifests_without_them(archive: Path) -> None:
    manifest = read_manifest(archive)
    assert manifest.documents == (document_ref(archive, NAME),)
    doc = load_doc(archive / "graph_manifest.json")
    assert doc["documents"] == [
        {"file": NAME, "bytes": manifest.documents[0].bytes, "sha256": doc["documents"][0]["sha256"]}
    ]
    remanifest(archive)  # as written before documents existed: no key at all
    assert "documents" not in load_doc(archive / "graph_manifest.json")
    assert read_manifest(archive).documents == ()


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda d: d.update(documents={}), "key 'documents': expected a list"),
        (lambda d: d["documents"][0].update(file="../x.json"), r"documents\[0\]\.file.*not a bare file name"),
        (lambda d: d["documents"][0].update(file="a/b.json"), r"documents\[0\]\.file.*not a bare file name"),
        (lambda d: d["documents"][0].update(file="graph_manifest.json"), "one of Foundry's own files"),
        (
            lambda d: d["documents"][0].update(bytes=MAX_DOCUMENT_BYTES + 1),
            r"documents\[0\]\.bytes.*is more than the \d+ bytes a reader takes",
        ),
        (lambda d: d["documents"].append(dict(d["documents"][0])), "a document is listed twice"),
        (lambda d: d["documents"][0].update(file="graph_0.json"), "document 'graph_0.json' is listed as a graph too"),
    ],
)
def test_a_manifest_listing_documents_against_the_rules_is_refused(archive: Path, edit: Any, why: str) -> None:
    path = archive / "graph_manifest.json"
    doc = load_doc(path)
    edit(doc)
    write_doc(path, doc)
    with pytest.raises(ArchiveCorruptError, match=why):
        read_manifest(archive)


def test_an_inconsistent_listing_is_not_written(tmp_path: Path, archive: Path) -> None:
    manifest = read_manifest(archive)
    twice = dataclasses.replace(manifest, documents=manifest.documents * 2)
    with pytest.raises(ValueError, match="a document is listed twice"):
        write_manifest(tmp_path / "other", twice)


# ---------------------------------------------------------------------------------------------- reading
def test_a_listed_document_reads_back_as_written(archive: Path) -> None:
    assert foundry.read_archive_document(archive, NAME) == DOC


@pytest.mark.parametrize("damage", ["edited", "longer", "shorter", "gone", "unlisted", "a link out", "no manifest"])
def test_a_document_the_manifest_does_not_vouch_for_is_refused_by_name(
    archive: Path, tmp_path: Path, damage: str
) -> None:
    path = archive / NAME
    data = path.read_bytes()
    why = {
        "edited": r"tool_plugin\.json: the document's content SHA-256 is [0-9a-f]+, the archive lists",
        "longer": r"tool_plugin\.json: the document is \d+ bytes, the archive says",
        "shorter": r"tool_plugin\.json: the document is \d+ bytes, the archive says",
        "gone": r"tool_plugin\.json: the document is missing",
        "unlisted": r"tool_plugin\.json: the manifest .* does not list this document: the archive was saved by",
        "a link out": r"tool_plugin\.json: the document resolves to .* outside",
        "no manifest": r"no graph_manifest\.json",
    }[damage]
    if damage == "edited":
        path.write_bytes(data.replace(b"2, 3", b"2, 4"))
    elif damage == "longer":
        path.write_bytes(data + b" ")
    elif damage == "shorter":
        path.write_bytes(data[:-1])
    elif damage == "gone":
        path.unlink()
    elif damage == "unlisted":
        remanifest(archive)
    elif damage == "a link out":
        outside = tmp_path / "outside.json"
        outside.write_bytes(data)
        path.unlink()
        os.symlink(outside, path)
    else:
        (archive / "graph_manifest.json").unlink()
    with pytest.raises(ArchiveCorruptError, match=why):
        foundry.read_archive_document(archive, NAME)


def test_reading_is_bounded_by_the_listed_size(archive: Path) -> None:
    """A document grown to gigabytes is refused from its size, before a byte of it is read."""
    with open(archive / NAME, "r+b") as f:
        f.truncate(8 << 30)  # sparse: nothing is written
    with pytest.raises(ArchiveCorruptError, match=r"is 8589934592 bytes, the archive says"):
        foundry.read_archive_document(archive, NAME)


def test_with_a_key_the_signature_is_proven_first_and_covers_the_documents(archive: Path) -> None:
    ref = document_ref(archive, NAME)
    remanifest(archive, documents=(ref,), key=KEY)
    assert foundry.read_archive_document(archive, NAME, signing_key=KEY) == DOC
    with pytest.raises(ArchiveSignatureError, match="is signed with key"):  # another key
        foundry.read_archive_document(archive, NAME, signing_key=SigningKey(b"another key, thirty-two bytes ."))
    # changed, and listed again by someone without the key: the manifest is no longer signed
    forged = write_document(archive, NAME, {**DOC, "steps": ["os:system"]})
    remanifest(archive, documents=(forged,))
    with pytest.raises(ArchiveSignatureError, match="is not signed, and signing key"):
        foundry.read_archive_document(archive, NAME, signing_key=KEY)
    # changed under a signed manifest: refused as the signature's, not only as damage
    remanifest(archive, documents=(ref,), key=KEY)
    with pytest.raises(ArchiveSignatureError, match=r"the document is \d+ bytes.*signed with key .* lists other bytes"):
        foundry.read_archive_document(archive, NAME, signing_key=KEY)
    # a signed manifest that lists no such document
    remanifest(archive, key=KEY)
    with pytest.raises(ArchiveSignatureError, match="does not list this document"):
        foundry.read_archive_document(archive, NAME, signing_key=KEY)


def test_the_signature_covers_the_listing(archive: Path) -> None:
    """Changing what the signed manifest says of a document (its hash, to match a forged file) breaks it."""
    remanifest(archive, documents=(document_ref(archive, NAME),), key=KEY)
    forged = write_document(archive, NAME, {**DOC, "steps": []})
    path = archive / "graph_manifest.json"
    doc = load_doc(path)
    doc["documents"] = [forged.to_json()]  # the signature kept as it was
    write_doc(path, doc)
    with pytest.raises(ArchiveSignatureError, match="does not match the content"):
        foundry.read_archive_document(archive, NAME, signing_key=KEY)
    report = verify_archive(archive, key=KEY)
    assert [p.check for p in report.problems] == [Check.SIGNATURE]


# ---------------------------------------------------------------------------------------------- foundry verify
def test_verify_passes_an_archive_with_a_sound_document(archive: Path) -> None:
    report = verify_archive(archive, current_identity=sample_identity())
    assert report.ok, [str(p) for p in report.problems]
    assert {c.check: c.status for c in report.checks}[Check.FOREIGN] == "passed"  # the document is the archive's


@pytest.mark.parametrize(
    ("damage", "kind", "why"),
    [
        ("edited", ProblemKind.CHECKSUM, "document's content SHA-256 is"),
        ("truncated", ProblemKind.CHECKSUM, "document is 10 bytes, the archive says"),
        ("gone", ProblemKind.MISSING, "is missing"),
        ("not sealed", ProblemKind.CORRUPT, "no 'digest' key at the end"),
    ],
)
def test_verify_reports_a_damaged_document_by_name(archive: Path, damage: str, kind: ProblemKind, why: str) -> None:
    path = archive / NAME
    if damage == "edited":
        path.write_bytes(path.read_bytes().replace(b"2, 3", b"2, 4"))
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:10])
    elif damage == "gone":
        path.unlink()
    else:  # plain JSON, listed with its own size and hash (as a forger would list it)
        plain = json.dumps(DOC).encode()
        path.write_bytes(plain)
        remanifest(archive, documents=(RecordRef(NAME, len(plain), sha256_bytes(plain)),))
    problems = only_failure(verify_archive(archive), Check.FILES)
    assert problem(verify_archive(archive), Check.FILES, kind, NAME, why) in problems


def test_verify_reports_an_unlisted_document_as_foreign(archive: Path) -> None:
    """What an older Foundry wrote: the plugin's metadata beside a manifest that does not list it."""
    remanifest(archive)
    report = verify_archive(archive)
    only_failure(report, Check.FOREIGN)
    problem(report, Check.FOREIGN, ProblemKind.FOREIGN, NAME, "a graph file or document the manifest does not list")


def test_a_document_can_take_none_of_foundrys_own_names() -> None:
    """storage/documents.py spells the manifest's name itself (archive/manifest.py imports it): they agree."""
    assert document_name_problem(MANIFEST_NAME) == document_name_problem(REGION_HINT) == "is one of Foundry's own files"
