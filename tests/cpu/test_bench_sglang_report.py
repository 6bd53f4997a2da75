"""The SGLang benchmark's documents, without engines: the figures read from SGLang's log, the targets judged
from a document, the matrix's columns and the start-up steps set beside native's (foundry_bench/sglang/)."""

from __future__ import annotations

import pytest

from foundry_bench.sglang import log_numbers
from foundry_bench.sglang.engines import cli_flags
from foundry_bench.sglang.report import scheduler_less_graphs, segments, target_lines
from foundry_bench.sglang.targets import targets


def test_sglang_log_figures_and_server_flags() -> None:
    text = ("Load weight end. elapsed=0.24 s, type=Qwen3\nCapture target prefill CUDA graph end. elapsed=86.14 s\n"
            "Capture target decode CUDA graph end. elapsed=5.51 s\n"
            "max_total_num_tokens=1234, chunked_prefill_size=8192, max_running_requests=64\n"
            "[2026-11-28 18:43:29] Engine startup timings (s): load_weight=0.13, kv_cache_allocation=0.02, "
            "scheduler_e2e=93.04, cuda_graph={prefill=86.14, decode=5.51}, tokenizer_e2e=121.19\n")  # fmt: skip
    figures = log_numbers(text)
    assert figures == {"weights_s": 0.24, "prefill_graphs_s": 86.14, "decode_graphs_s": 5.51, "scheduler_s": 93.04,
                       "max_total_num_tokens": 1234.0, "max_running_requests": 64.0}  # fmt: skip
    assert scheduler_less_graphs(figures) == pytest.approx(1.39)
    assert scheduler_less_graphs({"prefill_graphs_s": 1.0}) is None  # an older log without the timings line
    flags = cli_flags({"skip_tokenizer_init": True, "enable_x": False, "mem_fraction_static": 0.35, "a": [1, 2],
                       "json_arg": {"k": 1}, "none": None})  # fmt: skip
    assert flags == ["--skip-tokenizer-init", "--mem-fraction-static", "0.35", "--a", "1", "2", "--json-arg",
                     '{"k": 1}']  # fmt: skip


def test_targets_and_plot_parts_from_a_document() -> None:
    doc = {
        "config": {"api": "engine", "shape": "qwen3-0.6b", "batches": [1, 8], "reps": 7, "max_tokens": 32},
        "results": {
            "native_cold": {"prefill_graphs_s": 74.9, "decode_graphs_s": 6.2, "ready_wall_s": 140.0},
            "native": {"prefill_graphs_s": 8.0, "decode_graphs_s": 3.0, "engine_init_s": 40.0},
            "load": {"engine_init_s": 6.0, "prefill_graphs_s": 0.2, "decode_graphs_s": 0.01, "ready_wall_s": 30.0,
                     "import_s": 20.0, "weights_s": 1.0,
                     "plugin": {"timings": {"load_modules_s": 0.5, "start_graph_builds_s": 0.3,
                                            "graphs_ready_s": 0.2}}},
        },
        "compare": {"load": {"identical": True}},
        "measured": {"decode": {"1": {"paired_ratio_median": 0.995}, "256": {"paired_ratio_median": 1.02}}},
    }  # fmt: skip
    t = targets(doc)
    assert t["restore"]["speedup"] == pytest.approx(81.1) and t["restore"]["met"] is True
    assert t["restore"]["speedup_warm"] == pytest.approx(11.0)
    assert t["startup"]["ratio"] == pytest.approx(0.15) and t["startup"]["met"] is True
    assert t["decode"]["worst_batch"] == "256" and t["decode"]["met"] is False
    # init under LOAD within native warm's less its capture (40 - 11 = 29 s); no first requests timed here
    assert t["startup_less_capture"]["bound_s"] == pytest.approx(29.0) and t["startup_less_capture"]["met"] is True
    assert t["first_request"]["met"] is None
    doc["results"]["native"]["first_request_s"], doc["results"]["load"]["first_request_s"] = 0.08, 0.8
    doc["results"]["load"]["engine_init_s"] = 29.5
    t = targets(doc)
    assert t["first_request"]["ratio"] == pytest.approx(10.0) and t["first_request"]["met"] is False
    assert t["startup_less_capture"]["met"] is False
    assert "- Engine() under LOAD <= native warm's less its capture: 29.50 s against 40.00 - 11.00 = 29.00 s: " \
           "NOT met" in "\n".join(target_lines({**doc, "targets": t}))  # fmt: skip
    doc["results"]["load"]["engine_init_s"] = 6.0
    parts = dict(segments("load", doc["results"]["load"]))
    assert parts["imports"] == 20.0 and parts["CUDA graphs: capture, or Foundry's restore"] == pytest.approx(0.21)
    assert sum(parts.values()) == pytest.approx(30.0)


def test_the_tokens_target_is_judged_against_the_reference_run_the_document_has() -> None:
    """A fresh-node document (SAVE, native fresh, LOAD fresh) has no native warm run: SAVE is the reference, its
    own entry is no verdict, and the target is met when the others agree with it, and says against which."""
    compare = {"save": {"identical": None, "reference": True},
               "native_fresh": {"identical": True, "against": "save"},
               "load_fresh": {"identical": True, "against": "save"}}  # fmt: skip
    doc = {"config": {"api": "engine", "batches": [1, 8, 64], "logprobs": 20}, "results": {}, "compare": compare}
    t = targets(doc)
    assert t["tokens"] == {"identical": {"native_fresh": True, "load_fresh": True}, "against": "save", "met": True}
    lines = "\n".join(target_lines({**doc, "targets": t}))
    assert "identical to SAVE's (no native run) at batch 1, 8, 64: met" in lines
    compare["load_fresh"]["identical"] = False
    assert targets(doc)["tokens"]["met"] is False
    assert targets({**doc, "compare": {"save": compare["save"]}})["tokens"]["met"] is None


