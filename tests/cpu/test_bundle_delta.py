"""A rank's graph bundle stored against another rank's (foundry/archive/bundle_delta.py, foundry/save/rankbundle.py;
docs/FORMAT.md "Graph bundle stored against another rank's"): the bytes alone, then two rank folders the fake
driver saved, the second one's bundle stored against the first's and loaded, verified and replayed as saved, and
every way the pair can come apart (a rank folder shipped alone, a base saved again, a damaged file) refused by
name before anything is read from it."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import foundry
from foundry.archive import BUNDLE_NAME, read_manifest
from foundry.archive.bundle import open_bundle, pack_bundle, parse_bundle, read_bundle
from foundry.archive.bundle_delta import is_delta, pack_delta, rebuild
from foundry.errors import ArchiveCorruptError
from tests.cpu.test_roundtrip_fake_manifest import VARIANTS
from tests.support.graphs import JsonRunner, RoundTrip, load_script, run_load, run_save
from tests.support.roundtrip_fake import check_roundtrip

ROOT = Path(__file__).resolve().parents[2]


def _graphs(seed: int, n: int = 40) -> list[tuple[bytes, bytes]]:
    return [
        (json.dumps({"graph": i}).encode(), bytes((seed * (i + 1) + j) % 251 for j in range(4096))) for i in range(n)
    ]


def test_a_bundle_stored_against_another_rebuilds_exactly_and_keeps_only_what_differs() -> None:
    base_graphs = _graphs(3)
    mine = [(j, bytearray(c)) for j, c in base_graphs]
    for i in range(0, 40, 3):  # a word of every third record differs, as the ranks' argument words do
        mine[i][1][100:108] = b"\xff" * 8
    mine[5] = (b'{"graph": 5, "longer": true}', mine[5][1])  # a part of another length is kept whole
    mine.append((b'{"graph": 40}', b"only here" * 10))  # and a graph the base lacks
    base, bundle = pack_bundle(base_graphs), pack_bundle(mine)
    delta = pack_delta(bundle, base, 0)
    assert is_delta(delta) and not is_delta(bundle)
    assert len(delta) < len(bundle) // 20
    assert rebuild(delta, base, len(bundle), "mine", "base") == bundle


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ("base", "is not the bundle mine was stored against"),
        ("size", "stands for a bundle of .* bytes, the manifest says"),
        ("frame", "zstd frame"),
    ],
)
def test_a_stored_bundle_that_cannot_come_back_whole_is_refused_by_name(change: str, words: str) -> None:
    base, bundle = pack_bundle(_graphs(3)), pack_bundle(_graphs(5))
    delta = bytearray(pack_delta(bundle, base, 0))
    size = len(bundle)
    if change == "base":
        base = pack_bundle(_graphs(4))
    elif change == "size":
        size += 1
    else:
        delta[-4] ^= 0xFF
    with pytest.raises(ArchiveCorruptError, match=words):
        rebuild(delta, base, size, "mine", "base")


def test_a_bundle_is_never_stored_against_one_stored_so() -> None:
    base, bundle = pack_bundle(_graphs(3)), pack_bundle(_graphs(5))
    with pytest.raises(ArchiveCorruptError, match="never against another stored so"):
        pack_delta(bundle, pack_delta(base, bundle, 1), 1)


# ------------------------------------------------------------------ two rank folders the fake driver saved
Deployment = tuple[Path, dict[str, Any], dict[str, Any]]  # the folder, rank 0's and rank 1's SAVE reports
SHIFTED = dataclasses.replace(VARIANTS, alloc='buf("pad", 1 << 22)\n' + textwrap.dedent(VARIANTS.alloc))


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, app_json_module: JsonRunner) -> Deployment:
    """rank_0 and rank_1 of one deployment: the same graphs, rank 1's memory laid out 4 MiB further on (as rank 1's
    is at TP=4); rank 1's bundle stored against rank 0's."""
    top = tmp_path_factory.mktemp("deploy")
    saves = {r: run_save(app_json_module, sc, top / f"rank_{r}") for r, sc in ((0, VARIANTS), (1, SHIFTED))}
    return top, saves[0], saves[1]


@pytest.fixture(scope="module")
def stored(deployment: Deployment) -> tuple[Path, bytes, int]:
    top = deployment[0]
    whole = (top / "rank_1" / BUNDLE_NAME).read_bytes()
    saved = foundry.store_bundle_against(top / "rank_1", top / "rank_0")
    return top, whole, saved


def test_the_second_rank_keeps_only_what_differs_and_loads_as_saved(
    deployment: Deployment,
    stored: tuple[Path, bytes, int],
    app_json_module: JsonRunner,
) -> None:
    top, _, save1 = deployment
    _, whole, saved = stored
    on_disk = (top / "rank_1" / BUNDLE_NAME).read_bytes()
    assert is_delta(on_disk) and saved == len(whole) - len(on_disk) and len(on_disk) * 4 < len(whole)
    assert not is_delta((top / "rank_0" / BUNDLE_NAME).read_bytes())  # the base stays laid out in full
    manifest = read_manifest(top / "rank_1")
    assert manifest.bundle is not None and manifest.bundle.bytes == len(whole)  # the manifest is unchanged
    count = len(manifest.bundled())
    assert bytes(read_bundle(top / "rank_1", BUNDLE_NAME, len(whole), count).layout.rebuilt or b"") == whole
    opened = open_bundle(top / "rank_1", BUNDLE_NAME, len(whole), count)
    saved_whole = parse_bundle(bytearray(whole), count, "whole")
    assert [bytes(opened.json(i)) for i in range(count)] == [bytes(j) for j in saved_whole.jsons]
    assert [bytes(opened.container(i)) for i in range(count)] == [bytes(c) for c in saved_whole.containers]
    rt = RoundTrip(top / "rank_1", save1)
    rt.load = run_load(app_json_module, SHIFTED, top / "rank_1", list(save1["native"]))
    for name in save1["native"]:
        check_roundtrip(rt, name)
    verify = subprocess.run(
        [sys.executable, "-m", "foundry.cli", "verify", str(top / "rank_1")], capture_output=True, text=True, cwd=ROOT
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    inspect = subprocess.run(
        [sys.executable, "-m", "foundry.cli", "inspect", str(top / "rank_1")], capture_output=True, text=True, cwd=ROOT
    )
    assert inspect.returncode == 0 and "stored against rank_0's" in inspect.stdout, inspect.stdout + inspect.stderr


COUNT_REBUILDS = """
import json as _json
import foundry.archive.bundle as _bundle
_rebuilds = []
_rebuild_file = _bundle._rebuild_file
def _counted(*args, **kwargs):
    _rebuilds.append(1)
    return _rebuild_file(*args, **kwargs)
