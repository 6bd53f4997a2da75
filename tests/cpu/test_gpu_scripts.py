"""The GPU machine's scripts on the CPU, where a part of them decides something: the benchmark's own bound
(scripts/gpu_setup.sh ``bench_seconds``) never reaches past the call's timeout, whatever --seconds a caller gave,
so that the benchmark stops its engines and writes its report before the timeout kills it; scripts/gpu_lanes.sh
gives each lane caches of its own and leads its summary with each lane's verdicts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench_seconds(*args: str) -> str:
    script = f'. "{ROOT / "scripts" / "gpu_setup.sh"}"; bench_seconds "$@"'
    done = subprocess.run(["bash", "-c", script, "bash", *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("args", "bound"),
    [
        (("450", "--shapes", "gemma2-small", "--seconds", "500", "--reps", "1"), "450"),  # past the timeout: capped
        (("450", "--seconds", "300"), "300"),  # the caller's, within it
        (("450", "--reps", "1"), "450"),  # none given
        (("450", "--seconds", "100", "--seconds", "470"), "450"),  # the last one given counts, as argparse reads it
    ],
)
def test_the_benchmarks_bound_never_passes_the_calls_timeout(args: tuple[str, ...], bound: str) -> None:
    assert _bench_seconds(*args) == bound


def test_lanes_keep_caches_of_their_own_and_the_summary_leads_with_each_lanes_verdicts(tmp_path: Path) -> None:
    """scripts/gpu_lanes.sh with its engines stubbed: each lane's processes see cache folders of their own (two
    lanes sharing the machine's read each other's kernel choices), a lane's own setting still wins, and the
    summary gives each lane's verdicts from its report before the end of its log."""
    repo = tmp_path / "repo"
    (repo / "scripts" / "vllm").mkdir(parents=True)
    (repo / "scripts" / "gpu_lanes.sh").write_text((ROOT / "scripts" / "gpu_lanes.sh").read_text())
    (repo / "scripts" / "gpu_setup.sh").write_text(
        "install_carried_wheels() { :; }\ninstall_engine_bundle() { :; }\nbuild_native_if_stale() { :; }\n"
    )
    (repo / "scripts" / "vllm" / "gpu_run.sh").write_text(
        'echo "caches $XDG_CACHE_HOME $VLLM_CACHE_ROOT $TRITON_CACHE_DIR $TORCHINDUCTOR_CACHE_DIR"\n'
        'printf "Runs that answered alike, every token: {Foundry SAVE, Foundry LOAD}\\n- init engine under LOAD: met\\n'
        '- LOAD took longer than native warm at: weights +0.20 s\\nsome other line\\n" > "$OUT/report.txt"\n'
        "for i in $(seq 30); do echo log line $i; done\n"
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho GPU 0\necho GPU 1\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    # LANE_TAIL: the whole stub log in the summary, its first line (the caches) included
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "OUT": str(tmp_path / "out"), "LANES_SECONDS": "120",
           "HOME": str(tmp_path), "LANE_TAIL": "40"}  # fmt: skip
    lanes = ["0 vllm --modes save", "1 vllm TRITON_CACHE_DIR=/elsewhere --modes save"]
    done = subprocess.run(["bash", "scripts/gpu_lanes.sh", *lanes], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    summary = (tmp_path / "out" / "lanes.txt").read_text()
    first, second = summary.split("== lane 2")
    assert "caches /tmp/lane-1/caches /tmp/lane-1/caches/vllm /tmp/lane-1/caches/triton" in first
    assert "caches /tmp/lane-2/caches /tmp/lane-2/caches/vllm /elsewhere /tmp/lane-2/caches/inductor" in second
    for lane in (first, second):
        verdicts = lane.index("Runs that answered alike")
        assert lane.index("- init engine under LOAD: met") > verdicts and "some other line" not in lane
        assert "- LOAD took longer than native warm at: weights +0.20 s" in lane
        assert verdicts < lane.index("log line 30")
