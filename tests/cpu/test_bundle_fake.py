"""The graph bundle (foundry/format/bundle.py, docs/FORMAT.md "Graph bundle"): SAVE stores every graph saved in
the archive directory there, once (no graph files beside it), and graphs saved elsewhere in their files; LOAD
(start-up's reading ahead, ``start_graph_builds``, ``CUDAGraph.load``), its pre-GPU checks (``preflight``) and
``foundry verify`` in both modes read and check the same bytes, the ones LOAD runs. SAVE and LOAD in separate
processes on the fake driver; the checks that need no GPU in this one."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

from foundry import _state
from foundry.errors import ArchiveCorruptError, ArchiveError, ArchiveForeignError, ArchiveVersionError
from foundry.format import (
    BUNDLE_NAME,
    MANIFEST_NAME,
    GraphStorage,
    parse_bundle,
    read_bundle,
    read_manifest,
    sha256_holding,
)
from foundry.format.bundle import bundle_parts, bundle_slots, pack_bundle, write_bundle
from foundry.format.container import read_container_header
from foundry.load import preflight
from foundry.load.readahead import prepare_bundle
from foundry.load.source import read_sources
from foundry.verify import Check, ProblemKind, verify_archive, verify_graphs
from tests.cpu.test_background_load_fake import LOAD_AND_REPLAY, NAMES
from tests.cpu.test_roundtrip_fake_manifest import VARIANTS
from tests.support.archive_damage import edit_doc, flip_stored, load_doc, stored, unbundle, write_doc
from tests.support.graphs import JsonRunner, load_prefix, run_load, run_save, save_script
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
except errors.ArchiveError as exc:
    runs, error = None, type(exc).__name__
emit(prepared=prepared, runs=runs, error=error, bundle_read="graphs_bundle" in startup_phases().seconds)
"""
)

# CUDAGraph.load's path (load_graph) for each graph after start-up prepared them; ``errors`` by name.
ONE_BY_ONE = """
from foundry.load import load_graph, wait_for_startup
wait_for_startup()
runs, errors = {}, {}
for name in NAMES:
    try:
        lg = load_graph(os.path.join(ARCH, name + ".json"))
    except Exception as exc:
        errors[name] = [type(exc).__name__, str(exc)]
        continue
    runs[name] = []
    for k in INPUT_SETS:
        set_inputs(k); lg.launch(0); cu.sync(); runs[name].append(read(name))
emit(runs=runs, errors=errors)
"""


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


def _paths(arch: Path) -> list[Path]:
    return [arch / f"{n}.json" for n in NAMES]


def _refusals(arch: Path) -> dict[str, str | None]:
    """What each reader says of the archive, in this process: verify in archive and in graph mode (its first
    problem, or None), the preflight and LOAD's reading of every graph, records included, with and without
    start-up's reading ahead (the error, or None)."""
    out: dict[str, str | None] = {}
    _state.reset_all()
    report = verify_archive(arch)
    out["verify"] = None if report.ok else str(report.problems[0])
    _state.reset_all()
    report = verify_graphs(_paths(arch))
    out["verify_graphs"] = None if report.ok else str(report.problems[0])

    def after_startup() -> list[Any]:  # start-up's reading ahead (the whole bundle at once), then LOAD's
        prepare_bundle(arch, read_manifest(arch))
        return read_sources(_paths(arch), lazy=True)

    readers = (
        ("preflight", lambda: preflight(_paths(arch))),
        ("load", lambda: read_sources(_paths(arch))),
        ("load after start-up", after_startup),
    )
    for name, run in readers:
        _state.reset_all()
        try:
            sources = run()
            for src in sources:  # every record LOAD builds from, hashed as LOAD's readers hash it
                src.read_payload()
                if src.template is not None:
                    src.template.read_payload()
            out[name] = None
        except ArchiveError as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    _state.reset_all()
    return out


def _restate_bundle(arch: Path) -> None:
    """As a forger would: the manifest's statement of the bundle (its size) made true of the file now."""
    size = (arch / BUNDLE_NAME).stat().st_size
    edit_doc(arch / MANIFEST_NAME, lambda d: d["bundle"].update(bytes=size))


