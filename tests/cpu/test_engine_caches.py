"""An engine's caches in an archive (docs/FORMAT.md, "Engine caches"): packed byte for byte and listed, handed
out only from an archive signed with the key in force and made with this process's versions, every byte checked
as it is copied into a new directory; paths that would leave it, links, devices and listings past the bounds
refused by name. No engine here: foundry's own functions on files."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

import foundry
from foundry.errors import ArchiveCorruptError, CachesRefusedError, SaveError
from foundry.schema import CACHES_DOCUMENT, MAX_CACHE_BYTES, MAX_CACHE_FILE_BYTES, CachePayload
from foundry.schema.jsondocs import load_sealed
from foundry.storage import cache_blob_path
from foundry.verify import verify_archive
from tests.support.fakefoundry import write_fake_manifest

IDENTITY = {"vllm": "0.26.0", "torch": "2.11.0", "triton": "3.6.0", "gpu": "Fake H200"}


@pytest.fixture
def key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "foundry.key"
    path.write_bytes(b"a signing key of thirty-two byte")
    monkeypatch.setenv("FOUNDRY_SIGNING_KEY", str(path))
    return path


def _cache_dir(root: Path) -> dict[str, Path]:
    """A Triton-like cache directory: two kernels' entries, files by their path in it."""
    files = {"K1/k.cubin": b"\x7fELF cubin", "K1/__grp__k.json": b'{"child_paths": {}}', "K2/launcher.so": b"so"}
    out = {}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        out[rel] = root / rel
    return out


def _archive(tmp_path: Path, trees: dict[str, dict[str, Path]] | None = None) -> Path:
    archive = tmp_path / "archive"
    archive.mkdir()
    name = foundry.pack_engine_caches(archive, IDENTITY, trees or {"triton": _cache_dir(tmp_path / "triton")})
    write_fake_manifest(archive, [name])  # signed when a key is in force, as SAVE signs
    return archive


def _relist(archive: Path, edit: Any) -> None:
    """The listing rewritten by someone holding the key: sealed, listed and signed again."""
    doc = dict(load_sealed((archive / CACHES_DOCUMENT).read_bytes(), CACHES_DOCUMENT))
    edit(doc)
    foundry.write_archive_document(archive, CACHES_DOCUMENT, doc)
    write_fake_manifest(archive, [CACHES_DOCUMENT])


def test_packed_files_are_copied_out_byte_for_byte_into_a_new_private_directory(tmp_path: Path, key: Path) -> None:
    archive = _archive(tmp_path)
    dest = tmp_path / "node" / "caches"
    dest.parent.mkdir()
    dirs = foundry.open_engine_caches(archive, IDENTITY, dest)
    assert dirs == {"triton": dest / "triton"}
    assert (dest / "triton" / "K1" / "k.cubin").read_bytes() == b"\x7fELF cubin"
    assert (dest / "triton" / "K2" / "launcher.so").read_bytes() == b"so"
    assert stat.S_IMODE(dest.stat().st_mode) == 0o700
    listed = CachePayload.from_json(foundry.read_archive_document(archive, CACHES_DOCUMENT), "listing")
    assert dict(listed.identity) == IDENTITY
    for file in listed.trees[0].files:
        assert cache_blob_path(archive, file.sha256).read_bytes() == (tmp_path / "triton" / file.path).read_bytes()


def test_an_archive_without_caches_opens_none(tmp_path: Path, key: Path) -> None:
    archive = tmp_path / "archive"
    archive.mkdir()
    write_fake_manifest(archive, [])
    assert foundry.open_engine_caches(archive, IDENTITY, tmp_path / "dest") is None
    assert not (tmp_path / "dest").exists()


