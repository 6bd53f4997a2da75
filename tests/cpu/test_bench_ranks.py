"""`foundry bench --tp N`, rank by rank (foundry_bench/serving/ranks.py): each rank's capture read from the engine's
log by the rank its lines name, each rank's plugin report, and the many-GPU target judged on the rank that gains
least; end to end on the stand-in vLLM at TP=2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from foundry.integration.shared import Place, report_path
from foundry_bench.serving.ranks import captures_by_rank, clear_rank_reports, rank_reports, restore_lines
from foundry_bench.sglang.runs import LOG_NUMBERS as SGLANG
from foundry_bench.vllm import run_vllm_bench
from foundry_bench.vllm.runs import LOG_NUMBERS as VLLM
from tests.support.benchvllm import tokens_only

# The engines' own lines, as their TP=2 logs hold them (2x H200, 06735d4), interleaved across ranks.
VLLM_LOG = """\
(Worker_TP0 pid=4754) foundry bench: capture_model took 12.789 s
(APIServer pid=4525) INFO 11-29 17:27:09 [api_utils.py:273] HTTP1 capture_model took 9.000 s
foundry bench: capture_model took 7.000 s
(Worker_TP1 pid=4755) foundry bench: capture_model took 12.794 s
"""
SGLANG_LOG = """\
[2026-11-29 17:37:29.935 TP1 EP1] Capture target prefill CUDA graph end. elapsed=6.77 s, mem usage=1.16 GB.
[2026-11-29 17:37:29.971 TP0 EP0] Capture target prefill CUDA graph end. elapsed=6.82 s, mem usage=1.16 GB.
[2026-11-29 17:37:33.252 TP0 EP0] Capture target decode CUDA graph end. elapsed=3.28 s, mem usage=0.35 GB.
[2026-11-29 17:37:33.295 TP1 EP1] Capture target decode CUDA graph end. elapsed=3.36 s, mem usage=0.35 GB.
"""


def test_each_ranks_capture_is_read_from_its_own_lines() -> None:
    # vLLM: one line a rank; the API server's line and an unprefixed one name no rank and count for none.
    assert captures_by_rank(VLLM_LOG, [VLLM["capture_exact_s"][0]]) == {0: 12.789, 1: 12.794}
    # SGLang: prefill and decode added up per rank, where "the last line of each" would take rank 0's prefill
    # and rank 1's decode.
    patterns = [SGLANG["prefill_graphs_s"], SGLANG["decode_graphs_s"]]
    assert captures_by_rank(SGLANG_LOG, patterns) == {0: 10.1, 1: 10.13}
    assert captures_by_rank("no capture here\n", patterns) == {}


def test_rank_reports_are_found_beside_rank_zeros_and_cleared_before_a_run(tmp_path: Path) -> None:
    report = tmp_path / "report-load.json"
    for rank in range(3):
        report_path(report, Place(rank, 3)).write_text(json.dumps({"rank": rank}))
    assert rank_reports(report, 3) == {1: {"rank": 1}, 2: {"rank": 2}}
    assert rank_reports(report, 2) == {1: {"rank": 1}}  # a world of two reads no third rank
    clear_rank_reports(report, 3)
    assert list(tmp_path.iterdir()) == [] and rank_reports(report, 3) == {}


def _doc(captures: dict[str, float], restores: list[float], tp: int = 2) -> dict[str, Any]:
    def plugin(seconds: float) -> dict[str, Any]:
        return {"timings": {"load_modules_s": seconds / 2, "graphs_ready_s": seconds / 2}}

    load = {"plugin": plugin(restores[0]), "plugin_ranks": {str(r): plugin(s) for r, s in enumerate(restores) if r}}
    return {"config": {"tp": tp}, "results": {"native": {"capture_by_rank": captures}, "load": load}}


def test_the_restore_target_is_judged_on_the_rank_that_gains_least() -> None:
    lines = restore_lines(_doc({"0": 10.0, "1": 10.0}, [0.25, 0.4]))
    text = "\n".join(lines)
    assert "rank 1, 10.000 / 0.400 s = 25.0x: met" in text and "40.0x" in text
    text = "\n".join(restore_lines(_doc({"0": 10.0, "1": 6.0}, [0.25, 0.4])))
    assert "rank 1, 6.000 / 0.400 s = 15.0x: NOT met" in text
    # a rank whose report or capture is missing: not judged, and named
    text = "\n".join(restore_lines(_doc({"0": 10.0}, [0.25, 0.4])))
    assert "not judged" in text and "ranks [1]" in text
    assert restore_lines(_doc({"0": 10.0}, [0.25], tp=1)) == []  # one GPU: nothing rank by rank


def test_tensor_parallel_bench_reports_every_ranks_capture_and_restore(fake_vllm: None, tmp_path: Path) -> None:
    doc = run_vllm_bench(tokens_only(tmp_path, modes=("save", "native", "load"), tp=2))
    results = doc["results"]
    assert all("error" not in r for r in results.values()), {m: r.get("error") for m, r in results.items()}
    assert results["native"]["capture_by_rank"] == {"0": 0.5, "1": 0.75}  # as the JSON keeps it
    assert results["load"]["plugin_ranks"]["1"]["timings"]["graphs_ready_s"] == 0.06  # rank 1's own report
    text = (tmp_path / "out" / "vllm-qwen3-0.6b-llm-v2-default-tp2.txt").read_text()
    # rank 0: 0.5 / 0.06 s, rank 1: 0.75 / 0.12 s; the least is rank 1's 6.2x
    assert "Rank by rank" in text and "the least, rank 1, 0.750 / 0.120 s = 6.2x: NOT met" in text


def test_a_runs_figures_are_rank_zeros_not_the_last_rank_to_log() -> None:
    from foundry_bench.serving.ranks import rank_zero_lines
    from foundry_bench.sglang.runs import log_numbers

    mixed = log_numbers(SGLANG_LOG)  # the last line of each: rank 0's prefill, rank 1's decode
    assert (mixed["prefill_graphs_s"], mixed["decode_graphs_s"]) == (6.82, 3.36)
    own = log_numbers(rank_zero_lines(SGLANG_LOG))
    assert (own["prefill_graphs_s"], own["decode_graphs_s"]) == (6.82, 3.28)
    # lines that name no rank (the engine core's, the API server's) stay
    assert rank_zero_lines(VLLM_LOG).splitlines() == [VLLM_LOG.splitlines()[i] for i in (0, 1, 2)]


def test_tensor_parallel_sglang_bench_reads_each_ranks_own_lines_and_report(fake_sglang: None, tmp_path: Path) -> None:
    from foundry_bench.sglang import run_sglang_bench
    from tests.cpu.test_bench_sglang import _cfg

    cfg = _cfg(tmp_path, modes=("save", "native", "load"), tp=2, decode_batches=(), reps=1, prefill_tokens=0, starts=2)
    doc = run_sglang_bench(cfg)
    results = doc["results"]
    assert all("error" not in r for r in results.values()), {m: r.get("error") for m, r in results.items()}
    # each rank's prefill and decode capture added up from its own lines (rank 1's decode 0.25 s longer)
    assert results["native"]["capture_by_rank"] == {"0": 10.75, "1": 11.0}
    # the run's own figures are rank 0's, however the ranks' lines interleave
    assert results["native"]["decode_graphs_s"] == 3.25
    (extra,) = doc["more_starts"]["native"]  # a start before the compared pair: rank 0's figures as well
    assert extra["decode_graphs_s"] == 3.25 and "error" not in extra
    assert results["load"]["plugin_ranks"]["1"]["timings"]["graphs_ready_s"] == 0.5  # rank 1's own report
    text = (cfg.out / f"{cfg.tag()}.txt").read_text()
    # rank 0: 10.75 / 0.55 s, rank 1: 11.0 / 1.1 s; the least is rank 1's 10.0x
    assert "the least, rank 1, 11.000 / 1.100 s = 10.0x: NOT met" in text
