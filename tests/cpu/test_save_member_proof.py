"""SAVE's proof that a member's delta is its own nodes (byte walks instead of parses), on the real
GPU archive's member rebuilt from its template and delta."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from foundry.archive import read_graph
from foundry.errors import ArchiveCorruptError, CodecError
from foundry.native import codec
from foundry.native.records import scan_record
from foundry.records import delta_header, override_spans, parse_delta, parse_record
from foundry.save import SavedGraph
from foundry.save.templates import _verify_bytes
from foundry.schema import GraphMeta
from tests.support.encode import encode_record, override_indices

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_archive"


def _member() -> tuple[bytes, bytes, str]:
    """(member record, its delta as stored, template record SHA-256)."""
    record, delta, tsha, _meta = _member_meta()
    return record, delta, tsha


def _member_meta() -> tuple[bytes, bytes, str, GraphMeta]:
    """``_member`` and the member's metadata."""
    meta, delta = read_graph(FIXTURE / "ew_bs32.json")
    _tmeta, template = read_graph(FIXTURE / "ew_bs64.json")
    parsed, d = parse_record(template), parse_delta(delta)
    nodes = list(parsed.nodes)
    for i, node in d.overrides:
        nodes[i] = node
    record = encode_record(dataclasses.replace(parsed, nodes=tuple(nodes), function_count=d.function_count))
    assert meta.template is not None
    return record, delta, meta.template.record_sha256, meta


def test_spans_walk_the_same_nodes_the_parsers_see() -> None:
    record, delta, tsha = _member()
    spans: list[tuple[int, int]] = []
    nodes = parse_record(record, spans).nodes
    assert len(nodes) == len(spans) and spans[0][0] == 32
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))  # back to back, then the edge table
    assert (
        [i for i, _, _ in override_spans(delta)]
        == override_indices(delta)
        == [i for i, _ in parse_delta(delta).overrides]
    )
    assert delta_header(delta) == (parse_delta(delta).function_count, tsha)
    with pytest.raises(ArchiveCorruptError):
        parse_record(record[: spans[-1][0] + 4], [])


def test_the_native_delta_of_a_member_passes_and_any_other_bytes_fail() -> None:
    record, _stored, tsha, meta = _member_meta()
    varying = override_indices(_stored)
    payload = bytearray(codec.delta_from_record(record, varying, tsha))
    assert delta_header(payload) == (parse_record(record).function_count, tsha)  # the header written whole
    member = SavedGraph(FIXTURE / "ew_bs32.json", meta, record, scan_record(record))
    _verify_bytes(bytes(payload), member, varying, tsha)
    _index, start, end = override_spans(bytes(payload))[0]
    for pos in (start + 8, end - 1, 8):  # inside the first override's node record; the header's count
        bad = bytearray(payload)
        bad[pos] ^= 0x01
        with pytest.raises(CodecError, match="not its template's name"):
            _verify_bytes(bytes(bad), member, varying, tsha)
    with pytest.raises(CodecError, match="not its template's name"):
        _verify_bytes(bytes(payload), member, varying, "0" * 64)
    if len(varying) > 1:
        with pytest.raises(CodecError, match="not its template's name"):
            _verify_bytes(bytes(payload), member, varying[:-1], tsha)
