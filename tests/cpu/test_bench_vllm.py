"""`foundry bench --engine vllm` end to end on the CPU, against a stand-in vLLM (tests/support/fakeengines_pkg):
each run is its own process tree (LLM() children, `vllm serve` servers over HTTP), SAVE and LOAD run under
`foundry run`, tokens are compared, native and LOAD are measured in turn, and the report is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from foundry_bench.serving.compare import answer_groups, compare_runs
from foundry_bench.vllm import VllmBenchConfig, compare_tokens, log_numbers, run_vllm_bench
from foundry_bench.vllm.report import choice_lines, load_phases, render, startup_rows
from tests.support.benchvllm import FAKE_ENGINES, tokens_only
from tests.support.ports import held


@pytest.mark.parametrize("api", ["llm", "serve"])
def test_every_run_answers_and_the_report_compares_them(fake_vllm: None, tmp_path: Path, api: str) -> None:
    cfg = VllmBenchConfig(
        out=tmp_path / "out", api=api, batches=(1, 3), max_tokens=4, decode_batches=(2,), decode_steps=3, reps=3,
        prefill_tokens=50, archive=tmp_path / "arch", models=tmp_path / "models", timeout=60,
    )  # fmt: skip
    # Where the benchmark once numbered its servers from (8101 on) something else listens: another run of it,
    # or of these tests, at the same time. Its servers take the ports the OS hands out, so no run answers for
    # another, nor keeps another's server from starting.
    with held(*range(8101, 8105)):
        doc = run_vllm_bench(cfg)
    results = doc["results"]
    assert set(results) == {"native_cold", "save", "native", "load"}
    assert all("error" not in r for r in results.values()), {m: r.get("error") for m, r in results.items()}
    assert all(c["identical"] for c in doc["compare"].values())
    assert results["load"]["plugin"]["mode"] == "load" and results["save"]["plugin"]["mode"] == "save"
    assert "plugin" not in results["native"]
    assert [len(t) for t in results["load"]["tokens"]] == [1, 3]
    decode = doc["measured"]["decode"]["2"]
    assert len(decode["values"]["native"]) == 3 and len(decode["values"]["load"]) == 3
    assert decode["load_over_native"] > 0
    assert doc["measured"]["prefill"]["tokens"] == 50
    # and a prefill short enough for the engine's graphs (vLLM's default mode: its piecewise ones)
    assert doc["measured"]["short_prefill"]["tokens"] == 256 and doc["measured"]["short_prefill"]["reps"] >= 1
    steps = [name for name, _ in load_phases(results["load"])]
    assert steps[-2:] == ["ready (the engine built, or /health)", "first request answered"]
    assert "graphs installed (Foundry)" in steps
    tag = cfg.out / cfg.tag()
    assert json.loads(Path(str(tag) + ".json").read_text())["compare"] == doc["compare"]
    text = Path(str(tag) + ".txt").read_text()
    assert "Foundry LOAD" in text and "decode tokens/s, batch 2" in text and "LOAD's start-up" in text
    assert decode["paired_ratio_median"] > 0 and set(decode["iqr"]) == set()  # 3 reps: too few for quartiles
    if api == "llm":
        assert results["native"]["compile_s"] == 1.25 and results["native"]["model_load_s"] == 0.5
    else:
        assert results["native"]["init_engine_s"] == 2.5 and results["native"]["health_s"] > 0


def test_tokens_that_differ_are_named_by_request_and_sequence() -> None:
    ref = [[[1, 2]], [[1], [2], [3]]]
    assert compare_tokens(ref, ref)["identical"]
    diff = compare_tokens(ref, [[[1, 2]], [[1], [9], [3]]])
    assert not diff["identical"]
    assert diff["requests"][1] == {"batch": 3, "identical": 2, "of": 3, "first_diff": 1}
    assert not compare_tokens(ref, ref[:1])["identical"]


def test_vllm_log_figures_are_read_and_compile_times_add_up() -> None:
    text = (
        "Model loading took 1.12 GiB memory and 0.702154 seconds\ntorch.compile took 4.32 s in total\n"
        "torch.compile took 1.00 s in total\nGraph capturing finished in 4 secs, took 0.50 GiB\n"
        "init engine (profile, create kv cache, warmup model) took 11.43 s (compilation: 7.48 s)\n"
        "GPU KV cache size: 646,578 tokens\n"
    )
    assert log_numbers(text) == {"model_load_s": 0.702154, "compile_s": 5.32, "capture_s": 4.0, "init_engine_s": 11.43,
                                 "capture_gib": 0.5, "kv_cache_tokens": 646578}  # fmt: skip


def test_a_failed_run_is_reported_not_raised() -> None:
    doc = {
        "config": {"api": "serve", "shape": "qwen3-8b", "runner": "v2", "cudagraph_mode": "default",
                   "max_tokens": 32, "batches": [1], "reps": 5},
        "results": {"native": {"ready_wall_s": 10.0, "tokens": []}, "load": {"error": "boom"}},
        "compare": {"load": {"identical": False, "why": "boom"}},
        "measured": {},
    }  # fmt: skip
    text = render(doc)
    assert "Foundry LOAD" in text and "NO" in text


def test_foundry_seconds_split_into_the_wait_for_builds_and_the_per_graph_work() -> None:
    from foundry_bench.serving.report import foundry_rows as rows_of

    def foundry_rows(r: dict[str, Any]) -> list[list[str]]:
        return rows_of(r, "vLLM")

    timings = {"load_modules_s": 0.3, "load_modules_checks_s": 0.1, "load_modules_context_s": 0.02,
               "load_modules_reserve_s": 0.15,
               "load_modules_warm_s": 0.05, "start_graph_builds_s": 0.05, "start_graph_builds_at": 100.0,
               "graphs_ready_at": 100.9, "graphs_ready_s": 0.6}  # fmt: skip
    rows = dict(foundry_rows({"plugin": {"timings": timings, "loader": {"all_replayable_s": 1.4}}}))
    assert rows["  waited for the builds"] == "0.500" and rows["  per graph, after"] == "0.100"
    # The CUDA context is vLLM's own (made natively too, found made under LOAD): shown, not in the total.
    assert rows["  reserve"] == "0.150" and rows["  context (vLLM's own: not in the total)"] == "0.020"
    assert rows["total"] == "0.930"
    split = {**timings, "graphs_ready_finish_s": 0.55, "graphs_ready_install_s": 0.04}
    rows = dict(foundry_rows({"plugin": {"timings": split, "loader": {"all_replayable_s": 1.4}}}))
    assert rows["  in finish_one_graph_load, wait included"] == "0.550" and rows["  installed into vLLM"] == "0.040"
    # Builds done before vLLM asked: nothing waited; an old report without the marks shows no split.
    rows = dict(
        foundry_rows(
            {"plugin": {"timings": {**timings, "graphs_ready_at": 102.0}, "loader": {"all_replayable_s": 1.4}}}
        )
    )
    assert rows["  waited for the builds"] == "0.000"
    rows = dict(foundry_rows({"plugin": {"timings": {"graphs_ready_s": 0.6}}}))
    assert "  waited for the builds" not in rows and rows["total"] == "0.600"
    # The own execs, as the report written again once they are built says.
    built = {"all_replayable_s": 1.4, "all_dedicated_s": 2.5, "switches": 7}
    rows = dict(foundry_rows({"plugin": {"timings": timings, "loader": built}}))
    assert rows["own execs all built, s after start_graph_builds"] == "2.500"
    assert rows["  switches of shared execs before"] == "7"
    # Start-up's graph reading, taken over by start_graph_builds: its wait, and the graphs it read itself.
    taken = {**built, "startup_wait_s": 0.003, "read_s": 0.223, "graphs_read_ahead": 1500, "graphs_read_here": 438}
    rows = dict(foundry_rows({"plugin": {"timings": timings, "loader": taken}}))
    assert rows["  waited for start-up"] == "0.003"
    assert rows["  read graphs start-up had not (438 of 1938)"] == "0.223"
    rows = dict(foundry_rows({"plugin": {"timings": timings, "loader": built}}))  # a report from before them
    assert not any(k.startswith(("  waited for start-up", "  read graphs")) for k in rows)
    failed = {**timings, "own_execs_error": "background loading failed: refused"}
    rows = dict(foundry_rows({"plugin": {"timings": failed, "loader": built}}))
    assert rows["own execs NOT all built"] == "background loading failed: refused"


def test_without_a_native_run_load_is_compared_with_save() -> None:
    """`--modes save,load`: SAVE's tokens (its graphs captured natively in its own process) are the reference,
    so the table says what LOAD was compared with instead of a bare "NO"."""
    from foundry_bench.serving.compare import compare_runs

    same, other = [[[1, 2, 3]], [[4, 5], [6, 7]]], [[[1, 2, 3]], [[4, 5], [6, 8]]]
    compare = compare_runs({"save": {"tokens": same}, "load": {"tokens": same}})
    assert compare["save"] == {"identical": None, "reference": True}
    assert compare["load"]["identical"] is True and compare["load"]["against"] == "save"
    assert compare_runs({"save": {"tokens": same}, "load": {"tokens": other}})["load"]["identical"] is False
    # a native run, when there is one, stays the reference of both
    both = compare_runs({"native": {"tokens": same}, "save": {"tokens": same}, "load": {"tokens": other}})
    assert both["save"]["identical"] is True and both["save"]["against"] == "native"
    assert both["load"]["identical"] is False
    assert compare_runs({"load": {"tokens": same}})["load"] == {"identical": False, "why": "no run to compare with"}
    doc = {
        "config": {"api": "serve", "shape": "qwen3-8b", "runner": "v2", "cudagraph_mode": "default",
                   "max_tokens": 32, "batches": [1], "reps": 5},
        "results": {"save": {"ready_wall_s": 10.0, "tokens": same}, "load": {"ready_wall_s": 5.0, "tokens": same}},
        "compare": compare,
        "measured": {},
    }  # fmt: skip
    rows = {line.split()[1]: line for line in render(doc).splitlines() if line.startswith("Foundry ")}
    assert rows["SAVE"].rstrip().endswith("reference") and rows["LOAD"].rstrip().endswith("yes (vs save)")


@pytest.mark.parametrize("api", ["llm", "serve"])
def test_a_last_bit_logprob_difference_is_caught_where_the_tokens_agree(
    fake_vllm: None, tmp_path: Path, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stand-in engine moves LOAD's first logprob by one unit in the last place: every greedy token still
    agrees, and the run must not be called identical."""
    monkeypatch.setenv("FAKE_ENGINE_NUDGE", "load")
    cfg = tokens_only(tmp_path, api=api)
    doc = run_vllm_bench(cfg)
    c = doc["compare"]["load"]
    assert c["tokens_identical"] is True and c["identical"] is False
    requests = c["logprobs"]["requests"]
    assert [(r["identical"], r["of"], r["first_diff"]) for r in requests] == [(0, 1, 0), (0, 3, 0)]
    assert all(0 < r["max_abs_diff"] < 1e-15 for r in requests)
    assert [r["first_position"] for r in requests] == [0, 0]  # the nudged value is the prefill's token
    assert "NO: tokens yes, logprobs differ" in render(doc)
    # the matrix says how much: every batch's sequences, tokens then logprobs, and the largest difference
    from foundry_bench.serving.matrix import matrix_rows

    (row,) = matrix_rows([doc])
    assert row[4].startswith("NO: logprobs differ (tokens 1/1, 3/3; logprobs 0/1, 0/3, max "), row[4]
    # SAVE is the reference here; its digests are in the document, and a document rendered again (no lists in
    # hand) still tells the runs apart by them
    from foundry_bench.serving.compare import compare_runs

    again = compare_runs(doc["results"])["load"]
    assert again["tokens_identical"] and not again["identical"]
    assert [len(d) for d in doc["results"]["load"]["logprob_digests"]] == [1, 3]


