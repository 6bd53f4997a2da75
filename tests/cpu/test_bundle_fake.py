"""The graph bundle (foundry/archive/bundle.py, docs/FORMAT.md "Graph bundle"): SAVE stores every graph saved in
the archive directory there, once (no graph files beside it), and graphs saved elsewhere in their files; LOAD
(start-up's reading ahead, ``start_graph_builds``, ``CUDAGraph.load``), its pre-GPU checks (``preflight``) and
``foundry verify`` in both modes read and check the same bytes, the ones LOAD runs. SAVE and LOAD in separate
processes on the fake driver; the checks that need no GPU in this one. Start-up's reading of the bundle:
test_bundle_startup_fake.py; the bundle's bytes alone: test_bundle_bytes.py."""

from __future__ import annotations

import hashlib
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

from foundry.archive import BUNDLE_NAME, MANIFEST_NAME, read_bundle, read_manifest
from foundry.records import read_container_header
from foundry.schema import GraphStorage
from foundry.verify import verify_archive, verify_graphs
from tests.cpu.test_background_load_fake import NAMES
from tests.cpu.test_roundtrip_fake_manifest import VARIANTS
from tests.support.archive_damage import edit_doc, flip_stored, load_doc, stored, stored_doc
from tests.support.bundles import AFTER_STARTUP, ONE_BY_ONE, copy_saved, graph_paths, refusals, save_once
from tests.support.graphs import JsonRunner, load_prefix, run_load, run_save, save_script


@pytest.fixture(scope="module")
def saved(
    tmp_path_factory: pytest.TempPathFactory, fakecuda_dir: Path, foundry_lib: Path
) -> tuple[Path, dict[str, Any]]:
    """One SAVE for the module; each test damages a copy."""
    return save_once(tmp_path_factory.mktemp("bundle") / "arch", fakecuda_dir, foundry_lib)


_copy = copy_saved


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
    # No region hint either: the manifest states the region, once.
    assert not list(arch.glob("*.cugraph")) and sorted(p.name for p in arch.glob("*.json")) == [MANIFEST_NAME]
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
    assert all(v is None for v in refusals(arch).values())


def test_a_bundled_graph_takes_its_regions_range_from_the_manifest(
    saved: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """The archive states its region's range once, in the manifest: a graph the bundle holds (format version 5)
    keeps only what is its own of the region, and is read with the manifest's base, size and granularity. The
    same bytes under a manifest naming another range are another graph's region (LOAD's cache keeps them apart)."""
    from foundry.load.source import read_meta_cached

    arch = _copy(saved, tmp_path)
    manifest = read_manifest(arch)
    for name in NAMES:
        doc = stored_doc(arch / f"{name}.json")
        assert doc["format_version"] == 5 and not {"base", "size", "granularity"} & set(doc["region"])
        region = read_meta_cached(arch / f"{name}.json")[0].region
        assert (region.base, region.size, region.granularity) == (
            manifest.region.base, manifest.region.size, manifest.region.granularity
        )  # fmt: skip
    other = Path(shutil.copytree(arch, tmp_path / "other"))
    moved = manifest.region.base + (1 << 40)
    edit_doc(other / MANIFEST_NAME, lambda d: d["region"].update(base=moved))
    assert stored(other / "v1.json") == stored(arch / "v1.json")
    assert read_meta_cached(other / "v1.json")[0].region.base == moved
    assert read_meta_cached(arch / "v1.json")[0].region.base == manifest.region.base


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
    assert verify_graphs(graph_paths(beside)).ok and verify_archive(arch).ok


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
    said = refusals(arch)
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
        said = refusals(arch)
        if any(s is None for s in said.values()):
            missed.append((at, said))
    bundle.write_bytes(good)
    assert missed == [], missed[:3]
    assert all(v is None for v in refusals(arch).values())


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
    said = refusals(arch)
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
    said = refusals(arch)
    assert all(s is not None and "v1.cugraph" in s and "graph 'v1'" in s for s in said.values()), said


# ---------------------------------------------------------------------------------------- an old archive
