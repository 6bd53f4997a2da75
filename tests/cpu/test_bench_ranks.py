"""`foundry bench --tp N`, rank by rank (foundry_bench/serving/ranks.py): each rank's capture read from the engine's
log by the rank its lines name, each rank's plugin report, the many-GPU targets (restore judged on the rank that
gains least, the engine's init against native warm's); end to end on the stand-in vLLM at TP=2."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from foundry.integration.shared import Place, report_path
from foundry_bench.serving.ranks import (
    captures_by_rank,
    clear_rank_reports,
    init_ratio_line,
    rank_reports,
    restore_lines,
)
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
# vLLM in expert parallel names each worker by both ranks (4x H200, b55f4d4).
VLLM_EP_LOG = """\
(Worker_TP2_EP2 pid=8566) foundry bench: capture_model took 4.151 s
(Worker_TP0_EP0 pid=8564) foundry bench: capture_model took 4.172 s
(Worker_TP3_EP3 pid=8567) foundry bench: capture_model took 4.253 s
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
    assert captures_by_rank(VLLM_EP_LOG, [VLLM["capture_exact_s"][0]]) == {0: 4.172, 2: 4.151, 3: 4.253}
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


def _lines(doc: dict[str, Any]) -> list[str]:
    return restore_lines(doc, "init_engine_s", "init engine")


def test_the_restore_target_is_judged_on_the_rank_that_gains_least() -> None:
    lines = _lines(_doc({"0": 10.0, "1": 10.0}, [0.25, 0.4]))
    text = "\n".join(lines)
    assert "rank 1, 10.000 / 0.400 s = 25.0x: met" in text and "40.0x" in text
    text = "\n".join(_lines(_doc({"0": 10.0, "1": 6.0}, [0.25, 0.4])))
    assert "rank 1, 6.000 / 0.400 s = 15.0x: NOT met" in text
    # a rank whose report or capture is missing: not judged, and named
    text = "\n".join(_lines(_doc({"0": 10.0}, [0.25, 0.4])))
    assert "not judged" in text and "ranks [1]" in text
    assert _lines(_doc({"0": 10.0}, [0.25], tp=1)) == []  # one GPU: nothing rank by rank


def test_the_init_target_compares_loads_init_with_native_warms_on_the_medians_of_its_starts() -> None:
    doc = _doc({"0": 10.0, "1": 10.0}, [0.25, 0.25])
    doc["results"]["native"]["init_engine_s"], doc["results"]["load"]["init_engine_s"] = 20.0, 7.0
    assert init_ratio_line(doc, "init_engine_s", "init engine") == [
        "- init engine under LOAD <= 0.3x native warm's: 7.00 s / 20.00 s = 0.35: NOT met"
    ]
    assert _lines(doc)[-1] == init_ratio_line(doc, "init_engine_s", "init engine")[0]  # after the restore's verdict
    # two more starts a side: the medians judge (native 20, 30, 26 -> 26; LOAD 7, 7.4, 7.6 -> 7.4)
    doc["more_starts"] = {
        "native": [{"start": 2, "init_engine_s": 30.0}, {"start": 3, "init_engine_s": 26.0}],
        "load": [{"start": 2, "init_engine_s": 7.4}, {"start": 3, "init_engine_s": 7.6}, {"start": 4, "error": "x"}],
    }
    assert init_ratio_line(doc, "init_engine_s", "init engine") == [
        "- init engine under LOAD <= 0.3x native warm's (medians of 3 starts): 7.40 s / 26.00 s = 0.28: met"
    ]
    assert init_ratio_line(doc, "scheduler_s", "scheduler") == []  # no such figure: no verdict
    doc["config"]["tp"] = 1
    assert init_ratio_line(doc, "init_engine_s", "init engine") == []  # one GPU: the one-GPU targets judge


def test_tensor_parallel_bench_reports_every_ranks_capture_and_restore(fake_vllm: None, tmp_path: Path) -> None:
    cfg = tokens_only(tmp_path, modes=("save", "native", "load"), tp=2)
    doc = run_vllm_bench(cfg)
    assert (tmp_path / "arch.config").read_text() == cfg.tag() + "\n"  # beside the archive: what SAVE saved it for
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
    assert rank_zero_lines(VLLM_EP_LOG).splitlines() == [VLLM_EP_LOG.splitlines()[1]]  # not rank 3's, logged last


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


