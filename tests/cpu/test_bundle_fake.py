"""The graph bundle (foundry/format/bundle.py): SAVE writes every listed graph's files into one, the manifest
states its size and SHA-256, start-up takes the graphs from it, and verify proves it holds what the manifest
lists. SAVE and LOAD in separate processes on the fake driver."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

from foundry.errors import ArchiveCorruptError, ArchiveForeignError, ArchiveVersionError
from foundry.format import BUNDLE_NAME, bundle_mismatches, parse_bundle, read_bundle, read_manifest, sha256_holding
from foundry.format.bundle import bundle_parts, pack_bundle, write_bundle
from foundry.verify import Check, ProblemKind, verify_archive
from tests.cpu.test_background_load_fake import LOAD_AND_REPLAY, NAMES
from tests.cpu.test_roundtrip_fake_manifest import VARIANTS
from tests.support.archive_damage import edit_doc, flip_byte
from tests.support.graphs import JsonRunner, load_prefix, run_save
from tests.support.subproc import run_python

# Start-up done, LOAD then replays every graph; ``error``: the archive error LOAD raised, if any.
AFTER_STARTUP = (
    """
from foundry import errors
from foundry.load import Loader, startup_phases, wait_for_startup
from foundry.load import source as sources
wait_for_startup()
prepared = sorted(os.path.basename(k[0]) for k in sources._STATE.get().prepared)
paths = [os.path.join(ARCH, n + ".json") for n in NAMES]
try:
"""
    + "\n".join("    " + line for line in LOAD_AND_REPLAY.strip().splitlines())
    + """
    error = None
except errors.LoadError as exc:
    runs, error = None, type(exc.__cause__).__name__
emit(prepared=prepared, runs=runs, error=error, bundle_read="graphs_bundle" in startup_phases().seconds)
"""
)


@pytest.fixture(scope="module")
def saved(
    tmp_path_factory: pytest.TempPathFactory, fakecuda_dir: Path, foundry_lib: Path
) -> tuple[Path, dict[str, Any]]:
    """One SAVE for the module; each test damages a copy."""

    def app_json(code: str, env: dict[str, str] | None = None) -> Any:
        out = run_python(code, lib_dir=fakecuda_dir, env=env, preload=foundry_lib)
        return json.loads(out.strip().splitlines()[-1])

    arch = tmp_path_factory.mktemp("bundle") / "arch"
    return arch, run_save(app_json, VARIANTS, arch)


def _copy(saved: tuple[Path, dict[str, Any]], tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved[0], tmp_path / "arch"))


def _problems(arch: Path) -> list[tuple[Check, ProblemKind, str]]:
    return [(p.check, p.kind, Path(p.path).name) for p in verify_archive(arch).problems]


def test_save_bundles_every_listed_graph_as_the_manifest_lists_it(saved: tuple[Path, dict[str, Any]]) -> None:
    arch = saved[0]
    manifest = read_manifest(arch)
    assert manifest.bundle is not None and manifest.bundle.file == BUNDLE_NAME
    data = (arch / BUNDLE_NAME).read_bytes()
    assert manifest.bundle.bytes == len(data) and manifest.bundle.sha256 == hashlib.sha256(data).hexdigest()
    bundle = read_bundle(arch, manifest.bundle, len(manifest.graphs))
    assert bundle_mismatches(bundle, manifest.graphs) == []
    for entry, json_bytes, container in zip(manifest.graphs, bundle.jsons, bundle.containers, strict=True):
        assert bytes(json_bytes) == (arch / entry.json).read_bytes()
        assert bytes(container) == (arch / entry.json).with_suffix(".cugraph").read_bytes()
    assert verify_archive(arch).ok


def test_load_takes_the_graphs_from_the_bundle_not_the_files(
    saved: tuple[Path, dict[str, Any]], app_json: JsonRunner, tmp_path: Path
) -> None:
    """With the bundle intact, start-up reads no graph file: a member's delta and another member's JSON,
    damaged after SAVE, are never read, and every graph replays as SAVE's did. verify reports both files."""
    arch = _copy(saved, tmp_path)
    flip_byte(arch / "v2.cugraph", -9)
    flip_byte(arch / "v1.json", 20)
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + AFTER_STARTUP)
    assert r["error"] is None and r["bundle_read"]
    assert {f"{n}.json" for n in NAMES} <= set(r["prepared"])
    for name in NAMES:
        assert r["runs"][name] == saved[1]["native"][name], name
    named = {name for _, _, name in _problems(arch)}  # v2's delta is reported under its JSON
    assert "v1.json" in named and named & {"v2.json", "v2.cugraph"} and BUNDLE_NAME not in named, named


