"""The format of carried module variables (docs/FORMAT.md, "Module variables"): graph format version 3.

Each image entry of a graph JSON (and of the manifest) lists ``variables: [{name, bytes, sha256}]``,
sorted by name. Version 2 graphs (written before) are read with their variables unknown (None), and
cannot be written back as version 3; a reader of version 2 refuses version 3, so no old Foundry loads
an archive while dropping its variables.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import pytest

from foundry.archive import read_manifest, read_meta, write_graph, write_manifest
from foundry.errors import ArchiveCorruptError, ArchiveVersionError
from foundry.schema import GRAPH_FORMAT, ImageEntry, VariableRef
from foundry.schema.graphmeta import GRAPH_FORMAT_VERSION
from foundry.schema.jsondocs import check_format
from tests.support.archive_damage import edit_doc, load_doc
from tests.support.encode import encode_record
from tests.support.samples import sample_meta, sample_record, write_sample_archive

IMAGES = (b"\x7fELF image one" * 10, b"\x7fELF image two" * 10)


def _ref(name: str, data: bytes) -> VariableRef:
    return VariableRef(name, len(data), hashlib.sha256(data).hexdigest())


CARRIED = (_ref("_ZN2ns5tableE", b"\x01" * 64), _ref("ctab", b"\x02\x00\x00\x00" * 4))


def _write(directory: Path) -> tuple[Path, Any]:
    record = sample_record()
    meta = sample_meta("graph_0", record, IMAGES, ".")
    images = (dataclasses.replace(meta.images[0], variables=CARRIED), meta.images[1])
    path = directory / "graph_0.json"
    return path, write_graph(path, dataclasses.replace(meta, images=images), encode_record(record))


def test_variables_round_trip_in_a_graph_json(tmp_path: Path) -> None:
    path, written = _write(tmp_path)
    assert GRAPH_FORMAT_VERSION == 3
    meta = read_meta(path)
    assert meta == written
    assert meta.images[0].variables == CARRIED and meta.images[1].variables == ()
    doc = load_doc(path)
    assert doc["format_version"] == 3
    first, second = doc["images"].values()
    assert first["variables"] == [{"name": v.name, "bytes": v.bytes, "sha256": v.sha256} for v in CARRIED]
    assert second["variables"] == []


def test_variables_round_trip_in_the_manifest(tmp_path: Path) -> None:
    manifest = write_sample_archive(tmp_path)
    images = (dataclasses.replace(manifest.images[0], variables=CARRIED), *manifest.images[1:])
    write_manifest(tmp_path, dataclasses.replace(manifest, images=images))
    again = read_manifest(tmp_path)
    assert again.images[0].variables == CARRIED
    # A manifest entry without the key (written before variables were recorded) says nothing.
    assert ImageEntry("ab" * 32, 1, again.images[0].format).variables is None


def test_a_version_2_graph_is_read_with_its_variables_unknown(tmp_path: Path) -> None:
    path, _ = _write(tmp_path)

    def as_version_2(doc: dict[str, Any]) -> None:
        doc["format_version"] = 2
        for image in doc["images"].values():
            del image["variables"]

    edit_doc(path, as_version_2)
    meta = read_meta(path)
    assert [ref.variables for ref in meta.images] == [None, None]
    with pytest.raises(ValueError, match="cannot be written as version 3"):
        write_graph(path, meta, encode_record(sample_record()))


def test_a_version_2_reader_refuses_version_3(tmp_path: Path) -> None:
    path, _ = _write(tmp_path)
    with pytest.raises(ArchiveVersionError, match="format_version 3"):
        check_format(load_doc(path), GRAPH_FORMAT, (2,), str(path))


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda images: images[0].pop("variables"), "variables': missing"),
        (lambda images: images[0]["variables"].reverse(), "sorted by name"),
        (lambda images: images[0]["variables"].append(dict(images[0]["variables"][0])), "once each"),
        (lambda images: images[0]["variables"][0].update(bytes=0), "at least one byte"),
        (lambda images: images[0]["variables"][0].update(name=""), "non-empty"),
        (lambda images: images[0]["variables"][0].update(sha256="XY"), "SHA-256"),
        (lambda images: images[0].update(variables={}), "expected a list"),
    ],
)
def test_malformed_variable_listings_are_refused(tmp_path: Path, edit: Any, needle: str) -> None:
    path, _ = _write(tmp_path)
    edit_doc(path, lambda doc: edit(list(doc["images"].values())))
    with pytest.raises(ArchiveCorruptError, match=needle):
        read_meta(path)