_bundle._rebuild_file = _counted
"""


def test_a_process_rebuilds_a_stored_bundle_once_however_many_graphs_it_reads(
    deployment: Deployment, stored: tuple[Path, bytes, int], app_json_module: JsonRunner
) -> None:
    """Start-up's reading and each graph LOAD reads on its own take the one rebuild (gate.rebuilt_bundles), not a
    rebuild each: the bundle is tens of MB on an engine's rank."""
    top, _, save1 = deployment
    names = list(save1["native"])
    assert len(names) > 1
    code = COUNT_REBUILDS + load_script(SHIFTED, top / "rank_1", names) + "\nprint(_json.dumps(len(_rebuilds)))\n"
    assert app_json_module(code) == 1


def test_storing_again_changes_nothing(stored: tuple[Path, bytes, int]) -> None:
    top = stored[0]
    before = (top / "rank_1" / BUNDLE_NAME).read_bytes()
    assert foundry.store_bundle_against(top / "rank_1", top / "rank_0") == 0
    assert foundry.store_bundle_against(top / "rank_0", top / "rank_1") == 0  # its base is not a full bundle now
    script = subprocess.run(
        [sys.executable, str(ROOT / "scripts/store_rank_bundle.py"), str(top / "rank_1"), str(top / "rank_0")],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert script.returncode == 0 and "0 bytes saved" in script.stdout, script.stdout + script.stderr
    assert (top / "rank_1" / BUNDLE_NAME).read_bytes() == before


def test_only_two_rank_folders_of_one_deployment_are_taken(stored: tuple[Path, bytes, int], tmp_path: Path) -> None:
    top = stored[0]
    for a, b in ((top / "rank_1", top / "rank_1"), (top / "rank_1", tmp_path / "rank_0"), (top, top / "rank_0")):
        with pytest.raises(ValueError, match="need two rank folders"):
            foundry.store_bundle_against(a, b)


def _read_graphs(arch: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "foundry.cli", "verify", str(arch)], capture_output=True, text=True, cwd=ROOT
    )


