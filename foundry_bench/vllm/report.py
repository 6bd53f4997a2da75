"""The vLLM benchmark's document as tables and a plot: start-up per run, LOAD's start-up by phase, and
decode/prefill parity. ``write_report(doc, OUT)`` writes OUT.json, OUT.txt (also printed) and OUT.png (where
matplotlib is installed); ``python -m foundry_bench.vllm.report OUT.json`` renders a committed document again.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from foundry.probe import table
from foundry_bench.serving.compare import reference_run
from foundry_bench.serving.digests import lines as digest_lines
from foundry_bench.serving.fresh import fresh_lines
from foundry_bench.serving.memory import memory_profile_lines
from foundry_bench.serving.ranks import arrival_lines, restore_lines
from foundry_bench.serving.report import (
    LABELS,
    LOADS,
    answer_group_lines,
    foundry_rows,
    foundry_seconds,
    native_env_lines,
    number,
    parity_lines,
    phase_steps,
    plot_startup,
    render_again,
    repeat_lines,
    sameness,
    slower_steps_line,
    start_up_check_lines,
    start_up_checks,
    step_table,
    wrap,
    write_files,
)
from foundry_bench.serving.report import fmt as _s
from foundry_bench.serving.stacks import stack_lines
from foundry_bench.serving.starts import start_figures, start_lines, starts_of
from foundry_bench.serving.written import written_lines

__all__ = ["foundry_rows", "load_phases", "render", "step_lines", "target_lines", "vllm_steps", "write_report"]

STARTS_FIGURES = [
    ("ready_wall_s", "ready s"),
    ("init_engine_s", "init engine s"),
    ("capture_exact_s", "capture s"),
    ("first_request_s", "1st request s"),
]


# vLLM's start-up step by step, from the durations it logs in every run; None: a figure the step needs is missing.
STEP_NAMES = (
    "weights (before init engine)",
    "torch.compile: Dynamo's trace of the model",
    "torch.compile: compiled graphs, loaded or compiled",
    "torch.compile: the rest",
    "the profile forward",
    "capture, or LOAD's graphs handed over",
    "the rest of init engine (KV cache, warm-up)",
    "init engine in all",
)


def _minus(total: Any, *parts: Any) -> float | None:
    values = [number(v) for v in (total, *parts)]
    known = [v for v in values if v is not None]
    return known[0] - sum(known[1:]) if len(known) == len(values) else None


def vllm_steps(mode: str, r: dict[str, Any]) -> list[float | None]:
    """``r``'s seconds in each of STEP_NAMES: capture for a native run (to the millisecond where timed), for a LOAD
    Foundry's hand-over of the graphs on vLLM's thread (its builds run beside the steps before)."""
    if mode in LOADS:
        graphs = ((r.get("plugin") or {}).get("timings") or {}).get("graphs_ready_s")
    else:
        graphs = r.get("capture_exact_s", r.get("capture_s"))
    compile_ = r.get("compile_s")
    return [
        r.get("model_load_s"),
        r.get("dynamo_s"),
        r.get("compiled_graphs_s"),
        _minus(compile_, r.get("dynamo_s"), r.get("compiled_graphs_s")),
        r.get("profile_run_s"),
        graphs,
        _minus(r.get("init_engine_s"), compile_, r.get("profile_run_s"), graphs),
        r.get("init_engine_s"),
    ]


def step_lines(doc: dict[str, Any]) -> list[str]:
    """Native warm's and LOAD's start-up step by step (medians where --starts asked for more), LOAD less native, and
    the steps LOAD took longer at; nothing where either run is missing."""
    native, load = start_figures(doc, "native"), start_figures(doc, "load")
    if "init_engine_s" not in native or "init_engine_s" not in load:
        return []
    rows, diffs = [], []
    for name, n, ld in zip(STEP_NAMES, vllm_steps("native", native), vllm_steps("load", load), strict=True):
        diff = _minus(ld, n)
        rows.append([name, _s(n, 3), _s(ld, 3), "-" if diff is None else f"{diff:+.3f}"])
        diffs.append((name, diff))
    starts = starts_of(native, load)
    each = f" (medians of {starts} starts each)" if starts > 1 else ""
    title = f"vLLM's start-up step by step, from its own log{each}:"
    return [
        "",
        title,
        table(["step", "native warm s", "LOAD s", "LOAD - native s"], rows),
        slower_steps_line(diffs[:-1]),  # the last row is the sum of the others
    ]


def _graphs(mode: str, r: dict[str, Any]) -> str:
    if mode in LOADS:
        return _s(foundry_seconds(r))
    timings = (r.get("plugin") or {}).get("timings") or {}
    capture = timings.get("capture_s", r.get("capture_s"))
    save = timings.get("save_s")
    return _s(capture) + (f" + save {_s(save)}" if save is not None else "")


def startup_rows(doc: dict[str, Any]) -> list[list[str]]:
    out = []
    for mode in LABELS:
        r = doc["results"].get(mode)
        if r is None:
            continue
        c = doc["compare"].get(mode, {})
        same = sameness(mode, c, r)
        same = f"skipped: {r['skipped']}" if "skipped" in r else same
        out.append([
            LABELS[mode], _s(r.get("import_s")), _s(r.get("ready_wall_s")), _s(r.get("model_load_s")),
            _s(r.get("compile_s")), _graphs(mode, r), _s(r.get("init_engine_s")), _s(r.get("first_request_s"), 3),
            same,
        ])  # fmt: skip
    return out


def load_phases(r: dict[str, Any]) -> list[tuple[str, float]]:
    """LOAD's start-up as (step, seconds from the process's start) in order: the engine process's start, the
    plugin's phase ends (each a vLLM start-up phase), ready, first answer."""
    plugin = r.get("plugin") or {}
    started = r.get("started_at") or 0.0
    first: list[tuple[str, Any]] = [("imports (torch, vllm)", r.get("import_s"))]
    core = plugin.get("process_started_at")
    if core is not None:
        first.append(("engine core process started", core - started))
    worker = (plugin.get("timings") or {}).get("init_device_started_at")
    if worker is not None:
        first.append(("its imports done: the worker starts", worker - started))
    names = {
        "init_device": "CUDA context, NCCL, region, kernel images",
        "load_model": "weights (graphs start building)",
        "kv_cache": "KV cache",
        "capture": "graphs installed (Foundry)",
    }
    return phase_steps(r, first, names)