def test_a_graph_the_manifest_lists_otherwise_than_the_bundle_holds_is_read_from_its_file(
    saved: tuple[Path, dict[str, Any]], app_json: JsonRunner, tmp_path: Path
) -> None:
    """A graph JSON sealed again after an edit, and the manifest's listing of it updated (the bundle left as
    it was): start-up takes the other graphs from the bundle and this one from its file, each with the hash of
    the very bytes it parsed."""
    arch = _copy(saved, tmp_path)
    edit_doc(arch / "v1.json", lambda d: d["stats"].update(edited=1))
    edited = hashlib.sha256((arch / "v1.json").read_bytes()).hexdigest()
    edit_doc(arch / "graph_manifest.json", lambda d: [g.update(json_sha256=edited) for g in d["graphs"]
                                                      if g["json"] == "v1.json"])  # fmt: skip
    script = """
from foundry.load import wait_for_startup
from foundry.load import source as sources
wait_for_startup()
emit(digests={os.path.basename(k[0]): src.json_sha256 for k, (src, _) in sources._STATE.get().prepared.items()})
"""
    digests = app_json(load_prefix(VARIANTS, arch) + script)["digests"]
    assert digests["v1.json"] == edited
    for name in ("v0.json", "v2.json", "v3.json"):
        assert digests[name] == hashlib.sha256((arch / name).read_bytes()).hexdigest(), name


@pytest.mark.parametrize("damage", ["flipped", "cut short", "removed"])
def test_a_bundle_that_fails_its_hash_leaves_load_to_the_graph_files(
    saved: tuple[Path, dict[str, Any]], app_json: JsonRunner, tmp_path: Path, damage: str
) -> None:
    """LOAD reads the graph files instead, with every check of theirs: the graphs replay as SAVE's did, and
    a damaged graph file is refused by name. verify reports the bundle."""
    arch = _copy(saved, tmp_path)
    bundle = arch / BUNDLE_NAME
    if damage == "flipped":
        flip_byte(bundle, -100)
    elif damage == "cut short":
        bundle.write_bytes(bundle.read_bytes()[:-1])
    else:
        bundle.unlink()
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + AFTER_STARTUP)
    assert r["error"] is None
    for name in NAMES:
        assert r["runs"][name] == saved[1]["native"][name], name
    kind = ProblemKind.MISSING if damage == "removed" else ProblemKind.CHECKSUM
    assert (Check.FILES, kind, BUNDLE_NAME) in _problems(arch)
    flip_byte(arch / "v2.cugraph", -9)
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + AFTER_STARTUP)
    assert r["error"] == "ArchiveCorruptError", r