def test_a_rank_folder_shipped_without_its_base_is_refused_by_name(
    stored: tuple[Path, bytes, int], tmp_path: Path
) -> None:
    top = stored[0]
    alone = tmp_path / "rank_1"
    shutil.copytree(top / "rank_1", alone)
    size = len(stored[1])
    with pytest.raises(ArchiveCorruptError, match=r"stored against rank 0's graph bundle .* Copy the deployment's"):
        read_bundle(alone, BUNDLE_NAME, size, len(read_manifest(alone).bundled()))
    renamed = tmp_path / "elsewhere" / "copy"
    shutil.copytree(top / "rank_1", renamed)
    with pytest.raises(ArchiveCorruptError, match="'copy' is not another rank's folder"):
        open_bundle(renamed, BUNDLE_NAME, size, len(read_manifest(renamed).bundled()))
    verify = _read_graphs(alone)
    assert verify.returncode != 0 and "Copy the deployment's folder whole" in verify.stdout + verify.stderr


def test_a_base_saved_again_is_refused_by_name(
    stored: tuple[Path, bytes, int], tmp_path: Path, app_json_module: JsonRunner
) -> None:
    top = stored[0]
    copy = tmp_path / "deploy"
    shutil.copytree(top / "rank_1", copy / "rank_1")
    run_save(app_json_module, SHIFTED, copy / "rank_0")  # another program's graphs in rank 0's place
    with pytest.raises(ArchiveCorruptError, match=r"is not the bundle .* was stored against .* saved again"):
        read_bundle(copy / "rank_1", BUNDLE_NAME, len(stored[1]), len(read_manifest(copy / "rank_1").bundled()))


def test_the_ranks_compared_graph_by_graph_with_rank_1_stored_against_rank_0(stored: tuple[Path, bytes, int]) -> None:
    top = stored[0]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts/diff_archives.py"), str(top / "rank_0"), str(top / "rank_1")],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "region words moved, by shift (B's offset - A's):" in proc.stdout and "by +0x400000" in proc.stdout


_BASE = pack_bundle(_graphs(3, 6))
_DELTA = pack_delta(pack_bundle(_graphs(5, 6)), _BASE, 0)
_SIZE = len(pack_bundle(_graphs(5, 6)))


@settings(max_examples=300, deadline=None, database=None)
@given(
    st.lists(st.tuples(st.integers(0, len(_DELTA) - 1), st.integers(0, 255)), min_size=1, max_size=6), st.integers(0, 8)
)
def test_a_damaged_stored_bundle_is_refused_as_corrupt_and_nothing_else(flips: list[tuple[int, int]], cut: int) -> None:
    """Bytes changed anywhere in a stored bundle (header, frame), or its end cut off: rebuilding gives the bundle
    back exactly or raises ArchiveCorruptError, never another error, and never other bytes."""
    data = bytearray(_DELTA)
    for at, value in flips:
        data[at] = value
    data = data[: len(data) - cut]
    try:
        out = rebuild(data, _BASE, _SIZE, "mine", "base")
    except ArchiveCorruptError:
        return
    assert out == pack_bundle(_graphs(5, 6))