CAPTURE_ROUNDING_S = 0.5  # vLLM's capture seconds, as its log rounds them

STARTUP_HEADER = ["run", "import s", "ready s", "weights s", "torch.compile s", "graphs s", "init engine s",
                  "1st request s", "tokens, logprobs identical"]  # fmt: skip


def render(doc: dict[str, Any]) -> str:
    cfg = doc["config"]
    first: dict[str, Any] = next((r for r in doc["results"].values() if "vllm" in r), doc.get("machine") or {})
    api = "LLM()" if cfg["api"] == "llm" else "vllm serve"
    lines = [
        f"vLLM {first.get('vllm', '0.26')} {api}, {cfg['shape']} (dummy weights), runner {cfg['runner']}, cudagraph "
        f"mode {cfg['cudagraph_mode']}, {first.get('gpu', '')}; greedy, {cfg['max_tokens']} tokens at batch sizes "
        f"({', '.join(map(str, cfg['batches']))})",
        *([f"compilation config (every run): {cfg['compilation']}"] if cfg.get("compilation") else []),
        *([f"kernel config (every run): {cfg['kernel']}"] if cfg.get("kernel") else []),
        *native_env_lines(cfg),
        *(
            [
                "each compared batch held until all its prompts were queued, so that it starts in one step in every "
                "run (vLLM's /pause and /resume)"
            ]
            if cfg.get("batches_held")
            else []
        ),
        "",
        table(STARTUP_HEADER, startup_rows(doc)),
        *wrap(
            "ready: process start to LLM() returned (or to /health answering 200); graphs: capture (+ Foundry's "
            "save) or LOAD's own seconds (kernel images, graph builds started and waited for; not the CUDA context, "
            "vLLM's own, which LOAD makes first); init engine: vLLM's "
            "'init engine' line; 1st request: a batch-1 request of 16 tokens right after ready."
        ),
    ]
    lines += step_lines(doc)
    load = doc["results"].get("load")
    if load:
        lines += step_table(load_phases(load), "LOAD's start-up, seconds from process start:")
        own = table(["step", "s"], foundry_rows(load, "vLLM"))
        lines += ["", "Foundry's own seconds in LOAD, on vLLM's thread:", own]
    lines += start_lines(doc, LABELS, STARTS_FIGURES)
    lines += target_lines(doc)
    lines += restore_lines(doc, "init_engine_s", "init engine")
    lines += arrival_lines(doc)
    lines += parity_lines(doc)
    lines += fresh_lines(doc["results"], LABELS)
    lines += written_lines(doc["results"], LABELS)
    lines += memory_profile_lines(doc, LABELS)
    lines += answer_group_lines(doc["results"], LABELS)
    lines += choice_lines(doc["results"])
    lines += repeat_lines(doc["results"], LABELS)
    lines += stack_lines(doc["results"], LABELS)
    lines += digest_lines(doc["results"], reference_run(doc["results"]), LABELS)
    return "\n".join(lines) + "\n"