def test_without_a_key_in_force_the_caches_are_refused_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = _archive(tmp_path)  # no key: unsigned
    with pytest.raises(CachesRefusedError, match=r"engine_caches\.json: .*compiled code.*no key is configured.*"
                       r"FOUNDRY_SIGNING_KEY.*or run SAVE without packing caches"):  # fmt: skip
        foundry.open_engine_caches(archive, IDENTITY, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_an_unsigned_archive_is_refused_where_a_key_is_in_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = _archive(tmp_path)  # unsigned
    key = tmp_path / "foundry.key"
    key.write_bytes(b"a signing key of thirty-two byte")
    monkeypatch.setenv("FOUNDRY_SIGNING_KEY", str(key))
    with pytest.raises(CachesRefusedError, match=r"cannot be used: .*not signed"):
        foundry.open_engine_caches(archive, IDENTITY, tmp_path / "dest")


@pytest.mark.parametrize(("field", "value"), [("triton", "3.5.1"), ("torch", "2.10.0"), ("gpu", "Fake H100")])
def test_caches_made_with_other_versions_are_refused_naming_each(
    tmp_path: Path, key: Path, field: str, value: str
) -> None:
    archive = _archive(tmp_path)
    here = {**IDENTITY, field: value}
    with pytest.raises(CachesRefusedError, match=rf"{field}: saved '{IDENTITY[field]}', here '{value}'"):
        foundry.open_engine_caches(archive, here, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_a_field_this_process_does_not_know_refuses_them(tmp_path: Path, key: Path) -> None:
    archive = _archive(tmp_path)
    here = {k: v for k, v in IDENTITY.items() if k != "triton"}
    with pytest.raises(CachesRefusedError, match=r"triton: saved '3\.6\.0', here None"):
        foundry.open_engine_caches(archive, here, tmp_path / "dest")


def test_a_damaged_file_refuses_the_caches_and_leaves_no_copy(tmp_path: Path, key: Path) -> None:
    archive = _archive(tmp_path)
    blob = next((archive / "caches").iterdir())
    blob.write_bytes(b"X" * blob.stat().st_size)  # same size, other bytes
    with pytest.raises(CachesRefusedError, match=r"has SHA-256 .* the listing says .*damaged or changed"):
        foundry.open_engine_caches(archive, IDENTITY, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_a_stored_file_replaced_by_a_link_or_a_fifo_is_refused(tmp_path: Path, key: Path) -> None:
    archive = _archive(tmp_path)
    blobs = sorted((archive / "caches").iterdir())
    outside = tmp_path / "outside"
    outside.write_bytes(blobs[0].read_bytes())
    blobs[0].unlink()
    blobs[0].symlink_to(outside)
    with pytest.raises(CachesRefusedError, match=r"cannot be read|leaves|link"):
        foundry.open_engine_caches(archive, IDENTITY, tmp_path / "dest")
    blobs[0].unlink()
    os.mkfifo(blobs[0])
    with pytest.raises(CachesRefusedError, match=r"not a regular file"):
        foundry.open_engine_caches(archive, IDENTITY, tmp_path / "dest2")


@pytest.mark.parametrize(
    "path", ["../escape", "/etc/passwd", "a/../../b", "a//b", "./a", "a/.", "a\\b", "a\0b", "", "/".join("d" * 17)]
)
def test_a_listed_path_that_would_leave_its_directory_is_refused(tmp_path: Path, key: Path, path: str) -> None:
    archive = _archive(tmp_path)
    _relist(archive, lambda doc: doc["caches"][0]["files"][0].update(path=path))
    with pytest.raises(CachesRefusedError, match=r"key 'caches\[0\]\.files\[0\]\.path'"):
        foundry.open_engine_caches(archive, IDENTITY, tmp_path / "dest")
    assert not (tmp_path / "dest").exists() and not (tmp_path / "escape").exists()


def test_a_path_listed_as_file_and_directory_or_twice_is_refused(tmp_path: Path, key: Path) -> None:
    archive = _archive(tmp_path)
    _relist(archive, lambda doc: doc["caches"][0]["files"][0].update(path="K1"))
    with pytest.raises(CachesRefusedError, match=r"lists 'K1' as a file and as a directory"):
        foundry.open_engine_caches(archive, IDENTITY, tmp_path / "dest")
    _relist(archive, lambda doc: doc["caches"][0]["files"][1].update(path=doc["caches"][0]["files"][2]["path"]))
    with pytest.raises(CachesRefusedError, match=r"lists a path twice"):
        foundry.open_engine_caches(archive, IDENTITY, tmp_path / "dest")


def test_a_listing_past_the_bounds_is_refused_before_a_byte_is_copied(tmp_path: Path, key: Path) -> None:
    archive = _archive(tmp_path)
    _relist(archive, lambda doc: doc["caches"][0]["files"][0].update(bytes=MAX_CACHE_FILE_BYTES + 1))
    with pytest.raises(CachesRefusedError, match=r"files\[0\]\.bytes': \d+ is outside 0\.\.\d+"):
        foundry.open_engine_caches(archive, IDENTITY, tmp_path / "dest")

    def huge(doc: dict[str, Any]) -> None:
        first = doc["caches"][0]["files"][0]
        doc["caches"][0]["files"] = [{**first, "path": f"big/{i}", "bytes": MAX_CACHE_FILE_BYTES} for i in range(5)]

    _relist(archive, huge)
    with pytest.raises(CachesRefusedError, match=rf"hold more than {MAX_CACHE_BYTES} bytes, more than a reader takes"):
        foundry.open_engine_caches(archive, IDENTITY, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_a_cache_name_outside_the_readers_table_is_refused(tmp_path: Path, key: Path) -> None:
    archive = _archive(tmp_path)
    _relist(archive, lambda doc: doc["caches"][0].update(name="../x"))
    with pytest.raises(CachesRefusedError, match=r"is not a cache name"):
        foundry.open_engine_caches(archive, IDENTITY, tmp_path / "dest")


def test_pack_refuses_links_and_devices_by_name(tmp_path: Path) -> None:
    files = _cache_dir(tmp_path / "triton")
    link = tmp_path / "triton" / "K1" / "link.so"
    link.symlink_to(files["K2/launcher.so"])
    archive = tmp_path / "archive"
    archive.mkdir()
    with pytest.raises(SaveError, match=r"link\.so: the engine cache file cannot be read"):
        foundry.pack_engine_caches(archive, IDENTITY, {"triton": {**files, "K1/link.so": link}})
    fifo = tmp_path / "triton" / "K1" / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(SaveError, match=r"fifo: the engine cache holds something other than a regular file"):
        foundry.pack_engine_caches(archive, IDENTITY, {"triton": {**files, "K1/fifo": fifo}})
    with pytest.raises(SaveError, match=r"the cache path '\.\./x' has an empty, '\.' or '\.\.' component"):
        foundry.pack_engine_caches(archive, IDENTITY, {"triton": {"../x": files["K2/launcher.so"]}})
    assert not (archive / CACHES_DOCUMENT).exists()


def test_verify_counts_the_stored_files_as_the_archives_and_finds_a_damaged_one(tmp_path: Path, key: Path) -> None:
    archive = _archive(tmp_path)
    report = verify_archive(archive, key=key)
    assert not [p for p in report.problems if p.check.value in ("files", "foreign")], report.problems
    blob = next((archive / "caches").iterdir())
    blob.write_bytes(b"X" * blob.stat().st_size)
    problems = [p for p in verify_archive(archive, key=key).problems if p.check.value == "files"]
    with pytest.raises(CachesRefusedError) as refused:  # LOAD's refusal, and verify's report of it: one message
        foundry.open_engine_caches(archive, IDENTITY, tmp_path / "dest")
    assert str(refused.value) in [p.message for p in problems] and "has SHA-256" in str(refused.value), problems
    (archive / "caches" / f"{'ab' * 32}.bin").write_bytes(b"left over")
    foreign = [p for p in verify_archive(archive, key=key).problems if p.check.value == "foreign"]
    assert [Path(p.path).name for p in foreign] == [f"{'ab' * 32}.bin"]


def test_the_listing_is_sealed_and_covered_by_the_manifest(tmp_path: Path, key: Path) -> None:
    archive = _archive(tmp_path)
    doc = archive / CACHES_DOCUMENT
    doc.write_bytes(doc.read_bytes().replace(b"3.6.0", b"3.6.1"))
    with pytest.raises((CachesRefusedError, ArchiveCorruptError)):
        foundry.open_engine_caches(archive, {**IDENTITY, "triton": "3.6.1"}, tmp_path / "dest")


def test_packing_again_into_the_finished_archive_lists_the_new_files_and_signs_the_manifest_again(
    tmp_path: Path, key: Path
) -> None:
    files = _cache_dir(tmp_path / "triton")
    archive = _archive(tmp_path, {"triton": files})
    before = foundry.read_archive_document(archive, CACHES_DOCUMENT)
    (tmp_path / "triton" / "K3").mkdir()
    (tmp_path / "triton" / "K3" / "late.cubin").write_bytes(b"compiled at the first request")
    files["K3/late.cubin"] = tmp_path / "triton" / "K3" / "late.cubin"
    assert foundry.pack_engine_caches(archive, IDENTITY, {"triton": files}, update_manifest=True) == CACHES_DOCUMENT
    dest = tmp_path / "node"
    dirs = foundry.open_engine_caches(archive, IDENTITY, dest)  # proven under the key: signed again
    assert dirs is not None and (dirs["triton"] / "K3" / "late.cubin").read_bytes() == b"compiled at the first request"
    after = foundry.read_archive_document(archive, CACHES_DOCUMENT)
    assert after != before and len(after["caches"][0]["files"]) == len(before["caches"][0]["files"]) + 1


def test_packing_again_that_is_refused_leaves_the_listing_and_manifest_as_they_were(
    tmp_path: Path, key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _cache_dir(tmp_path / "triton")
    archive = _archive(tmp_path, {"triton": files})
    listing, manifest = (archive / CACHES_DOCUMENT).read_bytes(), (archive / "graph_manifest.json").read_bytes()
    link = tmp_path / "triton" / "K1" / "link.so"
    link.symlink_to(files["K2/launcher.so"])
    with pytest.raises(SaveError, match=r"link\.so: the engine cache file cannot be read"):
        foundry.pack_engine_caches(archive, IDENTITY, {"triton": {**files, "K1/link.so": link}}, update_manifest=True)
    other = tmp_path / "other.key"
    other.write_bytes(b"another key, of thirty-two bytes")
    monkeypatch.setenv("FOUNDRY_SIGNING_KEY", str(other))  # the manifest is signed with the first key
    with pytest.raises(SaveError, match=r"cannot be listed in the archive again: .*signed with key"):
        foundry.pack_engine_caches(archive, IDENTITY, {"triton": files}, update_manifest=True)
    monkeypatch.delenv("FOUNDRY_SIGNING_KEY")
    with pytest.raises(SaveError, match=r"is signed, and no signing key is configured to sign it again"):
        foundry.pack_engine_caches(archive, IDENTITY, {"triton": files}, update_manifest=True)
    assert (archive / CACHES_DOCUMENT).read_bytes() == listing
    assert (archive / "graph_manifest.json").read_bytes() == manifest
    monkeypatch.setenv("FOUNDRY_SIGNING_KEY", str(key))
    assert foundry.open_engine_caches(archive, IDENTITY, tmp_path / "node") is not None


def test_an_unsigned_archive_is_not_signed_by_packing_again_under_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = _archive(tmp_path)  # no key in force: the manifest is sealed, not signed
    manifest = (archive / "graph_manifest.json").read_bytes()
    path = tmp_path / "foundry.key"
    path.write_bytes(b"a signing key of thirty-two byte")
    monkeypatch.setenv("FOUNDRY_SIGNING_KEY", str(path))
    with pytest.raises(SaveError, match=r"is not signed"):
        foundry.pack_engine_caches(archive, IDENTITY, {"triton": _cache_dir(tmp_path / "t2")}, update_manifest=True)
    assert (archive / "graph_manifest.json").read_bytes() == manifest


def test_a_file_that_changed_between_two_packs_leaves_no_unlisted_stored_file(tmp_path: Path, key: Path) -> None:
    files = _cache_dir(tmp_path / "triton")
    archive = _archive(tmp_path, {"triton": files})
    stored = {p.name for p in (archive / "caches").iterdir()}
    (tmp_path / "triton" / "K2" / "launcher.so").write_bytes(b"so, built again")
    foundry.pack_engine_caches(archive, IDENTITY, {"triton": files}, update_manifest=True)
    now = {p.name for p in (archive / "caches").iterdir()}
    assert len(now) == len(stored) and now != stored  # the old launcher's bytes went with its listing
    assert not [p for p in verify_archive(archive, key=key).problems if p.check.value in ("files", "foreign")]
    dirs = foundry.open_engine_caches(archive, IDENTITY, tmp_path / "node")
    assert dirs is not None and (dirs["triton"] / "K2" / "launcher.so").read_bytes() == b"so, built again"


def test_small_files_of_one_cache_are_read_whole_as_listed_and_signed(
    tmp_path: Path, key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = _archive(tmp_path)
    wanted = foundry.read_engine_cache_files(archive, "triton", lambda path: path.startswith("K1/"))
    assert wanted == {"K1/k.cubin": b"\x7fELF cubin", "K1/__grp__k.json": b'{"child_paths": {}}'}
    assert foundry.read_engine_cache_files(archive, "vllm", lambda path: True) == {}  # no such cache
    blob = next(p for p in (archive / "caches").iterdir() if p.read_bytes() == b"so")
    blob.write_bytes(b"SO")
    with pytest.raises(CachesRefusedError, match=r"has SHA-256"):
        foundry.read_engine_cache_files(archive, "triton", lambda path: path == "K2/launcher.so")
    monkeypatch.delenv("FOUNDRY_SIGNING_KEY")
    with pytest.raises(CachesRefusedError, match=r"only from an archive signed with a key in force"):
        foundry.read_engine_cache_files(archive, "triton", lambda path: True)
    bare = tmp_path / "bare"
    bare.mkdir()
    write_fake_manifest(bare, [])
    assert foundry.read_engine_cache_files(bare, "triton", lambda path: True) == {}  # an archive without caches