def test_a_second_load_process_says_whether_loads_answer_alike(
    fake_vllm: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`load_again`: a second LOAD process, compared with native like LOAD and with LOAD itself. The stand-in
    nudges every LOAD process's first logprob alike: both differ from native, the same way."""
    monkeypatch.setenv("FAKE_ENGINE_NUDGE", "load")
    doc = run_vllm_bench(tokens_only(tmp_path, api="serve", modes=("save", "load_again", "native", "load")))
    again = doc["compare"]["load_again"]
    assert again["tokens_identical"] and not again["identical"] and again["same_as_load"] is True
    rows = {line.split("  ")[0]: line for line in render(doc).splitlines() if line.startswith("Foundry LOAD")}
    assert rows["Foundry LOAD, another process"].rstrip().endswith("the same as LOAD's")
    # every run against every run: which processes computed the same bits, whichever is the reference
    assert answer_groups(doc["results"]) == [["save", "native"], ["load_again", "load"]]
    groups = "{Foundry SAVE, native, warm caches} {Foundry LOAD, another process, Foundry LOAD}"
    assert f"answered alike, every token and log-probability at every batch: {groups}" in render(doc)
    # the native run's capture timed to the millisecond beside vLLM's whole seconds; the plugin's runs untimed
    results = doc["results"]
    assert 0.02 <= results["native"]["capture_exact_s"] < 30 and results["native"]["capture_s"] == 0.0
    assert "capture_exact_s" not in results["save"] and "capture_s" in results["save"]
    from foundry_bench.serving.compare import compare_runs

    results = {m: dict(r) for m, r in doc["results"].items()}
    results["load_again"]["logprob_digests"] = [["0" * 16] * len(d) for d in results["load"]["logprob_digests"]]
    assert compare_runs(results)["load_again"]["same_as_load"] is False


def test_the_first_differing_position_tells_prefill_from_decode() -> None:
    """Per request, the earliest generated position at which any sequence's values differ: a difference first
    at a decode step is told apart from one in the prefill; a shorter answer differs where it ends."""
    from foundry_bench.serving.logprobs import compare_logprobs

    def seq(*lps: float) -> list[list[object]]:
        return [[lp, [lp, lp - 1.0]] for lp in lps]

    ref = [[seq(-1.0, -2.0, -3.0), seq(-1.5, -2.5, -3.5)]]
    decode = [[seq(-1.0, -2.0, -3.0), seq(-1.5, -2.5, -3.25)]]
    short = [[seq(-1.0, -2.0), seq(-1.5, -2.5, -3.5)]]
    (row,) = compare_logprobs(ref, decode)["requests"]
    assert (row["identical"], row["first_diff"], row["first_position"], row["max_abs_diff"]) == (1, 1, 2, 0.25)
    assert compare_logprobs(ref, short)["requests"][0]["first_position"] == 2
    assert compare_logprobs(ref, ref)["requests"][0]["first_position"] is None


def test_the_matrix_runs_every_architecture_and_writes_one_table(
    fake_vllm: None, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--matrix` with two of its shapes named: `vllm serve` by default, one row per shape, the verdicts read
    from the runs' own comparisons."""
    from foundry.cli.main import main
    from foundry_bench.serving.matrix import HEADER

    monkeypatch.syspath_prepend(str(FAKE_ENGINES))  # the command looks for vLLM before it starts any run

    out = tmp_path / "out"
    args = ["bench", "--engine", "vllm", "--matrix", "--shapes", "qwen3-moe-small,gemma2-small", "--out", str(out),
            "--modes", "save,load", "--batches", "1,2", "--decode-batches", "", "--reps", "1"]  # fmt: skip
    assert main(args) == 0
    text = (out / "vllm-matrix.txt").read_text()
    assert text in capsys.readouterr().out
    rows = json.loads((out / "vllm-matrix.json").read_text())["rows"]
    assert [r[:5] for r in rows] == [
        ["gemma2-small", "Gemma2ForCausalLM", "serve/v2/default", "reference", "yes (tokens, logprobs)"],
        ["qwen3-moe-small", "Qwen3MoeForCausalLM", "serve/v2/default", "reference", "yes (tokens, logprobs)"],
    ]
    assert len(rows[0]) == len(HEADER)


def test_tokens_tied_at_the_edge_of_the_top_k_do_not_count_as_a_difference(
    fake_vllm: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tokens with exactly the same logprob at the edge of the top k: LOAD's engine lists the other one. Every
    value is still equal bit for bit, so the run is identical; the token IDs' difference is reported beside it."""
    monkeypatch.setenv("FAKE_ENGINE_TIE", "load")
    cfg = tokens_only(tmp_path)
    c = run_vllm_bench(cfg)["compare"]["load"]
    assert c["identical"] is True
    assert [(r["identical"], r["ids_identical"], r["max_abs_diff"]) for r in c["logprobs"]["requests"]] == [
        (1, 0, 0.0),
        (3, 0, 0.0),
    ]


def test_a_save_whose_memory_profile_differs_from_natives_is_caught(
    fake_vllm: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stand-in engine sizes its KV cache one block smaller under SAVE (as a SAVE process whose own memory
    shows in the engine's profile would): outputs agree, and the comparison and the matrix still say so."""
    from foundry_bench.serving.matrix import matrix_rows

    monkeypatch.setenv("FAKE_ENGINE_KV", "save")
    cfg = tokens_only(tmp_path, modes=("save", "native", "load"), batches=(1,), logprobs=2)
    doc = run_vllm_bench(cfg)
    save = doc["compare"]["save"]
    assert save["identical"] is True and save["same_memory_profile"] is False
    assert save["memory_profile"]["kv_cache_tokens"] == {"here": 1_000_000, "reference": 1_000_016}
    assert doc["compare"]["load"]["same_memory_profile"] is True  # the fake LOAD sizes its own
    (row,) = matrix_rows([doc])
    assert row[6] == "kv_cache_tokens 1,000,000 vs 1,000,016"
    # and the run's own report says it, run by run, where the identity column shows nothing
    profile = (tmp_path / "out" / f"{cfg.tag()}.txt").read_text().split("Memory profile against the reference")[1]
    assert "Foundry SAVE: kv_cache_tokens 1,000,000 vs 1,000,016" in profile and "Foundry LOAD: as native's" in profile


def test_the_start_up_targets_are_judged_from_natives_and_loads_figures() -> None:
    """vLLM's "init engine" under LOAD at most native warm's less its capture, and the first request after LOAD
    at most 1.1x native warm's; a target whose figures a run lacks is left out, not guessed."""
    from foundry_bench.vllm.report import target_lines

    native = {"init_engine_s": 28.81, "capture_s": 4.0, "first_request_s": 0.058}
    doc = {"results": {"native": native, "load": {"init_engine_s": 8.89, "first_request_s": 0.069}}}
    lines = target_lines(doc)
    assert lines[:2] == ["", "Targets:"]
    assert lines[2] == (
        "- init engine under LOAD <= native warm's less its capture: 8.89 s against 28.81 - 4.00 (+-0.5) = 24.81 s: met"
    )
    assert lines[3] == "- first request after LOAD <= 1.1x native warm's: 0.069 s / 0.058 s = 1.19: NOT met"
    doc["results"]["load"]["init_engine_s"] = 25.5
    assert target_lines(doc)[2].endswith("= 24.81 s: NOT met")
    # vLLM logs its capture in whole seconds: a LOAD within half a second of the bound is not judged either way
    for load_s in (24.5, 25.0):
        doc["results"]["load"]["init_engine_s"] = load_s
        assert target_lines(doc)[2].endswith(
            "= 24.81 s: undecided: within the 0.5 s the capture's figure is rounded by"
        ), target_lines(doc)
    assert target_lines({"results": {"native": {"init_engine_s": 10.0}, "load": {"init_engine_s": 3.0}}}) == []
    # the native run's capture timed to the millisecond (the bench's capture timer): judged either way, to the bound
    native["capture_exact_s"] = 4.213
    doc["results"]["load"]["init_engine_s"] = 24.5
    assert target_lines(doc)[2].endswith("28.81 - 4.21 = 24.60 s: met"), target_lines(doc)
    doc["results"]["load"]["init_engine_s"] = 24.7
    assert target_lines(doc)[2].endswith("= 24.60 s: NOT met")


def test_the_native_capture_is_read_to_the_millisecond_where_the_timer_wrote_it() -> None:
    from foundry_bench.serving.stacksite.foundry_capture_timer import TIMER_LINE
    from foundry_bench.vllm.runs import log_numbers

    text = "(EngineCore) INFO Graph capturing finished in 3 secs, took 0.46 GiB\n" + TIMER_LINE.format(2.71828) + "\n"
    numbers = log_numbers(text)
    assert numbers["capture_s"] == 3.0 and numbers["capture_exact_s"] == 2.718 and numbers["capture_gib"] == 0.46


def test_a_native_run_that_answered_nothing_is_no_reference_and_nothing_is_judged_against_it() -> None:
    """A warm native run stopped before it answered (its budget ran out) names why in its cell, and a LOAD with
    nothing to compare with says so rather than "NO"."""
    doc = {
        "config": {"api": "serve", "shape": "qwen3-8b", "runner": "v2", "cudagraph_mode": "default",
                   "max_tokens": 32, "batches": [1], "reps": 5},
        "results": {"native": {"error": "/health did not answer 200 within 2 s\nlast lines", "rc": -15},
                    "load_again": {"ready_wall_s": 60.0, "tokens": [[[1, 2]]]}},
        "measured": {},
    }  # fmt: skip
    doc["compare"] = compare_runs(doc["results"])
    rows = {row[0]: row[-1] for row in startup_rows(doc)}
    assert rows["native, warm caches"] == "no answers, no reference: rc -15, /health did not answer 200 within 2 s"
    assert rows["Foundry LOAD, another process"] == "not compared: no run to compare with"


def test_repeat_asks_each_run_its_batches_again_and_says_whether_it_repeated_itself(
    fake_vllm: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--repeat`: a process that answers a prompt again one unit in the last place off (the stand-in's
    FAKE_ENGINE_DRIFT, here native's) is told apart from one that repeats itself, batch by batch; the tokens
    alone would not show it."""
    monkeypatch.setenv("FAKE_ENGINE_DRIFT", "native")
    doc = run_vllm_bench(tokens_only(tmp_path, api="serve", modes=("save", "native", "load"), repeat=True))
    results = doc["results"]
    assert results["save"]["repeat"] == results["load"]["repeat"] == [
        {"batch": 1, "of": 1, "tokens": 1, "identical": 1}, {"batch": 3, "of": 3, "tokens": 3, "identical": 3},
    ]  # fmt: skip
    assert results["native"]["repeat"] == [
        {"batch": 1, "of": 1, "tokens": 1, "identical": 0}, {"batch": 3, "of": 3, "tokens": 3, "identical": 0},
    ]  # fmt: skip
    assert doc["compare"]["load"]["identical"] is True  # the first answers, as always, are what is compared
    text = render(doc)
    assert "- native, warm caches: batch 1 0/1 (tokens 1/1), batch 3 0/3 (tokens 3/3)" in text
    assert "- Foundry LOAD: batch 1 1/1, batch 3 3/3" in text
    assert "repeat" not in run_vllm_bench(tokens_only(tmp_path / "plain", modes=("save",)))["results"]["save"]


def test_runs_that_all_agree_or_too_few_make_no_answer_group_line() -> None:
    """The groups line names the odd process; where every run agrees, or two runs only (the comparison with the
    reference says it all), there is no line, and a run that answered nothing is in no group."""
    from foundry_bench.serving.report import LABELS, answer_group_lines

    same, other = {"tokens": ["a"], "logprob_digests": [["x"]]}, {"tokens": ["a"], "logprob_digests": [["y"]]}
    assert answer_group_lines({"native": same, "save": same, "load": same}, LABELS) == []
    assert answer_group_lines({"native": same, "load": other}, LABELS) == []
    results = {"native_cold": same, "save": same, "native": other, "load": same, "load_again": {"error": "x"}}
    assert answer_groups(results) == [["native_cold", "save", "load"], ["native"]]
    assert answer_group_lines(results, LABELS)[-1].endswith(
        "{native, cold caches, Foundry SAVE, Foundry LOAD} {native, warm caches}"
    )


def test_the_report_says_how_many_kernels_took_saves_configuration_and_which_timed_their_own() -> None:
    replay = {"replayed": 37, "timed": ["triton_red_late"], "timed_count": 1, "unmatched": [], "unmatched_count": 0,
              "cache_reads_declined": 38}  # fmt: skip
    results = {"save": {"plugin": {"kernel_choices": 38, "cache_reads_declined": 12, "kernel_choices_after_save": 2}},
               "load": {"plugin": {"kernel_choices": replay}}, "native": {},
               "load_again": {"plugin": {"kernel_choices": {**replay, "cache_reads_declined": None}}}}  # fmt: skip
    assert choice_lines(results)[1:] == [
        "Inductor's kernel choices by timing in each process's whole life (SAVE records them, LOAD takes SAVE's):",
        "- Foundry SAVE: 38 kernels chose by timing; their choices recorded; 2 more after the archive was written, "
        "not in it; 12 cached choices not read",
        "- Foundry LOAD: 37 kernels took SAVE's configuration untimed; 1 timed their own (triton_red_late); 38 cached "
        "choices not read",
        "- Foundry LOAD, another process: 37 kernels took SAVE's configuration untimed; 1 timed their own "
        "(triton_red_late)",  # written before cached choices were counted
    ]
    assert choice_lines({"native": {}}) == []  # runs without the plugin: no section