def choice_lines(results: dict[str, Any]) -> list[str]:
    """Inductor's kernel choices by timing (foundry/integration/shared/autotune.py): how many SAVE recorded, and for
    each LOAD how many took SAVE's and which timed their own (their eager steps may differ from SAVE's)."""
    out = []
    for mode, r in results.items():
        plugin = r.get("plugin") or {}
        got = plugin.get("kernel_choices")
        declined = got.get("cache_reads_declined") if isinstance(got, dict) else plugin.get("cache_reads_declined")
        # Inductor's cached choices (.best_config) the process did not take: it timed, or took SAVE's, instead
        cached = f"; {declined} cached choices not read" if isinstance(declined, int) else ""
        late = plugin.get("kernel_choices_after_save")
        # chosen while serving, after the archive was written: not in it, so LOAD times its own there
        after = f"; {late} more after the archive was written, not in it" if isinstance(late, int) and late else ""
        if isinstance(got, int):
            out.append(
                f"- {LABELS.get(mode, mode)}: {got} kernels chose by timing; their choices recorded{after}{cached}"
            )
        elif isinstance(got, dict):
            timed = got.get("timed_count", 0) + got.get("unmatched_count", 0)
            names = ", ".join([*got.get("timed", []), *got.get("unmatched", [])])
            out.append(
                f"- {LABELS.get(mode, mode)}: {got.get('replayed', 0)} kernels took SAVE's configuration untimed; "
                f"{timed} timed their own{f' ({names})' if names else ''}{cached}"
            )
        missing = plugin.get("autotuner_missing")
        if missing:
            out.append(f"  this torch's autotuner lacks {', '.join(missing)}: its kernels chose as natively")
    head = "Inductor's kernel choices by timing in each process's whole life (SAVE records them, LOAD takes SAVE's):"
    return ["", head, *out] if out else []


def target_lines(doc: dict[str, Any]) -> list[str]:
    """The start-up targets (serving/report.py's ``start_up_checks``) on vLLM's "init engine", judged where the
    runs hold their figures."""
    native, load = start_figures(doc, "native"), start_figures(doc, "load")  # medians where --starts asked for more
    # vLLM logs its capture in whole seconds ("Graph capturing finished in %.0f secs"): the bound is known to 0.5 s,
    # unless the run timed it to the millisecond (stacksite/foundry_capture_timer.py, in the native runs).
    exact = native.get("capture_exact_s")
    if isinstance(exact, int | float):
        checks = start_up_checks(native, load, "init_engine_s", exact, 0.0)
    else:
        checks = start_up_checks(native, load, "init_engine_s", native.get("capture_s"), CAPTURE_ROUNDING_S)
    starts = starts_of(native, load)
    lines = start_up_check_lines(checks, "init engine", starts)
    return ["", "Targets:", *lines] if lines else []


def segments(mode: str, r: dict[str, Any]) -> list[tuple[str, float]]:
    """A run's time to ready in parts, from vLLM's log and the plugin's report: imports and process start-up
    (and the server's own work after the engine), the weights, Foundry's steps before vLLM's "init engine",
    then within it torch.compile, the CUDA graphs (captured, or Foundry's restore) and the rest."""
    total = r.get("ready_wall_s")
    init = r.get("init_engine_s")
    if not isinstance(total, int | float) or not isinstance(init, int | float):
        return [("start-up", total)] if isinstance(total, int | float) else []
    weights = r.get("model_load_s") or 0.0
    compile_s = r.get("compile_s") or 0.0
    timings = (r.get("plugin") or {}).get("timings") or {}
    # vLLM's "init engine" covers profiling, the KV cache and warm-up with capture; loading the weights, and
    # LOAD's first two steps (kernel images at init_device, graph builds started after the weights), precede it.
    before = sum(float(timings.get(k, 0.0)) for k in ("load_modules_s", "start_graph_builds_s"))
    if mode in LOADS:
        graphs = float(timings.get("graphs_ready_s", 0.0))
    else:
        capture = r.get("capture_exact_s") or r.get("capture_s") or 0.0
        graphs = float(timings.get("capture_s", capture)) + float(timings.get("save_s", 0.0))
    return [
        ("imports, processes, server", max(0.0, total - init - weights - before)),
        ("weights", weights),
        ("Foundry: images, builds started", before),
        ("torch.compile", compile_s),
        ("CUDA graphs: capture (+ SAVE) or Foundry LOAD", graphs),
        ("rest of vLLM's init engine", max(0.0, init - compile_s - graphs)),
    ]


def plot(doc: dict[str, Any], path: Path) -> bool:
    return plot_startup(doc, path, LABELS, segments, "LLM()" if doc["config"]["api"] == "llm" else "/health")


def write_report(doc: dict[str, Any], out: Path) -> str:
    """OUT.json, OUT.txt and OUT.png; returns the text (also printed)."""
    return write_files(doc, out, render, plot)


if __name__ == "__main__":
    render_again(sys.argv[1:], write_report)
