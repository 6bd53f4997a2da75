"""Writing one graph (foundry/archive/graphfile.py): the container before the JSON, a digest the caller
hashed already (SAVE hashes records beside its other work), and the record written as given, never joined
to its header."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from pathlib import Path

import pytest

import foundry.archive.graphfile as graphfile
from foundry.archive import read_graph, write_graph
from foundry.errors import ArchiveCorruptError
from foundry.records.container import pack_container
from foundry.storage import sha256_bytes
from tests.cpu.test_archive_files import IMAGES, write_sample
from tests.support.encode import encode_record
from tests.support.samples import sample_meta, sample_record


def test_write_graph_order_is_record_then_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    real = graphfile.write_atomic_parts

    def spy(path: Path, parts: Sequence[bytes], durable: bool = True) -> None:
        order.append(Path(path).suffix)
        real(path, parts, durable)

    monkeypatch.setattr(graphfile, "write_atomic_parts", spy)
    monkeypatch.setattr(graphfile, "write_atomic", lambda path, data, durable=True: spy(path, (data,), durable))
    write_sample(tmp_path)
    assert order == [".cugraph", ".json"]


def test_write_graph_takes_the_callers_digest_and_writes_the_record_unjoined(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A digest handed in is the one the container and the JSON state (SAVE hashes beside its other work),
    the container on disk is the one pack_container makes, and the record goes to the file as given."""
    record = encode_record(sample_record())
    parts_seen: list[tuple[int, ...]] = []
    real = graphfile.write_atomic_parts

    def spy(path: Path, parts: Sequence[bytes], durable: bool = True) -> None:
        parts_seen.append(tuple(len(p) for p in parts))
        real(path, parts, durable)

    monkeypatch.setattr(graphfile, "write_atomic_parts", spy)
    path = tmp_path / "graph_0.json"
    sample = sample_meta("graph_0", sample_record(), IMAGES, ".")
    meta = write_graph(path, sample, record, record_sha256=hashlib.sha256(record).digest())
    assert (tmp_path / "graph_0.cugraph").read_bytes() == pack_container(record)
    assert meta.record is not None and meta.record.sha256 == sha256_bytes(record)
    assert parts_seen == [(64, len(record))]
    wrong = hashlib.sha256(b"another record").digest()
    write_graph(tmp_path / "graph_1.json", dataclasses.replace(sample, name="graph_1"), record, record_sha256=wrong)
    with pytest.raises(ArchiveCorruptError, match="SHA-256"):
        read_graph(tmp_path / "graph_1.json")  # a wrong digest handed in is caught by every reader