# ------------------------------------------------------------------------------------------ one copy
def test_save_stores_each_graph_of_the_archive_directory_once_in_the_bundle(
    saved: tuple[Path, dict[str, Any]],
) -> None:
    arch = saved[0]
    manifest = read_manifest(arch)
    assert manifest.format_version == 3 and manifest.bundle is not None and manifest.bundle.file == BUNDLE_NAME
    assert [g.stored for g in manifest.graphs] == [GraphStorage.BUNDLE] * len(manifest.graphs)
    assert not list(arch.glob("*.cugraph")) and sorted(p.name for p in arch.glob("*.json")) == [
        MANIFEST_NAME,
        "region.json",
    ]
    data = (arch / BUNDLE_NAME).read_bytes()
    assert manifest.bundle.bytes == len(data) and "sha256" not in load_doc(arch / MANIFEST_NAME)["bundle"]
    bundle = read_bundle(arch, BUNDLE_NAME, len(data), len(manifest.graphs))
    for entry, json_bytes, container in zip(manifest.graphs, bundle.jsons, bundle.containers, strict=True):
        assert hashlib.sha256(json_bytes).hexdigest() == entry.json_sha256
        header = read_container_header(container)
        assert header.sha256 == entry.record_sha256 == hashlib.sha256(container[64:]).hexdigest()
        assert (bytes(json_bytes), bytes(container)) == stored(arch / entry.json)
    # Every byte once: the bundle is its table and the graphs' bytes, end to end.
    assert len(data) == 16 + 32 * len(NAMES) + sum(
        len(j) + len(c) for j, c in zip(bundle.jsons, bundle.containers, strict=True)
    )
    assert all(v is None for v in _refusals(arch).values())


def test_graphs_saved_outside_the_archive_directory_stay_in_their_files(app_json: JsonRunner, tmp_path: Path) -> None:
    """The seed README's layout (graph.json beside hook_archive/): SAVE removes no file outside the directory
    it finishes, and writes no bundle for it; LOAD reads the files, verify checks them."""
    arch, beside = tmp_path / "out" / "arch", tmp_path / "out"
    save = run_save(app_json, VARIANTS, arch, json_dir=beside)
    manifest = read_manifest(arch)
    assert [g.json for g in manifest.graphs] == [f"../{n}.json" for n in NAMES]
    assert [g.stored for g in manifest.graphs] == [GraphStorage.FILES] * len(NAMES)
    assert manifest.bundle is None and not (arch / BUNDLE_NAME).exists()
    assert all((beside / f"{n}.json").is_file() and (beside / f"{n}.cugraph").is_file() for n in NAMES)
    load = run_load(app_json, VARIANTS, arch, NAMES, json_dir=beside)
    assert not load["errors"] and all(load["loaded"][n] == save["native"][n] for n in NAMES), load
    assert verify_graphs(_paths(beside)).ok and verify_archive(arch).ok


def test_an_earlier_bundle_no_graph_is_stored_in_is_removed(app_json: JsonRunner, tmp_path: Path) -> None:
    """Saved again into the same directory with the graphs beside it: the new manifest stores nothing in a
    bundle, and the one left of the first SAVE goes with its graphs (they are not in the new manifest)."""
    arch = tmp_path / "out" / "arch"
    run_save(app_json, VARIANTS, arch)
    assert (arch / BUNDLE_NAME).is_file()
    run_save(app_json, VARIANTS, arch, json_dir=tmp_path / "out")
    assert not (arch / BUNDLE_NAME).exists() and read_manifest(arch).bundle is None
    assert verify_archive(arch).ok


def test_a_save_cut_short_before_its_manifest_never_leaves_a_manifest_naming_another_bundle(
    app_json: JsonRunner, tmp_path: Path
) -> None:
    """SAVE again over an archive, failing where it writes its manifest: the earlier manifest (whose graphs'
    only copy the new bundle replaced) is gone, and the new graphs' files stay, each loadable on its own."""
    arch = tmp_path / "arch"
    first = run_save(app_json, VARIANTS, arch)
    hook = (
        "import foundry.save.manifest as _m\n"
        "def _fail(*a, **k):\n    raise OSError('disk full')\n"
        "_m.write_manifest = _fail\n"
    )
    code = save_script(VARIANTS, arch).replace("if MANIFEST:", hook + "if MANIFEST:", 1)
    with pytest.raises(Exception, match="disk full"):
        app_json(code)
    assert not (arch / MANIFEST_NAME).exists()
    assert all((arch / f"{n}.json").is_file() and (arch / f"{n}.cugraph").is_file() for n in NAMES)
    load = run_load(app_json, VARIANTS, arch, NAMES)
    assert not load["errors"] and all(load["loaded"][n] == first["native"][n] for n in NAMES), load