def test_verify_reports_a_bundle_that_does_not_hold_what_the_manifest_lists(
    saved: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """A bundle sound in itself (its hash is the one the manifest states) holding two graphs swapped: SAVE
    never writes one, and verify says which graphs differ."""
    arch = _copy(saved, tmp_path)
    manifest = read_manifest(arch)
    assert manifest.bundle is not None
    bundle = read_bundle(arch, manifest.bundle, len(manifest.graphs))
    files = list(zip(bundle.jsons, bundle.containers, strict=True))
    files[0], files[1] = files[1], files[0]
    data = pack_bundle(files)
    (arch / BUNDLE_NAME).write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    edit_doc(arch / "graph_manifest.json", lambda d: d["bundle"].update(bytes=len(data), sha256=sha))
    assert sorted(i for i, _ in bundle_mismatches(parse_bundle(bytearray(data), 4, "b"), manifest.graphs)) == [0, 1]
    problems = _problems(arch)
    assert problems.count((Check.FILES, ProblemKind.MISMATCH, BUNDLE_NAME)) == 2, problems


def _bundle(*files: tuple[bytes, bytes]) -> bytearray:
    return bytearray(pack_bundle(list(files)))


@pytest.mark.parametrize(
    ("data", "count", "error", "words"),
    [
        (_bundle((b"{}", b"c")), 2, ArchiveCorruptError, "holds 1 graphs, the manifest lists 2"),
        (_bundle((b"{}", b"c"))[:20], 1, ArchiveCorruptError, "table of 1 graphs runs past the end"),
        (_bundle()[:8], 0, ArchiveCorruptError, "truncated"),
        (bytearray(b"FDYGRAPH") + _bundle()[8:], 0, ArchiveForeignError, "not a Foundry graph bundle"),
        (_bundle()[:8] + struct.pack("<I", 9) + _bundle()[12:], 0, ArchiveVersionError, "bundle version 9"),
        (_bundle((b"{}", b"c"))[:-1], 1, ArchiveCorruptError, r"graph 0.s container \(1 bytes at 50\) lies outside"),
    ],
)
def test_a_malformed_bundle_is_refused_by_name(data: bytearray, count: int, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        parse_bundle(data, count, "bundle")


def test_a_bundle_is_taken_only_where_it_fits_whole_in_what_prepared_records_may_hold(
    saved: tuple[Path, dict[str, Any]], app_json: JsonRunner
) -> None:
    """An unloaded graph's source keeps the whole bundle's buffer: a bundle that does not fit beside what is
    prepared already is not read (its graphs are left to the files)."""
    script = """
from pathlib import Path
from foundry.format import read_manifest
from foundry.load import wait_for_startup
from foundry.load import readahead
from foundry.load import source as sources
wait_for_startup()
state = sources._STATE.get()
manifest = read_manifest(ARCH)
counts = []
for room in (manifest.bundle.bytes - 1, manifest.bundle.bytes):
    state.prepared.clear(); state.prepared_bytes = 0
    readahead.PREPARED_BYTES_MAX = room
    counts.append(readahead.prepare_bundle(Path(ARCH), manifest))
emit(counts=counts, graphs=len(manifest.graphs))
"""
    r = app_json(load_prefix(VARIANTS, saved[0]) + script)
    assert r["counts"] == [0, r["graphs"]] and r["graphs"] >= len(NAMES), r


@pytest.mark.parametrize("size", [0, 1, 2046, 2047, 2048, 4095, 100_000])
def test_hashing_without_letting_the_lock_go_gives_the_same_digest(size: int) -> None:
    data = bytes(range(256)) * (size // 256 + 1)
    data = data[:size]
    assert sha256_holding(data) == hashlib.sha256(data).hexdigest()
    assert sha256_holding(memoryview(bytearray(data))) == hashlib.sha256(data).hexdigest()


def test_members_left_over_are_prepared_against_the_template_prepared_before(
    saved: tuple[Path, dict[str, Any]], app_json: JsonRunner
) -> None:
    """A second start-up of one archive (LOAD took some graphs, the rest are prepared still): the members
    it prepares from the bundle use the template prepared before, one source, and replay as SAVE's did."""
    script = (
        """
from pathlib import Path
from foundry.format import read_manifest
from foundry.load import Loader, wait_for_startup
from foundry.load import readahead
from foundry.load import source as sources
wait_for_startup()
state = sources._STATE.get()
names = {os.path.basename(k[0]): k for k in state.prepared}
template = state.prepared[names["v0.json"]][0]
for member in ("v1.json", "v3.json"):
    state.prepared_bytes -= state.prepared.pop(names[member])[1]
again = readahead.prepare_bundle(Path(ARCH), read_manifest(ARCH))
same = [state.prepared[names[m]][0].template is template for m in ("v1.json", "v2.json", "v3.json")]
paths = [os.path.join(ARCH, n + ".json") for n in NAMES]
"""
        + LOAD_AND_REPLAY
        + """
emit(again=again, same=same, runs=runs)
"""
    )
    r = app_json(load_prefix(VARIANTS, saved[0]) + f"\nNAMES = {NAMES!r}\n" + script)
    assert r["again"] == 2 and r["same"] == [True, True, True], r
    for name in NAMES:
        assert r["runs"][name] == saved[1]["native"][name], name


def test_write_bundle_writes_the_packed_bytes_unjoined_and_calls_back_before_hashing(tmp_path: Path) -> None:
    files = [(b'{"a": 1}', b"C" * 5000), (bytearray(b'{"b": 2}'), memoryview(b"D" * 70_000))]
    seen: list[bool] = []
    ref = write_bundle(tmp_path, files, durable=False, written=lambda: seen.append((tmp_path / BUNDLE_NAME).exists()))
    data = (tmp_path / BUNDLE_NAME).read_bytes()
    assert seen == [True]
    assert data == pack_bundle(files) == b"".join(bundle_parts(files))
    assert (ref.file, ref.bytes, ref.sha256) == (BUNDLE_NAME, len(data), hashlib.sha256(data).hexdigest())
    assert [bytes(j) for j in parse_bundle(bytearray(data), 2, "b").jsons] == [b'{"a": 1}', b'{"b": 2}']
