"""scripts/diff_archives.py over archives the fake driver saved: two SAVEs of one program in fresh processes
hold the same records; a program that allocates one buffer more first gives its kernels other region
offsets, which the comparison finds word by word and classes by where the words point."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.cpu.test_roundtrip_fake_manifest import VARIANTS
from tests.support.graphs import save_script
from tests.support.subproc import run_json

ROOT = Path(__file__).resolve().parents[2]


def _diff(a: Path, b: Path, tmp_path: Path) -> tuple[dict[str, Any], str]:
    out = tmp_path / "diff.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts/diff_archives.py"), str(a), str(b), "--json", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), proc.stdout


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory, fakecuda_dir: Path, foundry_lib: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("diff")
    shifted = dataclasses.replace(VARIANTS, alloc='buf("pad", 1 << 22)\n' + textwrap.dedent(VARIANTS.alloc))
    made = {}
    for name, scenario in (("one", VARIANTS), ("again", VARIANTS), ("shifted", shifted)):
        made[name] = root / name
        run_json(save_script(scenario, made[name]), lib_dir=fakecuda_dir, preload=foundry_lib)
    return made


def test_two_saves_of_one_program_hold_the_same_records(archives: dict[str, Path], tmp_path: Path) -> None:
    report, text = _diff(archives["one"], archives["again"], tmp_path)
    assert report["graphs"] and not report["only_a"] and not report["only_b"]
    assert all(g["record_identical"] and not g.get("kernels") for g in report["graphs"].values() if not g.get("member"))
    assert "differing argument words: none" in text


def test_other_region_offsets_are_found_word_by_word(archives: dict[str, Path], tmp_path: Path) -> None:
    report, text = _diff(archives["one"], archives["shifted"], tmp_path)
    words = [w for g in report["graphs"].values() for k in g.get("kernels", []) for w in k["words"]]
    assert words, report
    assert {w["kind"] for w in words} == {"region, other offset"}
    assert all(int(w["b"], 16) - int(w["a"], 16) == w["shift"] == 1 << 22 for w in words), words
    assert "region, other offset" in text and "node [" in text
    low = min(w["at_a"] for w in words)
    high = max(w["at_a"] for w in words)
    assert all(int(w["a"], 16) - w["at_a"] == report["region"][0][0] for w in words)  # offsets in A's region
    assert (
        f"region words moved, by shift (B's offset - A's): {len(words)} by +0x400000 (A's offsets {low:#x}-{high:#x});"
        in text
    )
    # one process each: no peer's memory mapped, said as such for both
    assert report["peers"] == [{"count": 0, "bytes": 0, "offsets": None}] * 2
    assert "peer mappings of A: 0, 0.0 MiB\npeer mappings of B: 0, 0.0 MiB" in text


def test_the_files_both_archives_hold_alike_are_counted_once(archives: dict[str, Path], tmp_path: Path) -> None:
    same, text = _diff(archives["one"], archives["again"], tmp_path)
    shifted, _ = _diff(archives["one"], archives["shifted"], tmp_path)
    files = same["files"]
    images = sum(p.stat().st_size for p in (archives["one"] / "images").iterdir())
    assert images and files["identical_bytes"] >= images  # the kernel images are the same files in both
    assert files["bytes"][0] == sum(p.stat().st_size for p in archives["one"].rglob("*") if p.is_file())
    assert "images" not in shifted["files"]["differing_bytes_of_a_by_folder"]
    # the largest files that differ, named, each of A's and none shared
    largest = shifted["files"]["largest_differing_files_of_a"]
    for rel, _ in largest:
        other = archives["shifted"] / rel
        assert not other.is_file() or other.read_bytes() != (archives["one"] / rel).read_bytes(), rel
    assert largest
    assert [n for _, n in largest] == sorted((n for _, n in largest), reverse=True)
    assert all((archives["one"] / rel).stat().st_size == n for rel, n in largest)
    # the shifted program's records hold other offsets: less of it is shared than of a second SAVE
    assert shifted["files"]["identical_bytes"] < files["identical_bytes"]
    assert "both with one copy of what is shared" in text


@pytest.mark.parametrize(
    ("a", "b", "half"),
    [(0x2C0179F8, 0x12C0179F8, "high"), (0x325D2430, 0x325D5EA0, "low"), (0x7F5135863000, 0x7F8F35864000, "both")],
)
def test_other_words_are_classed_by_the_half_that_differs(a: int, b: int, half: str) -> None:
    """Words seen differing between two vLLM ranks' records (2x H200): a high half alone is padding beside a
    32-bit field, not a pointer."""
    spec = importlib.util.spec_from_file_location("diff_archives", ROOT / "scripts/diff_archives.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module._halves(a ^ b) == half
