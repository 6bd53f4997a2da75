"""scripts/tier_summary.py, what scripts/gpu_tier.sh prints last, over JSON the GPU tier and the decoder benchmark
wrote on H200s (results/): the tier's outcome with the test that failed, each benchmark result's LOAD timings and
ratios, and two runs side by side."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts/tier_summary.py"), *args], capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_the_tier_names_what_did_not_pass_and_prints_its_figures() -> None:
    proc = _run("tier", str(RESULTS / "gpu-tier-h200x2-82d6d55.json"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "GPU tier: 38 passed, 1 failed, 0 skipped"
    assert lines[1].split() == [
        "failed",
        "tests/gpu/test_multi_rank.py::test_an_all_reduce_graph_saved_per_rank_loads_bit_identically",
    ]
    assert any(line.startswith("  roundtrip: ") for line in lines)


def test_a_tier_cut_short_says_so_with_its_skips_and_slowest_tests(tmp_path: Path) -> None:
    """A summary the tier wrote after some test (tests/gpu/conftest.py), the run then killed from outside, and the
    tests its deadline kept from starting, skipped."""
    import json

    doc = json.loads((RESULTS / "gpu-tier-h200x2-82d6d55.json").read_text())
    doc["complete"] = False
    doc["tests"][-1] = {**doc["tests"][-1], "outcome": "skipped", "seconds": 0.0}
    path = tmp_path / "gpu-tier.json"
    path.write_text(json.dumps(doc))
    lines = _run("tier", str(path)).stdout.splitlines()
    n = len(doc["tests"])
    assert lines[0] == f"GPU tier: {doc['passed']} passed, {doc['failed']} failed, 1 skipped; CUT SHORT after {n} tests"
    slowest = max(doc["tests"], key=lambda t: t["seconds"])
    (line,) = [x for x in lines if x.startswith("  slowest: ")]
    assert line.startswith(f"  slowest: {slowest['test'].split('::')[-1][:60]} {slowest['seconds']:.0f} s")


def test_a_missing_tier_file_is_said_and_fails() -> None:
    proc = _run("tier", str(RESULTS / "no-such.json"))
    assert proc.returncode == 1 and "no-such.json" in proc.stderr


def test_each_benchmark_result_and_two_runs_side_by_side() -> None:
    new, base = (
        RESULTS / "cold-start-0.6b-eager-h200-698437d.json",
        RESULTS / "cold-start-0.6b-eager-h200-71d2dfe-same-call-698437d.json",
    )
    cold = _run("cold", str(new))
    assert cold.returncode == 0, cold.stderr
    assert cold.stdout.startswith("qwen3-0.6b eager load timings {")
    assert "  replay max/median: same process " in cold.stdout and "  cold path {" in cold.stdout
    both = _run("compare", str(new), str(base))
    assert both.returncode == 0, both.stderr
    lines = both.stdout.splitlines()
    assert lines[:2] == ["side by side, this checkout vs the baseline, in this call", "  qwen3-0.6b eager"]
    assert lines[2].split()[0] == "native_warmup_capture_s" and len(lines[2].split()) == 3


def test_the_machine_line_and_the_codec_check() -> None:
    machine = _run("machine")
    assert machine.returncode == 0 and machine.stdout.startswith(f"python {sys.version.split()[0]} torch ")
    codecs = _run("codecs")
    missing = [m for m in ("lz4", "zstandard") if importlib.util.find_spec(m) is None]
    assert codecs.returncode == (1 if missing else 0)
    assert all(m in codecs.stdout for m in missing) and (("WARNING" in codecs.stdout) == bool(missing))
    assert _run("nonsense").returncode == 2


def test_rounds_print_each_figures_median_of_both_checkouts_and_their_ratio(tmp_path: Path) -> None:
    """Two rounds of the eager row (c8f8d34 against bf1bee2, two calls on one H200): the medians of two values
    are their means, and the ratio is this checkout's median over the baseline's."""
    import shutil

    pairs = [("c8f8d34-same-call-bf1bee2-cold-machine", "bf1bee2-same-call-c8f8d34-cold-machine"),
             ("c8f8d34-same-call-bf1bee2", "bf1bee2-same-call-c8f8d34")]  # fmt: skip
    for r, (this, base) in enumerate(pairs, start=1):
        shutil.copy(RESULTS / f"cold-start-0.6b-eager-h200-{this}.json", tmp_path / f"this-{r}.json")
        shutil.copy(RESULTS / f"cold-start-0.6b-eager-h200-{base}.json", tmp_path / f"base-{r}.json")
    (tmp_path / "this-3.json").write_text((tmp_path / "this-1.json").read_text())  # a round without its baseline
    proc = _run("rounds", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["rounds: 2 of each checkout, medians (min-max), this checkout over the baseline",
                         "  qwen3-0.6b eager"]  # fmt: skip
    row = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert row["load_all_s"][0] == "0.1383" and row["load_all_s"][1] == "(0.1093-0.1673)"
    assert row["load_all_s"][2] == "0.1329" and row["load_all_s"][4] == "1.041"
    assert "bit_identical" not in row  # not a number
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _run("rounds", str(empty)).stdout.splitlines()[1] == "  no round has both reports"
