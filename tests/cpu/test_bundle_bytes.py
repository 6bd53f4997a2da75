"""The graph bundle's bytes (foundry/archive/bundle.py, docs/FORMAT.md "Graph bundle"), with no driver: a malformed
bundle or one laid out otherwise than its sizes give refused by name, the hash that keeps the interpreter lock,
and the writer's parts. SAVE and LOAD of bundles on the fake driver: test_bundle_fake.py."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pytest

from foundry.archive import BUNDLE_NAME, write_bundle
from foundry.archive.bundle import bundle_parts, bundle_slots, pack_bundle, parse_bundle
from foundry.errors import ArchiveCorruptError, ArchiveForeignError, ArchiveVersionError
from foundry.storage import sha256_holding


def _bundle(*files: tuple[bytes, bytes]) -> bytearray:
    return bytearray(pack_bundle(list(files)))


@pytest.mark.parametrize(
    ("data", "count", "error", "words"),
    [
        (_bundle((b"{}", b"c")), 2, ArchiveCorruptError, "holds 1 graphs, the manifest stores 2"),
        (_bundle((b"{}", b"c"))[:20], 1, ArchiveCorruptError, "table of 1 graphs runs past the end"),
        (_bundle()[:8], 0, ArchiveCorruptError, "truncated"),
        (bytearray(b"FDYGRAPH") + _bundle()[8:], 0, ArchiveForeignError, "not a Foundry graph bundle"),
        (_bundle()[:8] + struct.pack("<I", 1) + _bundle()[12:], 0, ArchiveVersionError, "bundle version 1"),
        (_bundle((b"{}", b"c"))[:-1], 1, ArchiveCorruptError, r"graph 0.s JSON .* container \(1 bytes at 50\)"),
        (_bundle((b"{}", b"c")) + b"x", 1, ArchiveCorruptError, "1 bytes after its last graph"),
        (_bundle() + b"x", 0, ArchiveCorruptError, "1 bytes after its last graph"),
    ],
)
def test_a_malformed_bundle_is_refused_by_name(data: bytearray, count: int, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        parse_bundle(data, count, "bundle")


def test_a_table_laid_out_otherwise_than_its_sizes_give_is_refused() -> None:
    data = _bundle((b'{"a": 1}', b"C" * 100), (b'{"b": 2}', b"D" * 50))
    first = struct.unpack_from("<QQQQ", data, 16)
    struct.pack_into("<QQQQ", data, 16, first[0], first[1], first[2] + 1, first[3] - 1)  # a byte no part holds
    with pytest.raises(ArchiveCorruptError, match="not where the bundle's layout puts them"):
        bundle_slots(data, 2, len(data), "bundle")


@pytest.mark.parametrize("size", [0, 1, 2046, 2047, 2048, 4095, 100_000])
def test_hashing_without_letting_the_lock_go_gives_the_same_digest(size: int) -> None:
    data = bytes(range(256)) * (size // 256 + 1)
    data = data[:size]
    assert sha256_holding(data) == hashlib.sha256(data).hexdigest()
    assert sha256_holding(memoryview(bytearray(data))) == hashlib.sha256(data).hexdigest()


def test_write_bundle_writes_the_packed_bytes_unjoined_and_calls_back(tmp_path: Path) -> None:
    files = [(b'{"a": 1}', b"C" * 5000), (bytearray(b'{"b": 2}'), b"H" * 64, memoryview(b"D" * 70_000))]
    seen: list[bool] = []
    size = write_bundle(tmp_path, files, durable=False, written=lambda: seen.append((tmp_path / BUNDLE_NAME).exists()))
    data = (tmp_path / BUNDLE_NAME).read_bytes()
    assert seen == [True]
    assert data == pack_bundle(files) == b"".join(bundle_parts(files)) and size == len(data)
    bundle = parse_bundle(bytearray(data), 2, "b")
    assert [bytes(j) for j in bundle.jsons] == [b'{"a": 1}', b'{"b": 2}']
    assert bytes(bundle.containers[1]) == b"H" * 64 + b"D" * 70_000
