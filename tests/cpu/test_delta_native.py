"""The native walk of a template member's delta (LOAD's hot path) against the pure-Python parser, on
the real GPU archive's member, and under damage."""

from __future__ import annotations

import contextlib
import struct
from pathlib import Path

import pytest

from foundry.archive import read_graph
from foundry.errors import ArchiveError, CodecError
from foundry.native import codec
from foundry.records import override_spans
from tests.support.encode import override_indices

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_archive"


def _member() -> tuple[bytes, int]:
    _meta, payload = read_graph(FIXTURE / "ew_bs32.json")
    _tmeta, template = read_graph(FIXTURE / "ew_bs64.json")
    return payload, int.from_bytes(template[8:12], "little")


def test_native_delta_indices_match_the_python_walk() -> None:
    payload, nodes = _member()
    assert codec.delta_indices(payload, nodes) == override_indices(payload) != []


def test_native_delta_indices_refuse_damage_without_crashing() -> None:
    payload, nodes = _member()
    for cut in range(len(payload)):
        with pytest.raises(CodecError, match="damaged delta"):
            codec.delta_indices(payload[:cut], nodes)
    for pos in range(len(payload)):
        flipped = bytearray(payload)
        flipped[pos] ^= 0xFF
        with contextlib.suppress(CodecError):  # a flip may leave a valid delta; nothing else may escape
            codec.delta_indices(bytes(flipped), nodes)
    highest = max(override_indices(payload))
    with pytest.raises(CodecError, match=f"names node {highest} of {highest}"):
        codec.delta_indices(payload, highest)


def test_native_and_python_walks_refuse_the_same_damage() -> None:
    """LOAD's native walk and foundry verify's Python reader accept and refuse the same deltas (the
    native one also knows the template's node count, so it alone refuses an index past it)."""
    payload, nodes = _member()
    trailing = bytearray(payload) + bytes(8)  # bytes after the last override, counted in the header's total
    struct.pack_into("<Q", trailing, 24, len(trailing))
    cases = [bytes(trailing)]
    repeated = bytearray(payload)
    (_i0, s0, _e0), (_i1, s1, _e1) = override_spans(payload)[:2]
    repeated[s1 - 8 : s1 - 4] = repeated[s0 - 8 : s0 - 4]  # override 1 names override 0's node
    cases.append(bytes(repeated))
    for pos in range(len(payload)):
        for bit in (0x01, 0x80):
            flipped = bytearray(payload)
            flipped[pos] ^= bit
            cases.append(bytes(flipped))
    for data in cases:
        try:
            override_spans(data)
            python_ok = True
        except ArchiveError:
            python_ok = False
        try:
            codec.delta_indices(data, nodes)
            native_ok, message = True, ""
        except CodecError as exc:
            native_ok, message = False, str(exc)
        assert native_ok == python_ok or (python_ok and "names node" in message), message
    for data in cases[:2]:
        with pytest.raises(CodecError, match=r"after the last override|repeated"):
            codec.delta_indices(data, nodes)