def test_the_matrix_counts_both_of_sglangs_captures() -> None:
    """SGLang logs its prefill and decode captures apart; the matrix's capture column is their sum, the seconds
    LOAD's init is held against (native warm's init less its capture)."""
    from foundry_bench.serving.matrix import HEADER, matrix_rows

    doc = {
        "config": {"shape": "mixtral-small", "api": "engine"},
        "results": {
            "native": {"engine_init_s": 23.88, "prefill_graphs_s": 4.31, "decode_graphs_s": 2.15},
            "load": {"engine_init_s": 21.71},
        },
        "compare": {"load": {"identical": True, "logprobs": {}}},
    }
    (row,) = matrix_rows([doc])
    cells = dict(zip(HEADER, row, strict=True))
    assert cells["capture s"] == "6.46" and cells["init LOAD s"] == "21.71"
    assert cells["LOAD identical"] == "yes (tokens, logprobs)" and cells["architecture"] == "MixtralForCausalLM"


LOG_MS = """[2026-11-28 18:43:27.100] Foundry load: region set, archive /tmp/a
[2026-11-28 18:43:27.200] Init torch distributed begin.
[2026-11-28 18:43:27.320] Init torch distributed ends. elapsed=0.12 s, mem usage=0.09 GB
[2026-11-28 18:43:29.000] Load weight begin. avail mem=88.16 GB
[2026-11-28 18:43:29.130] Load weight end. elapsed=0.13 s, type=MistralForCausalLM
[2026-11-28 18:43:29.250] Memory pool end. avail mem=38.01 GB
[2026-11-28 18:43:29.450] Capture target prefill CUDA graph begin. backend=breakable
[2026-11-28 18:43:29.490] Capture target prefill CUDA graph end. elapsed=0.04 s
[2026-11-28 18:43:29.491 TP0] Capture target decode CUDA graph begin. backend=full
[2026-11-28 18:43:29.501 TP0] Capture target decode CUDA graph end. elapsed=0.01 s
[2026-11-28 18:43:29.501 TP1] Capture target decode CUDA graph end. elapsed=0.01 s
[2026-11-28 18:43:30.190] Engine startup timings (s): load_weight=0.13, scheduler_e2e=3.04
"""


def test_sglang_start_up_steps_from_its_millisecond_log_lines() -> None:
    """With SGLANG_LOG_MS=1 (the benchmark sets it) each step is the time between the lines SGLang logs at its
    start and end, each line's first occurrence (rank 0's at tensor parallel); a log with one-second stamps
    gives none."""
    from foundry_bench.sglang.logsteps import log_steps
    from foundry_bench.sglang.runs import ENV

    assert ENV["SGLANG_LOG_MS"] == "1"
    steps = log_steps(LOG_MS)
    assert steps == {"step_distributed_s": 0.12, "step_to_weights_s": 1.68, "step_weights_s": 0.13,
                     "step_kv_pool_s": 0.12, "step_to_graphs_s": 0.2, "step_prefill_graphs_s": 0.04,
                     "step_between_graphs_s": 0.001, "step_decode_graphs_s": 0.01,
                     "step_to_ready_s": 0.689}  # fmt: skip
    assert log_numbers(LOG_MS)["step_to_weights_s"] == 1.68  # in the figures every run's result keeps
    seconds_only = "\n".join(line.replace(line[20:24], "", 1) for line in LOG_MS.splitlines())
    assert "[2026-11-28 18:43:27] Init torch distributed begin." in seconds_only
    assert log_steps(seconds_only) == {}
    # a line shaped like SGLang's whose stamp is no date is passed over, not raised on
    garbled = LOG_MS.replace("[2026-11-28 18:43:27.200] Init", "[2026-13-45 18:43:27.200] Init")
    assert "step_distributed_s" not in log_steps(garbled) and log_steps(garbled)["step_weights_s"] == 0.13


def test_sglang_report_sets_loads_steps_beside_natives() -> None:
    from foundry_bench.sglang.report import log_step_lines

    native = {"step_distributed_s": 0.02, "step_to_weights_s": 0.9, "step_weights_s": 0.1}
    load = {"step_distributed_s": 0.12, "step_to_weights_s": 1.68, "step_weights_s": 0.13}
    doc = {"results": {"native": native, "load": load, "save": {}}}
    text = "\n".join(log_step_lines(doc))
    rows = {line.split("  ")[0]: line.split() for line in text.splitlines() if line.startswith(("torch", "to the"))}
    assert rows["torch.distributed"][-3:] == ["0.020", "0.120", "0.100"]
    assert rows["to the weights (the model's class and modules)"][-3:] == ["0.900", "1.680", "0.780"]
    assert text.splitlines()[-1] == (
        "- LOAD took longer than native warm at: torch.distributed +0.10 s; to the weights (the model's class and "
        "modules) +0.78 s; weights +0.03 s"
    )
    # with more starts of each (--starts), the medians, and the title says so
    doc["more_starts"] = {
        "native": [{"start": 2, "step_weights_s": 0.2}, {"start": 3, "step_weights_s": 0.3}],
        "load": [{"start": 2, "step_weights_s": 0.01}, {"start": 3, "step_weights_s": 0.02}],
    }
    text = "\n".join(log_step_lines(doc))
    assert "(native warm and LOAD: medians of 3 starts each)" in text
    weights = next(line for line in text.splitlines() if line.startswith("weights "))
    assert weights.split()[-3:] == ["0.200", "0.020", "-0.180"], weights
    assert log_step_lines({"results": {"native": native, "load": {"import_s": 1.0}}}) == []  # LOAD's log had none