def test_a_failed_runs_cell_names_the_exception_the_engines_log_ends_with() -> None:
    from foundry_bench.serving.failures import cause_line, clipped

    # A worker's refusal among vLLM's prefixed traceback lines, then the engine's shutdown lines (4x H200, b55f4d4).
    log = "\n".join(
        [
            "the engine process ended while building the engine (rc=-9); the last lines of load.log:",
            "(Worker pid=22715) ERROR 11-29 19:42:26 [multiproc_executor.py:901]     self.worker.init_device()",
            "(Worker pid=22715) ERROR 11-29 19:42:26 [multiproc_executor.py:901] foundry.integration.shared.errors."
            "ArchiveMismatchError: the archive /a/rank_1 was saved for another setup:",
            "(Worker pid=22715) ERROR 11-29 19:42:26 [multiproc_executor.py:901]   model: saved 'x', here 'y'",
            "(EngineCore pid=22505) INFO 11-29 19:42:26 [multiproc_executor.py:429] [shutdown] waiting for workers",
        ]
    )
    assert cause_line(log) == "ArchiveMismatchError: the archive /a/rank_1 was saved for another setup:"
    # no exception in the tail: the benchmark's own first line
    assert cause_line("no answer after 420 s while building the engine (rc=None)\nINFO up") == (
        "no answer after 420 s while building the engine (rc=None)"
    )
    warned = (  # a run the benchmark's bound ended, whose log's last exception-like words are a warning's quote
        "/health did not answer 200 within 37 s (rc=None); the last lines of native.log:\n(APIServer pid=1) WARNING "
        "[system_utils.py:299] This can cause fd limit errors like `OSError: [Errno 24] Too many open files`."
    )
    assert cause_line(warned).startswith("/health did not answer 200 within 37 s")
    assert cause_line("") == "?" and len(cause_line("ValueError: " + "x" * 200)) == 80
    # a long message keeps its first line and its end, within the bound
    long = "what failed\n" + "frame\n" * 1000 + "RuntimeError: the end"
    kept = clipped(long, 400)
    assert len(kept) <= 400 and kept.startswith("what failed\n...") and kept.endswith("RuntimeError: the end")
    assert clipped("short", 400) == "short"


def test_a_call_that_loads_another_configurations_archive_is_refused_before_any_engine_starts(tmp_path: Path) -> None:
    from foundry_bench.serving.marks import archive_problem, mark_archive

    saved = tokens_only(tmp_path, modes=("save",), shape="qwen3-0.6b", tp=2, expert_parallel=True)
    mark_archive(saved)
    # another shape's call that loads what that SAVE left (as an 8B call once loaded a MoE archive): refused
    other = tokens_only(tmp_path, modes=("native", "load"), shape="qwen3-8b", tp=2)
    problem = archive_problem(other)
    assert problem is not None and saved.tag() in problem and other.tag() in problem and "add save" in problem
    with pytest.raises(ValueError, match=re.escape(f"last saved for {saved.tag()}, not for {other.tag()}")):
        run_vllm_bench(other)  # raised before any engine starts: no stand-in vLLM is installed for this test
    # the same configuration, a call that saves again, one that loads nothing, an unmarked archive: no objection
    assert archive_problem(tokens_only(tmp_path, modes=("native", "load"), tp=2, expert_parallel=True)) is None
    assert archive_problem(tokens_only(tmp_path, modes=("save", "load"), shape="qwen3-8b")) is None
    assert archive_problem(tokens_only(tmp_path, modes=("native",), shape="qwen3-8b")) is None
    assert archive_problem(tokens_only(tmp_path, modes=("load_again",), shape="qwen3-8b")) is not None
    (tmp_path / "arch.config").unlink()
    assert archive_problem(other) is None


# The ranks' own lines (4x H200, b55f4d4): SGLang's scheduler lines in milliseconds, vLLM's workers' in seconds.
ARRIVALS_SGLANG = """\
[2026-11-29 19:38:27.360 TP0] Init torch distributed begin.
[2026-11-29 19:38:28.462 TP2] Init torch distributed begin.
[2026-11-29 19:38:32.623 TP1] Init torch distributed begin.
[2026-11-29 19:38:40.100 TP1] Init torch distributed begin.
[2026-11-29 19:38:36.000 TP0] Load weight end. elapsed=0.20 s
"""
ARRIVALS_VLLM = """\
(Worker_TP0 pid=6267) INFO 11-29 19:23:00 [decorators.py:311] Directly load AOT compilation from path /x
(APIServer pid=5849) INFO 11-29 19:23:09 [api_utils.py:273] HTTP1 Directly load AOT nothing
(Worker_TP3_EP3 pid=6270) INFO 11-29 19:23:03 [decorators.py:311] Directly load AOT compilation from path /x
"""


def test_when_each_rank_reached_a_step_is_read_from_its_own_lines_after_the_first_rank() -> None:
    from foundry_bench.serving.ranks import arrival_lines, arrivals_by_rank
    from foundry_bench.sglang.runs import _Runs as SglangRuns
    from foundry_bench.vllm.runs import _Runs as VllmRuns

    sglang = arrivals_by_rank(ARRIVALS_SGLANG, SglangRuns.arrival_markers)
    # each rank's first line (rank 1's second one is not an arrival); one rank alone at a step says nothing
    assert sglang == {"torch.distributed begins": {"0": 0.0, "1": 5.263, "2": 1.102}}
    vllm = arrivals_by_rank(ARRIVALS_VLLM, VllmRuns.arrival_markers)
    assert vllm == {"torch.compile's graphs loaded": {"0": 0.0, "3": 3.0}}  # the API server's line names no rank
    doc = {"results": {"native": {"arrivals_by_rank": {"torch.compile's graphs loaded": {"0": 0.0, "3": 0.0}}},
                       "load": {"arrivals_by_rank": vllm}}}  # fmt: skip
    text = "\n".join(arrival_lines(doc))
    assert "torch.compile's graphs loaded  rank 0 +0.00 s  rank 3 +3.00 s" in text
    assert arrival_lines({"results": {"native": {}, "load": {}}}) == []
