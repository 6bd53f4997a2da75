"""The start-up figures of `foundry bench`, on the CPU: ``--starts N`` (warm native and LOAD each started N times,
alternately and one process at a time, against the stand-in vLLM of tests/support/fakeengines_pkg; the start-up
targets judged on the medians), and vLLM's start-up step by step, native warm beside LOAD."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from foundry_bench.serving.starts import MORE_STARTS, round_need, start_figures
from foundry_bench.vllm import log_numbers, run_vllm_bench
from foundry_bench.vllm.report import render, step_lines, target_lines
from tests.support.benchvllm import Probe, tokens_only


def test_more_starts_alternate_the_sides_and_each_answers_its_first_request(
    fake_vllm: None, tmp_path: Path, engine_probe: Probe
) -> None:
    doc = run_vllm_bench(tokens_only(tmp_path, api="serve", modes=("save", "native", "load"), starts=3))
    assert all("error" not in r for r in doc["results"].values()), doc["results"]
    # two more rounds, LOAD first in the first of them, then the compared pair (native first, as without --starts)
    assert [line["mode"] for line in engine_probe()] == ["save", "load", "native", "native", "load", "native", "load"]
    more = doc[MORE_STARTS]
    for side in ("native", "load"):
        assert [s["start"] for s in more[side]] == [2, 3], more[side]
        for s in more[side]:
            assert "error" not in s and s["first_request_s"] > 0 and s["init_engine_s"] == 2.5, s
            assert "tokens" not in s  # the compared run alone answers the compared batches
    out = tmp_path / "out" / "vllm-qwen3-0.6b-serve-v2-default"
    assert sorted(p.name for p in out.glob("*-start*.log")) == [
        "load-start2.log", "load-start3.log", "native-start2.log", "native-start3.log",
    ]  # fmt: skip
    text = render(doc)
    assert "Every start of the warm runs" in text
    assert text.count("compared") >= 2
    assert "(medians of 3 starts each)" in text, text


def test_the_targets_take_the_medians_of_every_start_that_answered() -> None:
    native = {"init_engine_s": 10.0, "capture_exact_s": 3.0, "first_request_s": 0.10}
    load = {"init_engine_s": 8.0, "first_request_s": 0.20}
    doc: dict[str, Any] = {
        "results": {"native": native, "load": load},
        MORE_STARTS: {
            "native": [
                {"start": 2, "init_engine_s": 20.0, "capture_exact_s": 3.2, "first_request_s": 0.09},
                {"start": 3, "init_engine_s": 9.0, "capture_exact_s": 2.8, "first_request_s": 0.11},
            ],
            "load": [
                {"start": 2, "init_engine_s": 6.0, "first_request_s": 0.10},
                {"start": 3, "error": "the engine died", "init_engine_s": 1.0},  # a failed start counts for nothing
            ],
        },
    }
    n, ld = start_figures(doc, "native"), start_figures(doc, "load")
    assert (n["init_engine_s"], n["capture_exact_s"], n["first_request_s"], n["starts"]) == (10.0, 3.0, 0.10, 3)
    assert (ld["init_engine_s"], ld["starts"]) == (7.0, 2) and ld["first_request_s"] == pytest.approx(0.15)
    lines = target_lines(doc)
    # one start each said: LOAD 8.00 against 10.00 - 3.00 (met), first request 2x (NOT met); the medians say the same
    # of the init and of the first request 0.15 / 0.10
    assert lines[2].startswith("- init engine under LOAD <= native warm's less its capture (medians of 2 starts each)")
    assert lines[2].endswith("7.00 s against 10.00 - 3.00 = 7.00 s: met"), lines
    assert lines[3].endswith("0.150 s / 0.100 s = 1.50: NOT met"), lines
    # without other starts the compared runs' own figures, and no word of medians
    del doc[MORE_STARTS]
    assert start_figures(doc, "native") is native
    assert target_lines(doc)[2] == "- init engine under LOAD <= native warm's less its capture: 8.00 s against " \
        "10.00 - 3.00 = 7.00 s: NOT met"  # fmt: skip


def test_rounds_that_would_leave_the_compared_pair_too_little_time_are_skipped_and_said(
    fake_vllm: None, tmp_path: Path, engine_probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    from foundry_bench.serving.runs import STOP_RESERVE_S
    from foundry_bench.vllm import runs

    monkeypatch.setattr(runs._Runs, "needs", {"native": 1000.0, "load": 1000.0})
    # a budget for the compared pair, not for one more round besides it
    cfg = tokens_only(tmp_path, api="serve", modes=("native", "load"), starts=4, seconds=STOP_RESERVE_S + 2100)
    doc = run_vllm_bench(cfg)
    assert [line["mode"] for line in engine_probe()] == ["native", "load"]
    assert doc[MORE_STARTS] == {"native": [], "load": []}
    assert "budget" in doc[MORE_STARTS + "_skipped"]
    assert all("error" not in r for r in doc["results"].values())
    assert "later starts skipped" not in render(doc)  # no other start: no table of starts, nor its note


def test_vllm_start_up_steps_come_from_its_own_durations_and_loads_longer_steps_are_named() -> None:
    """torch.compile split into Dynamo's trace and the compiled graphs (loaded from the cache, or compiled cold, each
    compile range), the profile forward; then each step of native warm beside LOAD's, the capture beside LOAD's
    hand-over of the graphs, and the steps where LOAD took longer named."""
    native_log = (
        "Model loading took 3.09 GiB and 1.422376 seconds\nDynamo bytecode transform time: 1.77 s\n"
        "Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 0.820 s\n"
        "torch.compile took 2.76 s in total\nInitial profiling/warmup run took 0.11 s\n"
        "Graph capturing finished in 3 secs, took 0.46 GiB\nfoundry bench: capture_model took 3.375 s\n"
        "init engine (profile, create kv cache, warmup model) took 8.67 s (compilation: 2.76 s)\n"
    )
    cold = "Compiling a graph for compile range (1, 8192) takes 11.71 s\nCompiling a graph for compile range (8193, " \
        "16384) takes 1.29 s\n"  # fmt: skip
    assert log_numbers(cold)["compiled_graphs_s"] == 13.0
    native = log_numbers(native_log)
    assert (native["dynamo_s"], native["compiled_graphs_s"], native["profile_run_s"]) == (1.77, 0.82, 0.11)
    changed = {"time: 1.77 s": "time: 1.99 s", "took 2.76 s": "took 2.98 s", "took 8.67": "took 5.59"}
    load_log = native_log
    for old, new in changed.items():
        load_log = load_log.replace(old, new)
    load = log_numbers(load_log)
    load = {k: v for k, v in load.items() if not k.startswith("capture")}
    load["plugin"] = {"timings": {"graphs_ready_s": 0.052}}
    lines = step_lines({"results": {"native": native, "load": load}})
    rows = {line.rsplit(None, 3)[0]: line.split()[-3:] for line in lines[2].splitlines()[2:]}
    assert rows["torch.compile: Dynamo's trace of the model"] == ["1.770", "1.990", "+0.220"]
    assert rows["capture, or LOAD's graphs handed over"] == ["3.375", "0.052", "-3.323"]
    # init engine less torch.compile, the profile forward and the graphs: the rest
    assert rows["torch.compile: the rest"] == ["0.170", "0.170", "+0.000"]
    assert rows["the rest of init engine (KV cache, warm-up)"] == ["2.425", "2.448", "+0.023"]
    assert lines[-1] == (
        "- LOAD took longer than native warm at: torch.compile: Dynamo's trace of the model +0.22 s; the rest of "
        "init engine (KV cache, warm-up) +0.02 s"
    )
    assert step_lines({"results": {"native": native}}) == []


def test_a_round_of_starts_is_held_to_what_the_last_one_took_where_the_engine_declares_less() -> None:
    """vLLM declares no seconds for its runs: a later round must leave room for itself and the compared pair by what
    the round before took; an engine's declared seconds count where they are more."""
    assert round_need(declared=0.0, last_round=0.0, steady=0.0) == 0.0  # the first round of an engine declaring none
    assert round_need(declared=0.0, last_round=100.0, steady=20.0) == 220.0
    assert round_need(declared=115.0, last_round=100.0, steady=20.0) == 250.0
