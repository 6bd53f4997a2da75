"""scripts/multi_summary.py, the two-GPU run's report (scripts/gpu_multi.sh): each phase's last JSON line joined,
a phase that printed none (it failed or ran out of time) shown as missing, and a line per rank and phase."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> str:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts/multi_summary.py"), *args], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_both_phases_are_joined_and_each_rank_gets_a_line(tmp_path: Path) -> None:
    save = {"save": [{"rank": r, "saved": True, "peers": 48, "peer_bytes": 3 << 26, "handle_types": [1],
                      "exitcode": 3} for r in (0, 1)]}  # fmt: skip
    fault = {"rank": 1, "error": "AcceleratorError", "message": "illegal memory access", "exitcode": 0}
    load = {"load": [{"rank": 0, "identical": True, "eager_after_load": [3.0] * 4, "exitcode": 0}, fault]}
    (tmp_path / "multi-save.json").write_text(json.dumps(save))
    (tmp_path / "multi-load.json").write_text(json.dumps(load))
    joined = json.loads(_run("join", str(tmp_path)))
    assert joined == {"save": save["save"], "load": load["load"]}
    (tmp_path / "multi-rank.json").write_text(json.dumps(joined))
    lines = _run("show", str(tmp_path / "multi-rank.json")).splitlines()
    assert lines == [
        "save rank 0 saved peers=48 bytes=201326592 types=[1] exit=3",
        "save rank 1 saved peers=48 bytes=201326592 types=[1] exit=3",
        "load rank 0 identical eager_after_load=[3.0, 3.0, 3.0, 3.0] exit=0",
        "load rank 1 AcceleratorError: illegal memory access eager_after_load=None exit=0",
    ]


def test_a_phase_that_printed_nothing_and_a_machine_with_one_gpu(tmp_path: Path) -> None:
    (tmp_path / "multi-save.json").write_text("Traceback (most recent call last):\n")  # not JSON: the phase died
    assert json.loads(_run("join", str(tmp_path))) == {"save": [], "load": []}
    (tmp_path / "empty.json").write_text(json.dumps({"save": [], "load": []}))
    assert "no phase reported" in _run("show", str(tmp_path / "empty.json"))
    (tmp_path / "multi-save.json").write_text(json.dumps({"skipped": "needs 2 GPUs, found 1"}))
    (tmp_path / "one.json").write_text(_run("join", str(tmp_path)))
    assert _run("show", str(tmp_path / "one.json")).strip() == "skipped: needs 2 GPUs, found 1"


def test_the_run_sharing_region_memory_by_ipc_handle_gets_its_own_lines(tmp_path: Path) -> None:
    save = {"save": [{"rank": 0, "saved": True, "peers": 49, "peer_bytes": 5, "handle_types": [1], "exitcode": 0}]}
    ipc = {"save": save["save"], "load": [{"rank": 0, "error": "PeerMappingError", "message": "not mapped again"}]}
    (tmp_path / "multi-save.json").write_text(json.dumps(save))
    (tmp_path / "multi-ipc.json").write_text(json.dumps(ipc))
    joined = json.loads(_run("join", str(tmp_path)))
    assert joined == {"save": save["save"], "load": [], "ipc": ipc}
    (tmp_path / "multi-rank.json").write_text(json.dumps(joined))
    lines = _run("show", str(tmp_path / "multi-rank.json")).splitlines()
    assert lines[-2:] == [
        "region memory by IPC handle: save rank 0 saved peers=49 bytes=5 types=[1] exit=0",
        "region memory by IPC handle: load rank 0 PeerMappingError: not mapped again eager_after_load=None exit=None",
    ]


def test_the_custom_all_reduce_probe_gets_a_line_per_rank_and_phase(tmp_path: Path) -> None:
    registration = {"first_slot": 1, "inputs": [7]}
    save = {"save": [{"rank": 0, "saved": True, "foundry_handles": True, "offsets": [512], "native_ok": True,
                      "registration": registration, "peers": [[1, 2]], "exitcode": 0}]}  # fmt: skip
    load = {"load": [{"rank": 0, "error": "PeerMappingError", "message": "not mapped again", "exitcode": 0},
                     {"rank": 1, "identical": True, "slots": 1, "exitcode": 0}]}  # fmt: skip
    (tmp_path / "s.json").write_text(json.dumps(save))
    (tmp_path / "l.json").write_text(json.dumps(load))
    assert _run("probe", str(tmp_path / "s.json"), str(tmp_path / "l.json")).splitlines() == [
        f"save rank 0 saved foundry_handles=True offsets=[512] native_ok=True registration={registration} "
        "peers=[[1, 2]] exit=0",
        "load rank 0 PeerMappingError: not mapped again exit=0",
        "load rank 1 identical, slots written 1 exit=0",
    ]
    (tmp_path / "skip.json").write_text(json.dumps({"skipped": "vLLM is not importable here"}))
    assert _run("probe", str(tmp_path / "skip.json"), str(tmp_path / "none.json")).strip() == (
        "skipped: vLLM is not importable here"
    )
