"""Manifest signatures (foundry.trust.signing, foundry.gate): keys, the HMAC over the manifest,
`verify_archive(key=...)`, and LOAD's CPU-side check in read_source, on archives built in-process."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from foundry import _state
from foundry.archive import MANIFEST_NAME, read_manifest
from foundry.errors import ArchiveCorruptError, ArchiveSignatureError
from foundry.gate import authenticate_manifest, check_signature
from foundry.gate import manifests as proven
from foundry.load import preflight
from foundry.load.source import read_source
from foundry.storage import sha256_file
from foundry.trust.signing import (
    KEY_ENV,
    SigningKey,
    canonical_bytes,
    configured_key,
    set_signing_key,
    sign_document,
)
from foundry.verify import Check, ProblemKind, verify_archive
from tests.support.archive_damage import edit_doc
from tests.support.verify_archives import build_archive, remanifest

KEY = SigningKey(b"k" * 32, "test key")
OTHER = SigningKey(b"o" * 32, "other key")


@pytest.fixture(autouse=True)
def no_configured_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(KEY_ENV, raising=False)
    set_signing_key(None)
    yield
    set_signing_key(None)


@pytest.fixture
def signed(tmp_path: Path) -> Path:
    return build_archive(tmp_path / "arch", key=KEY)


def edit_manifest(archive: Path, edit: object) -> None:
    """An edit as a forger makes it: the seal is a checksum anyone can compute, so it is made again;
    only the signature cannot be."""
    edit_doc(archive / MANIFEST_NAME, edit)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ primitives
def test_signature_layout_and_canonical_form() -> None:
    doc = {"format": "foundry-archive", "b": [1, 2], "a": {"y": 1, "x": "é"}}
    sig = sign_document(doc, KEY)
    assert sig["algorithm"] == "hmac-sha256"
    assert sig["key_id"] == hashlib.sha256(b"k" * 32).hexdigest()[:16] == KEY.key_id
    assert canonical_bytes(doc) == '{"a":{"x":"é","y":1},"b":[1,2],"format":"foundry-archive"}'.encode()
    reordered = {"a": {"x": "é", "y": 1}, "format": "foundry-archive", "b": [1, 2], "signature": sig}
    assert sign_document(reordered, KEY) == sig  # key order and an existing signature do not matter
    check_signature(reordered, KEY, "m.json")


@pytest.mark.parametrize(
    ("doc", "key", "fragments"),
    [
        ({"a": 1}, KEY, ["m.json is not signed", KEY.key_id]),
        (
            {"a": 1, "signature": sign_document({"a": 1}, OTHER)},
            KEY,
            [OTHER.key_id, f"not with the configured key {KEY.key_id}"],
        ),
        ({"a": 2, "signature": sign_document({"a": 1}, KEY)}, KEY, ["changed after it was signed"]),
        ({"a": 1, "signature": {"alg": "ed25519", "value": "abc"}}, KEY, ["not a hmac-sha256 signature"]),
    ],
    ids=["unsigned", "other-key", "tampered", "unknown-form"],
)
def test_check_signature_says_what_is_wrong(doc: dict[str, object], key: SigningKey, fragments: list[str]) -> None:
    with pytest.raises(ArchiveSignatureError) as err:
        check_signature(doc, key, "m.json")
    for fragment in fragments:
        assert fragment in str(err.value)


def test_key_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert configured_key() is None
    key_file = tmp_path / "foundry.key"
    key_file.write_bytes(b"s" * 32)
    monkeypatch.setenv(KEY_ENV, str(key_file))
    assert configured_key() == SigningKey(b"s" * 32, str(key_file))
    assert configured_key(b"e" * 20).secret == b"e" * 20  # explicit wins
    set_signing_key(KEY)
    assert configured_key() is KEY  # then the process-wide key
    set_signing_key(None)
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "missing.key"))
    with pytest.raises(ArchiveSignatureError, match=f"missing.key cannot be read.*unset {KEY_ENV}"):
        configured_key()
    with pytest.raises(ArchiveSignatureError, match="at least 16"):
        SigningKey(b"short")
    assert "secret" not in repr(KEY) and "kkkk" not in repr(KEY)


# ------------------------------------------------------------------------------------------ verify
def test_signed_archive_verifies_with_its_key(signed: Path) -> None:
    assert read_manifest(signed).signature["key_id"] == KEY.key_id
    report = verify_archive(signed, key=KEY)
    assert report.ok, [str(p) for p in report.problems]
    assert {c.check: c.status for c in report.checks}[Check.SIGNATURE] == "passed"
    assert verify_archive(signed / "graph_1.json", key=KEY.secret).ok  # a member and its template
    unchecked = verify_archive(signed)
    assert unchecked.ok and f"signed with key {KEY.key_id}" in unchecked.checks[-1].reason


@pytest.mark.parametrize(
    ("make", "key", "fragment"),
    [
        (lambda a: remanifest(a), KEY, "is not signed"),
        (lambda a: None, OTHER, f"is signed with key {KEY.key_id}, not with the configured key {OTHER.key_id}"),
        (
            lambda a: edit_manifest(a, lambda d: d.update(created="2030-01-01T00:00:00+01:00")),
            KEY,
            "changed after it was signed",
        ),
    ],
    ids=["unsigned", "other-key", "manifest-edited"],
)
def test_signature_problems_are_found(signed: Path, make: object, key: SigningKey, fragment: str) -> None:
    make(signed)  # type: ignore[operator]
    report = verify_archive(signed, key=key)
    failed = {c.check for c in report.checks if c.status == "failed"}
    assert failed == {Check.SIGNATURE}, [str(p) for p in report.problems]
    (p,) = report.problems
    assert p.kind == ProblemKind.SIGNATURE and p.path.endswith(MANIFEST_NAME) and fragment in p.message


def test_graph_tampered_after_signing_with_its_checksum_forged(signed: Path) -> None:
    """A forger edits a graph JSON and its checksum in the manifest, but cannot sign."""
    path = signed / "graph_0.json"
    edit_doc(path, lambda d: d.update(foundry_version="0.1.9"))
    edit_manifest(signed, lambda d: d["graphs"][0].update(json_sha256=sha256_file(path)))
    report = verify_archive(signed, key=KEY)
    assert [(p.check, p.kind) for p in report.problems] == [(Check.SIGNATURE, ProblemKind.SIGNATURE)]
    one = verify_archive(path, key=KEY)
    assert [p.check for p in one.problems] == [Check.SIGNATURE]
    assert "graph_0.json is not listed" not in one.problems[0].message
    assert "signature does not match" in one.problems[0].message


def test_single_graph_changed_after_signing(signed: Path) -> None:
    path = signed / "graph_1.json"
    edit_doc(path, lambda d: d.update(name="graph_1x"))  # sealed again, but not what was signed
    report = verify_archive(path, key=KEY)
    (p,) = report.problems
    assert p.check == Check.SIGNATURE and "graph_1.json: the graph JSON's SHA-256 is" in p.message
    assert "changed after the manifest was written" in p.message
    # Not even sealed: refused all the same before anything decodes it, by the signed manifest's hash of it.
    path.write_bytes(path.read_bytes() + b" ")
    (p,) = verify_archive(path, key=KEY).problems
    assert p.check == Check.SIGNATURE and "graph_1.json: the graph JSON's SHA-256 is" in p.message
    assert "changed after the manifest was written" in p.message
    (p,) = verify_archive(path).problems  # no key: damage
    assert (p.check, p.kind) == (Check.FILES, ProblemKind.CHECKSUM) and "not read further" in p.message


# ------------------------------------------------------------------------------------------ LOAD (CPU part)
def test_read_source_with_a_key_configured(signed: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from foundry.load.source import read_source

    key_file = tmp_path / "foundry.key"
    key_file.write_bytes(KEY.secret)
    monkeypatch.setenv(KEY_ENV, str(key_file))
    src = read_source(signed / "graph_1.json")
    assert src.template is not None and src.template.meta.name == "graph_0"
    assert authenticate_manifest(signed, KEY).signature["key_id"] == KEY.key_id
    key_file.write_bytes(OTHER.secret)
    with pytest.raises(ArchiveSignatureError, match=f"signed with key {KEY.key_id}"):
        read_source(signed / "graph_0.json")
    monkeypatch.delenv(KEY_ENV)
    read_source(signed / "graph_0.json")  # no key configured: no check


def test_read_source_refuses_unlisted_graph(signed: Path) -> None:
    from foundry.load.source import read_source

    (signed / "copy.json").write_bytes((signed / "graph_0.json").read_bytes())
    set_signing_key(KEY)
    with pytest.raises(ArchiveSignatureError, match=r"copy\.json is not listed in the signed manifest"):
        read_source(signed / "copy.json")


def test_a_batch_of_graphs_reads_each_manifest_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LOAD reads its graphs as one batch: the manifest is read and checked once for all of them (each
    member's template included), not once per graph; outside a batch each read checks it afresh, and a
    damaged manifest is still refused inside one."""
    _state.reset_all()
    arch = tmp_path / "arch"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "gpu_archive", arch)
    reads: list[Path] = []
    real = proven._read_verified
    monkeypatch.setattr(proven, "_read_verified", lambda d, k: reads.append(d) or real(d, k))
    paths = [arch / "ew_bs32.json", arch / "ew_bs64.json"]  # a template and its member
    assert [s.meta.name for s in preflight(paths)] == ["ew_bs32", "ew_bs64"]
    assert len(reads) == 1
    reads.clear()
    for p in paths:
        read_source(p)
    assert len(reads) >= len(paths)
    (arch / MANIFEST_NAME).write_bytes((arch / MANIFEST_NAME).read_bytes().replace(b'"', b"'", 1))
    with pytest.raises(ArchiveCorruptError):
        preflight(paths)


def test_the_archives_region_is_its_manifests_proven_as_load_proves_it(signed: Path) -> None:
    """``foundry.read_archive_region``: the region a finished archive states once, in its manifest (an engine's
    metadata refers to it), read as LOAD reads the manifest: sealed, and signed under a key."""
    import foundry

    region = foundry.read_archive_region(signed)
    assert region == read_manifest(signed).region
    assert foundry.read_archive_region(signed, signing_key=KEY) == region
    with pytest.raises(ArchiveSignatureError, match="is signed with key"):
        foundry.read_archive_region(signed, signing_key=OTHER)
    edit_manifest(signed, lambda d: d["region"].update(high_water=d["region"]["high_water"] + 1))
    with pytest.raises(ArchiveSignatureError, match="does not match the content"):
        foundry.read_archive_region(signed, signing_key=KEY)
    (signed / MANIFEST_NAME).unlink()
    with pytest.raises(ArchiveCorruptError, match=r"no graph_manifest\.json"):
        foundry.read_archive_region(signed)