# ------------------------------------------------------------------------- the same bytes for every reader
def test_a_bundled_record_changed_with_the_bundle_restated_is_refused_by_every_reader(
    saved: tuple[Path, dict[str, Any]], app_json: JsonRunner, tmp_path: Path
) -> None:
    """A member's delta edited inside the bundle, the manifest's statement of the bundle made true again: the
    record is not what its JSON commits to. verify (both modes), the preflight and LOAD all refuse it, naming
    the graph; LOAD never replays it."""
    arch = _copy(saved, tmp_path)
    flip_stored(arch / "v2.json", -9, "container")
    _restate_bundle(arch)
    said = _refusals(arch)
    assert all(s is not None and "graph 'v2'" in s for s in said.values()), said
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + AFTER_STARTUP)
    assert r["error"] == "ArchiveCorruptError" and r["runs"] is None, r


def test_every_sampled_byte_of_the_bundle_changed_is_refused_by_every_reader_alike(
    saved: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """Each byte of the bundle, inverted in turn (a sample spread over the whole file, the manifest's size
    of it restated): every byte is the header's, the table's or a graph's, so each change is refused, and by
    verify in archive and graph mode, the preflight and LOAD's reading alike."""
    arch = _copy(saved, tmp_path)
    bundle = arch / BUNDLE_NAME
    good = bundle.read_bytes()
    positions = sorted({*range(0, 16 + 32 * len(NAMES)), *range(0, len(good), max(1, len(good) // 150))})
    missed = []
    for at in positions:
        data = bytearray(good)
        data[at] ^= 0xFF
        bundle.write_bytes(bytes(data))
        said = _refusals(arch)
        if any(s is None for s in said.values()):
            missed.append((at, said))
    bundle.write_bytes(good)
    assert missed == [], missed[:3]
    assert all(v is None for v in _refusals(arch).values())


def test_load_one_by_one_reads_members_and_templates_from_the_bundle(
    saved: tuple[Path, dict[str, Any]], app_json: JsonRunner, tmp_path: Path
) -> None:
    """CUDAGraph.load's path after start-up prepared the graphs: every graph replays as SAVE's did, its JSON,
    delta and template record all from the bundle; a member's delta damaged in the bundle is refused by name,
    the others still load."""
    arch = _copy(saved, tmp_path)
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + ONE_BY_ONE)
    assert r["errors"] == {} and r["runs"] == {n: saved[1]["native"][n] for n in NAMES}, r
    flip_stored(arch / "v1.json", -9, "container")
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + ONE_BY_ONE)
    assert set(r["errors"]) == {"v1"} and "graph 'v1'" in r["errors"]["v1"][1], r
    assert r["runs"] == {n: saved[1]["native"][n] for n in NAMES if n != "v1"}


@pytest.mark.parametrize("extra", ["appended", "between"])
def test_bytes_no_graph_holds_are_refused(saved: tuple[Path, dict[str, Any]], tmp_path: Path, extra: str) -> None:
    """Bytes after the last graph, or between two graphs with the table moved to step over them (the manifest's
    size restated): each graph's bytes are still sound, but the bundle holds more than its graphs. Every
    reader refuses it, naming the bundle."""
    arch = _copy(saved, tmp_path)
    bundle = arch / BUNDLE_NAME
    data = bytearray(bundle.read_bytes())
    if extra == "appended":
        data += b"\0" * 4096
    else:
        head = 16 + 32 * len(NAMES)
        entries = [list(struct.unpack_from("<QQQQ", data, 16 + 32 * i)) for i in range(len(NAMES))]
        gap = entries[1][0]
        data[gap:gap] = b"\0" * 64
        for e in entries[1:]:
            e[0] += 64
            e[2] += 64
        for i, e in enumerate(entries):
            struct.pack_into("<QQQQ", data, 16 + 32 * i, *e)
        assert head <= gap
    bundle.write_bytes(bytes(data))
    _restate_bundle(arch)
    said = _refusals(arch)
    assert all(s is not None and BUNDLE_NAME in s for s in said.values()), said


def test_a_file_at_a_bundled_graphs_name_is_refused_by_every_reader(
    saved: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """A graph file beside the bundle at a bundled graph's name (saved after the manifest, or left by a SAVE
    cut short after it): which copy was meant cannot be known, so LOAD runs neither; verify and the preflight
    say the same, naming the graph and the file."""
    arch = _copy(saved, tmp_path)
    _, container = stored(arch / "v1.json")
    (arch / "v1.cugraph").write_bytes(container)  # even an identical copy
    said = _refusals(arch)
    assert all(s is not None and "v1.cugraph" in s and "graph 'v1'" in s for s in said.values()), said


# ---------------------------------------------------------------------------------------- an old archive
def _as_format_2(arch: Path) -> None:
    """The archive as Foundry wrote it before one copy: every graph's files, and a version-1 bundle holding
    them again, named (with its SHA-256) by a format-version-2 manifest."""
    unbundle(arch)
    doc = load_doc(arch / MANIFEST_NAME)
    files = [((arch / g["json"]).read_bytes(), (arch / g["json"]).with_suffix(".cugraph").read_bytes())
             for g in doc["graphs"]]  # fmt: skip
    data = bytearray(pack_bundle(files))
    struct.pack_into("<I", data, 8, 1)  # version 1
    (arch / BUNDLE_NAME).write_bytes(bytes(data))
    for g in doc["graphs"]:
        del g["stored"]
    doc.update(format_version=2, bundle={"file": BUNDLE_NAME, "bytes": len(data),
                                         "sha256": hashlib.sha256(data).hexdigest()})  # fmt: skip
    write_doc(arch / MANIFEST_NAME, doc)


def test_an_archive_of_format_2_loads_from_its_files_and_its_bundle_is_not_read(
    saved: tuple[Path, dict[str, Any]], app_json: JsonRunner, tmp_path: Path
) -> None:
    arch = _copy(saved, tmp_path)
    _as_format_2(arch)
    manifest = read_manifest(arch)
    assert manifest.format_version == 2 and manifest.bundle is None and manifest.stale_bundle == BUNDLE_NAME
    report = verify_archive(arch)
    assert report.ok and any("second copy" in n for n in report.notes), report
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + AFTER_STARTUP)
    assert r["error"] is None and r["runs"] == {n: saved[1]["native"][n] for n in NAMES}, r
    # A graph file damaged: every reader reads the files, and all refuse it (the bundle's copy is not taken).
    data = bytearray((arch / "v2.cugraph").read_bytes())
    data[-9] ^= 0xFF
    (arch / "v2.cugraph").write_bytes(bytes(data))
    said = _refusals(arch)
    assert all(s is not None and "v2.cugraph" in s for s in said.values()), said
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + AFTER_STARTUP)
    assert r["error"] == "ArchiveCorruptError" and r["runs"] is None, r


# --------------------------------------------------------------------------------------- start-up's reading
def test_load_takes_the_graphs_from_the_bundle_read_once_at_startup(
    saved: tuple[Path, dict[str, Any]], app_json: JsonRunner, tmp_path: Path
) -> None:
    arch = _copy(saved, tmp_path)
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + AFTER_STARTUP)
    assert r["error"] is None and r["bundle_read"]
    assert {f"{n}.json" for n in NAMES} <= set(r["prepared"])
    assert r["runs"] == {n: saved[1]["native"][n] for n in NAMES}


@pytest.mark.parametrize("damage", ["flipped", "cut short", "removed"])
def test_a_damaged_bundle_is_refused_by_load_naming_a_graph_it_holds(
    saved: tuple[Path, dict[str, Any]], app_json: JsonRunner, tmp_path: Path, damage: str
) -> None:
    """The bundle is the graphs' only copy: LOAD refuses what it cannot give (no file to fall back on), and
    verify reports it."""
    arch = _copy(saved, tmp_path)
    bundle = arch / BUNDLE_NAME
    if damage == "flipped":
        data = bytearray(bundle.read_bytes())
        data[-100] ^= 0xFF
        bundle.write_bytes(bytes(data))
    elif damage == "cut short":
        bundle.write_bytes(bundle.read_bytes()[:-1])
    else:
        bundle.unlink()
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + AFTER_STARTUP)
    assert r["error"] == "ArchiveCorruptError" and r["runs"] is None, r
    kinds = {(p.check, p.kind, Path(p.path).name) for p in verify_archive(arch).problems}
    if damage == "flipped":
        assert any(name.endswith(".json") for _, _, name in kinds), kinds  # the graph whose bytes it is
    else:
        kind = ProblemKind.MISSING if damage == "removed" else ProblemKind.CHECKSUM
        assert (Check.FILES, kind, BUNDLE_NAME) in kinds, kinds


def test_a_bundle_is_taken_only_where_it_fits_whole_in_what_prepared_records_may_hold(
    saved: tuple[Path, dict[str, Any]], app_json: JsonRunner
) -> None:
    """An unloaded graph's source keeps the whole bundle's buffer: a bundle that does not fit beside what is
    prepared already is not read whole (its graphs are read one by one, from the bundle still)."""
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


# ------------------------------------------------------------------------------------------- the format
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
