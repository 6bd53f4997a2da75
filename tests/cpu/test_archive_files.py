"""The .cugraph container and one graph's pair of files (atomic writes and paths: test_storage_files.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest

import foundry.archive.graphfile as graphfile
from foundry.archive import container_path, read_graph, read_manifest, read_meta, resolve_archive_dir, write_graph
from foundry.errors import ArchiveCorruptError, ArchiveForeignError, ArchiveVersionError
from foundry.records import parse_record, read_container_header, topology_key
from foundry.records.container import pack_container, unpack_container
from foundry.schema import GraphMeta
from foundry.storage import TEMP_SUFFIX, read_region_hint, sha256_bytes
from tests.support.archive_damage import load_doc, write_doc
from tests.support.encode import encode_record
from tests.support.samples import random_record, sample_meta, sample_record

IMAGES = (b"\x7fELF image one" * 10, b"\x7fELF image two" * 10)


def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(TEMP_SUFFIX)]


# ---------------------------------------------------------------- container


def test_container_round_trip_and_layout() -> None:
    record = encode_record(sample_record())
    data = pack_container(record)
    assert data[:8] == b"FDYGRAPH"
    assert struct.unpack_from("<IIQQ", data, 8) == (1, 0, 64, len(record))
    assert data[32:64] == hashlib.sha256(record).digest()
    assert unpack_container(data) == record
    header = read_container_header(data)
    assert (header.record_offset, header.record_size, header.sha256) == (
        64,
        len(record),
        sha256_bytes(record),
    )


@pytest.mark.parametrize(
    ("mutate", "error", "needle"),
    [
        (lambda d: b"NOTAGRPH" + d[8:], ArchiveForeignError, "not a Foundry graph container"),
        (lambda d: d[:8] + struct.pack("<I", 7) + d[12:], ArchiveVersionError, "container version"),
        (lambda d: d[:12] + struct.pack("<I", 1) + d[16:], ArchiveCorruptError, "flags"),
        (lambda d: d[:16] + struct.pack("<Q", 72) + d[24:], ArchiveCorruptError, "record offset"),
        (lambda d: d[:-8], ArchiveCorruptError, "record size"),
        (lambda d: d + b"\0", ArchiveCorruptError, "appended"),
        (lambda d: d[:40], ArchiveCorruptError, "truncated"),
        (lambda d: d[:5], ArchiveCorruptError, "truncated"),
        (lambda d: d[:100] + bytes([d[100] ^ 1]) + d[101:], ArchiveCorruptError, "SHA-256"),
        (lambda d: d[:40] + bytes([d[40] ^ 1]) + d[41:], ArchiveCorruptError, "SHA-256"),
    ],
)
def test_container_errors(mutate: object, error: type[Exception], needle: str) -> None:
    data = pack_container(encode_record(sample_record()))
    with pytest.raises(error, match=needle):
        unpack_container(mutate(data), source="g.cugraph")  # type: ignore[operator]


def test_container_without_verify_skips_only_the_hash() -> None:
    data = bytearray(pack_container(encode_record(sample_record())))
    data[100] ^= 1
    assert unpack_container(bytes(data), verify=False)[36] == data[100]


# ---------------------------------------------------------------- graph files


def write_sample(directory: Path, name: str = "graph_0", seed: int | None = None) -> tuple[Path, GraphMeta]:
    record = sample_record() if seed is None else random_record(seed, nodes=20, functions=3)
    meta = sample_meta(name, record, IMAGES, ".")
    path = directory / f"{name}.json"
    return path, write_graph(path, meta, encode_record(record))


def test_write_and_read_graph(tmp_path: Path) -> None:
    path, written = write_sample(tmp_path)
    assert container_path(path) == tmp_path / "graph_0.cugraph"
    record = encode_record(sample_record())
    assert written.record is not None
    assert written.record.file == "graph_0.cugraph"
    assert written.record.sha256 == sha256_bytes(record)
    assert written.record.bytes == len(record)
    meta, data = read_graph(path)
    assert meta == written == read_meta(path)
    assert data == record and parse_record(data) == sample_record()
    assert resolve_archive_dir(path, meta) == tmp_path / "."
    doc = load_doc(path)
    assert list(doc)[:5] == ["format", "format_version", "foundry_version", "name", "record"]
    assert doc["record"] == {"file": "graph_0.cugraph", "bytes": len(record), "sha256": sha256_bytes(record)}
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"events": 5}, "events"),
        ({"topology": "0" * 64}, "topology"),
        ({"functions": ()}, "functions"),
    ],
)
def test_write_graph_refuses_inconsistent_metadata(tmp_path: Path, change: dict[str, Any], needle: str) -> None:
    meta = dataclasses.replace(sample_meta("g", sample_record(), IMAGES, "."), **change)
    with pytest.raises(ValueError, match=needle):
        write_graph(tmp_path / "g.json", meta, encode_record(sample_record()))
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="not valid"):
        write_graph(tmp_path / "g.json", sample_meta("g", sample_record(), IMAGES, "."), b"junk")


def test_mixed_saves_are_detected(tmp_path: Path) -> None:
    path, _ = write_sample(tmp_path, "a")
    (tmp_path / "other").mkdir()
    other, _ = write_sample(tmp_path / "other", "b", seed=1)
    os.replace(container_path(other), container_path(path))  # a.json now meets b's record
    for verify in (True, False):
        with pytest.raises(ArchiveCorruptError, match=r"different saves|from another save"):
            read_graph(path, verify=verify)


def test_damaged_record_is_detected_only_with_verify(tmp_path: Path) -> None:
    path, _ = write_sample(tmp_path)
    cpath = container_path(path)
    data = bytearray(cpath.read_bytes())
    data[200] ^= 0x10
    cpath.write_bytes(bytes(data))
    with pytest.raises(ArchiveCorruptError, match="damaged"):
        read_graph(path)
    _, record = read_graph(path, verify=False)
    assert record == bytes(data[64:])
    meta = read_meta(path)
    with pytest.raises(ArchiveCorruptError, match="damaged"):
        graphfile.read_payload_view(path, meta)
    view = graphfile.read_payload_view(path, meta, verify=False)
    assert not view.readonly and view == record  # LOAD hands it to native code without a copy


def test_record_view_is_the_record(tmp_path: Path) -> None:
    path, _ = write_sample(tmp_path)
    meta, record = read_graph(path)
    view = graphfile.read_payload_view(path, meta)
    assert not view.readonly and bytes(view) == record == encode_record(sample_record())
    os.truncate(container_path(path), 100)
    with pytest.raises(ArchiveCorruptError, match="truncated"):
        graphfile.read_payload_view(path, meta)


def test_missing_record_file(tmp_path: Path) -> None:
    path, _ = write_sample(tmp_path)
    container_path(path).unlink()
    with pytest.raises(ArchiveCorruptError, match=r"graph_0\.cugraph"):
        read_graph(path)


def edit_json(path: Path, edit: object) -> None:
    doc = load_doc(path)
    edit(doc)  # type: ignore[operator]
    write_doc(path, doc)


@pytest.mark.parametrize(
    ("edit", "error", "needle"),
    [
        (lambda d: d.pop("region"), ArchiveCorruptError, "'region': missing"),
        (lambda d: d["region"]["live"].append([0, 1]), ArchiveCorruptError, "region.live"),
        (lambda d: d.update(events=True), ArchiveCorruptError, "'events': expected an integer"),
        (lambda d: d["functions"][0].update(attrs=[1, 2]), ArchiveCorruptError, "functions\\[0\\].attrs"),
        (lambda d: d["functions"][0].update(image="ab" * 32), ArchiveCorruptError, "which 'images' does not"),
        (lambda d: d["identity"].update(compute_capability=[9]), ArchiveCorruptError, "compute_capability"),
        (lambda d: d["record"].update(sha256="XYZ"), ArchiveCorruptError, "record.sha256"),
        (lambda d: d["outputs"][0].update(strides=[1]), ArchiveCorruptError, "outputs\\[0\\].strides"),
        (lambda d: d["images"][next(iter(d["images"]))].update(format="zip"), ArchiveCorruptError, "format"),
        (lambda d: d.update(format="foundry-archive"), ArchiveForeignError, "expected 'foundry-graph'"),
        (lambda d: d.pop("format"), ArchiveForeignError, "no 'format'"),
        (lambda d: d.update(format_version=6), ArchiveVersionError, "format_version 6"),
        (lambda d: d.update(format_version=4), ArchiveCorruptError, "'peers': missing"),
        (lambda d: d.update(format_version=5), ArchiveCorruptError, "none there lists the graph"),
        (lambda d: d.update(format_version="1"), ArchiveCorruptError, "format_version"),
    ],
)
def test_graph_json_validation(tmp_path: Path, edit: object, error: type[Exception], needle: str) -> None:
    path, _ = write_sample(tmp_path)
    edit_json(path, edit)
    with pytest.raises(error, match=needle):
        read_meta(path)


def test_graph_json_tolerates_unknown_keys_and_null_rng(tmp_path: Path) -> None:
    path, written = write_sample(tmp_path)
    edit_json(path, lambda d: d.update(future_key={"x": 1}, rng=None))
    assert read_meta(path) == dataclasses.replace(written, rng=None)


@pytest.mark.parametrize("content", [b"", b"{", b"\xff\xfe", b"[1, 2]", b'{"format": NaN}'])
def test_graph_json_that_is_not_json(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "g.json"
    path.write_bytes(content)
    with pytest.raises((ArchiveCorruptError, ArchiveForeignError)):
        read_meta(path)
    with pytest.raises(ArchiveCorruptError, match="is missing"):
        read_meta(tmp_path / "missing.json")


def test_metadata_is_parsed_once_per_content_by_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from foundry.load.source import read_meta_cached

    path, written = write_sample(tmp_path)
    first, digest = read_meta_cached(path)
    assert digest == sha256_bytes(path.read_bytes())
    parses: list[str] = []
    real = graphfile.GraphMeta.from_json

    def counted(doc: Any, source: str, parts: Any = None, archive: Any = None) -> graphfile.GraphMeta:
        parses.append(source)
        return real(doc, source, parts, archive)

    monkeypatch.setattr(graphfile.GraphMeta, "from_json", counted)
    assert read_meta_cached(path) == (first, digest) and parses == []
    assert read_meta(path) == first and parses == [str(path)]  # the format itself keeps no cache
    # Other bytes are parsed (and checked) afresh, whatever was read from that path before.
    edit_json(path, lambda d: d.update(name="renamed"))
    assert read_meta_cached(path)[0] == dataclasses.replace(written, name="renamed") and len(parses) == 2
    edit_json(path, lambda d: d.pop("region"))
    with pytest.raises(ArchiveCorruptError, match="'region': missing"):
        read_meta_cached(path)


def test_write_graph_fills_an_empty_topology_from_the_record(tmp_path: Path) -> None:
    record = sample_record()
    meta = dataclasses.replace(sample_meta("graph_0", record, IMAGES, "."), topology="")
    written = write_graph(tmp_path / "graph_0.json", meta, encode_record(record))
    assert written.topology == topology_key(record) == read_meta(tmp_path / "graph_0.json").topology


def test_read_buffer_reads_whole_files_and_refuses_one_that_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import foundry.storage.reads as atomic

    path = tmp_path / "blob"
    path.write_bytes(bytes(range(256)) * 3)
    data = atomic.read_regular(path, "file", follow=True)
    assert isinstance(data, bytearray) and data == path.read_bytes()
    real_fstat = os.fstat
    monkeypatch.setattr(atomic.os, "fstat", lambda fd: os.stat_result((*real_fstat(fd)[:6], 1000, *real_fstat(fd)[7:])))
    with pytest.raises(ArchiveCorruptError, match="changed size while it was read"):
        atomic.read_regular(path, "file", follow=True)


FIXTURE_ARCHIVE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_archive"


@pytest.mark.parametrize(
    ("name", "read"),
    [
        ("ew_bs32.json", lambda p: read_meta(p)),
        ("graph_manifest.json", lambda p: read_manifest(p.parent)),
        ("region.json", lambda p: read_region_hint(p.parent)),
    ],
)
def test_an_unsealed_file_of_a_version_before_sealing_is_a_version_error(tmp_path: Path, name: str, read: Any) -> None:
    """Version 1 files carried no seal: they are an older Foundry's, named as such; an unsealed file of a
    sealed version was edited."""
    doc = load_doc(FIXTURE_ARCHIVE / name)
    path = tmp_path / name
    for version, error, needle in ((1, ArchiveVersionError, "format version 1"), (2, ArchiveCorruptError, "digest")):
        doc["format_version"] = version
        path.write_text(json.dumps(doc, indent=2) + "\n")
        with pytest.raises(error, match=needle):
            read(path)


@pytest.mark.parametrize("ranked", [False, True])
def test_a_listed_graph_leaves_its_regions_range_to_the_manifest(tmp_path: Path, ranked: bool) -> None:
    """Format version 5, what SAVE writes for a graph its directory's manifest lists (the bundle's): no base,
    size, granularity or slot size in its region (peers and rank only where it has them), read back whole with the
    manifest's range, and refused without one."""
    from foundry.schema import RankSpec, RegionSpec
    from foundry.schema.jsondocs import load_sealed, seal

    meta = GraphMeta.from_json(load_doc(write_sample(tmp_path)[0]), "g.json")
    if ranked:
        meta = dataclasses.replace(meta, rank=RankSpec(1, 2, "Fake GPU", "0000:01:00.0", "GPU-0"))
    meta = dataclasses.replace(meta, region=dataclasses.replace(meta.region, small_align=512))
    doc = meta.to_json(listed=True)
    assert doc["format_version"] == 5 and set(doc["region"]) == {"high_water", "live", "events"}
    assert ("rank" in doc) == ("peers" in doc) == ranked
    archive = meta.region
    doc = load_sealed(seal(doc), "g.json")
    assert GraphMeta.from_json(doc, "g.json", None, archive) == meta
    other = RegionSpec(archive.base + (1 << 40), archive.size, archive.granularity, 0, (), (), 512)
    assert GraphMeta.from_json(doc, "g.json", None, other).region.base == archive.base + (1 << 40)
    with pytest.raises(ArchiveCorruptError, match="none there lists the graph"):
        GraphMeta.from_json(doc, "g.json")
    doc["region"]["base"] = archive.base  # the range stated beside the manifest's: refused, not taken
    with pytest.raises(ArchiveCorruptError, match=r"region\.base.*stated here and in the manifest"):
        GraphMeta.from_json(doc, "g.json", None, archive)
