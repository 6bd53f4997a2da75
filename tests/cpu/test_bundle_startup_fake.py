"""LOAD's start-up and the graph bundle (foundry/load/readahead.py, docs/FORMAT.md "Graph bundle"), on the fake
driver: start-up reads the bundle once and prepares every graph LOAD then takes; a damaged bundle is refused
naming a graph it holds; a bundle too large for what start-up may hold is left to LOAD; members left over are
prepared against their template; an archive of format 2 loads from its files. SAVE once for the module, in
its own process; each test damages a copy."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from typing import Any

import pytest

from foundry.archive import BUNDLE_NAME, MANIFEST_NAME, read_manifest
from foundry.archive.bundle import pack_bundle
from foundry.verify import Check, ProblemKind, verify_archive
from tests.cpu.test_background_load_fake import LOAD_AND_REPLAY, NAMES
from tests.cpu.test_roundtrip_fake_manifest import VARIANTS
from tests.support.archive_damage import load_doc, unbundle, write_doc
from tests.support.bundles import AFTER_STARTUP, copy_saved, refusals, save_once
from tests.support.graphs import JsonRunner, load_prefix


@pytest.fixture(scope="module")
def saved(
    tmp_path_factory: pytest.TempPathFactory, fakecuda_dir: Path, foundry_lib: Path
) -> tuple[Path, dict[str, Any]]:
    """One SAVE for the module; each test damages a copy."""
    return save_once(tmp_path_factory.mktemp("bundle") / "arch", fakecuda_dir, foundry_lib)


_copy = copy_saved


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
    said = refusals(arch)
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
from foundry.archive import read_manifest
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
from foundry.archive import read_manifest
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
