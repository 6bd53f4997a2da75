"""The native walk of a template member's delta (LOAD's hot path) against the pure-Python parser, on
the real H200 archive's member, and under damage."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from foundry.archive import override_indices, read_graph
from foundry.errors import CodecError
from foundry.graphs import codec

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
