"""The vLLM benchmark's document as tables and a plot: start-up per run, LOAD's start-up by phase, and
decode/prefill parity. ``write_report(doc, OUT)`` writes OUT.json, OUT.txt (also printed) and OUT.png (where
matplotlib is installed); ``python -m foundry.bench.vllm.report OUT.json`` renders a committed document again.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from foundry.tables import table

__all__ = ["load_phases", "render", "write_report"]

RUNS = ("native_cold", "save", "native", "load")
LABELS = {"native_cold": "native, cold caches", "save": "Foundry SAVE", "native": "native, warm caches",
          "load": "Foundry LOAD"}  # fmt: skip


def _s(value: Any, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else "-"


def foundry_seconds(r: dict[str, Any]) -> float | None:
    """LOAD: the seconds Foundry's own calls took inside the engine (images, graph builds started, waited for)."""
    timings = (r.get("plugin") or {}).get("timings") or {}
    parts = [timings.get(k) for k in ("load_modules_s", "start_graph_builds_s", "graphs_ready_s")]
    return sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None


def foundry_rows(r: dict[str, Any]) -> list[list[str]]:
    """LOAD: Foundry's own seconds on the engine's thread, step by step. ``graphs ready`` splits into the wait
    for the background builds (the loader's "all replayable" past the moment the engine asked) and the
    per-graph work after it (outputs placed, graphs handed to the engine)."""
    plugin = r.get("plugin") or {}
    t = plugin.get("timings") or {}
    loader = plugin.get("loader") or {}
    rows = [["load_cuda_modules_and_libraries", _s(t.get("load_modules_s"), 3)]]
    rows += [[f"  {k}", _s(t.get(f"load_modules_{k}_s"), 3)] for k in ("checks", "reserve", "warm")]
    rows.append(["start_graph_builds", _s(t.get("start_graph_builds_s"), 3)])
    rows.append(["graphs ready, handed to vLLM", _s(t.get("graphs_ready_s"), 3)])
    marks = (t.get("start_graph_builds_at"), loader.get("all_replayable_s"), t.get("graphs_ready_at"))
    if all(isinstance(x, int | float) for x in (*marks, t.get("graphs_ready_s"))):
        started, replayable, asked = (float(x) for x in marks)  # type: ignore[arg-type]
        waited = min(float(t["graphs_ready_s"]), max(0.0, started + replayable - asked))
        rows.append(["  waited for the builds", _s(waited, 3)])
        rows.append(["  per graph, after", _s(float(t["graphs_ready_s"]) - waited, 3)])
    total = foundry_seconds(r)
    rows.append(["total", _s(total, 3)])
    return [row for row in rows if row[1] != "-" or not row[0].startswith("  ")]


def _graphs(mode: str, r: dict[str, Any]) -> str:
    if mode == "load":
        return _s(foundry_seconds(r))
    timings = (r.get("plugin") or {}).get("timings") or {}
    capture = timings.get("capture_s", r.get("capture_s"))
    save = timings.get("save_s")
    return _s(capture) + (f" + save {_s(save)}" if save is not None else "")


def startup_rows(doc: dict[str, Any]) -> list[list[str]]:
    out = []
    for mode in RUNS:
        r = doc["results"].get(mode)
        if r is None:
            continue
        c = doc["compare"].get(mode, {})
        same = "reference" if mode == "native" else ("yes" if c.get("identical") else "NO")
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
    started = r.get("started_at")
    if started is None:
        return []
    steps: list[tuple[str, Any]] = []
    if r.get("import_s") is not None:
        steps.append(("imports (torch, vllm)", r["import_s"]))
    core = plugin.get("process_started_at")
    if core is not None:
        steps.append(("engine core process started", core - started))
    worker = (plugin.get("timings") or {}).get("init_device_started_at")
    if worker is not None:
        steps.append(("its imports done: the worker starts", worker - started))
    names = {
        "init_device": "CUDA context, NCCL, region, kernel images",
        "load_model": "weights (graphs start building)",
        "kv_cache": "KV cache",
        "capture": "graphs installed (Foundry)",
    }
    for phase in plugin.get("phases", []):
        if phase.get("ended_at") is not None:
            steps.append((names.get(phase["name"], phase["name"]), phase["ended_at"] - started))
    steps.append(("ready (LLM() returned, or /health)", r.get("ready_wall_s")))
    steps.append(("first request answered", r.get("first_answer_wall_s")))
    return [(name, t) for name, t in steps if isinstance(t, int | float)]


def _pct(d: dict[str, Any], key: str) -> str:
    return f"{d[key] * 100:.2f}%" if isinstance(d.get(key), int | float) else "-"


def _parity_row(what: str, m: dict[str, Any], digits: int) -> list[str]:
    med, spread, iqr = m["median"], m["spread"], m.get("iqr", {})
    return [
        what,
        _s(med.get("native"), digits),
        _s(med.get("load"), digits),
        _s(m.get("load_over_native"), 4),
        _s(m.get("paired_ratio_median"), 4),
        f"{_pct(spread, 'native')} / {_pct(spread, 'load')}",
        f"{_pct(iqr, 'native')} / {_pct(iqr, 'load')}",
    ]


def parity_rows(doc: dict[str, Any]) -> list[list[str]]:
    measured = doc.get("measured") or {}
    out = [_parity_row(f"decode tokens/s, batch {b}", m, 1) for b, m in (measured.get("decode") or {}).items()]
    pre = measured.get("prefill")
    if pre:
        out.append(_parity_row(f"prefill, {pre['tokens']} tokens (s)", pre, 4))
    return out


PARITY_HEADER = ["what", "native", "LOAD", "LOAD/native", "paired ratio", "range native / LOAD",
                 "IQR native / LOAD"]  # fmt: skip


STARTUP_HEADER = ["run", "import s", "ready s", "weights s", "torch.compile s", "graphs s", "init engine s",
                  "1st request s", "tokens identical"]  # fmt: skip


def render(doc: dict[str, Any]) -> str:
    cfg = doc["config"]
    first: dict[str, Any] = next((r for r in doc["results"].values() if "vllm" in r), doc.get("machine") or {})
    api = "LLM()" if cfg["api"] == "llm" else "vllm serve"
    lines = [
        f"vLLM {first.get('vllm', '0.26')} {api}, {cfg['shape']} (dummy weights), runner {cfg['runner']}, cudagraph "
        f"mode {cfg['cudagraph_mode']}, {first.get('gpu', '')}; greedy, {cfg['max_tokens']} tokens at batch sizes "
        f"{cfg['batches']}",
        "",
        table(STARTUP_HEADER, startup_rows(doc)),
        *textwrap.wrap(
            "ready: process start to LLM() returned (or to /health answering 200); graphs: capture (+ Foundry's "
            "save) or LOAD's own seconds (kernel images, graph builds started and waited for); init engine: vLLM's "
            "'init engine' line; 1st request: a batch-1 request of 16 tokens right after ready.",
            110,
        ),
    ]
    load = doc["results"].get("load")
    if load:
        steps = load_phases(load)
        if steps:
            rows, last = [], 0.0
            for name, t in steps:
                rows.append([name, _s(t), _s(t - last)])
                last = t
            lines += ["", "LOAD's start-up, seconds from process start:", table(["step", "at", "took"], rows)]
        lines += ["", "Foundry's own seconds in LOAD, on vLLM's thread:", table(["step", "s"], foundry_rows(load))]
    parity = parity_rows(doc)
    if parity:
        lines += ["", f"Steady state, native (warm) and LOAD up together, asked in turn, median of {cfg['reps']}:",
                  table(PARITY_HEADER, parity),
                  *textwrap.wrap("range: (max - min) / median of the repetitions; IQR: the interquartile range "
                                 "/ median; paired ratio: the median of LOAD / native over repetitions run back "
                                 "to back.", 110)]  # fmt: skip
    if (doc.get("measured") or {}).get("error"):
        lines += ["", "parity not measured: " + doc["measured"]["error"][:300]]
    return "\n".join(lines) + "\n"


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
    if mode == "load":
        graphs = float(timings.get("graphs_ready_s", 0.0))
    else:
        graphs = float(timings.get("capture_s", r.get("capture_s") or 0.0)) + float(timings.get("save_s", 0.0))
    return [
        ("imports, processes, server", max(0.0, total - init - weights - before)),
        ("weights", weights),
        ("Foundry: images, builds started", before),
        ("torch.compile", compile_s),
        ("CUDA graphs: capture (+ SAVE) or Foundry LOAD", graphs),
        ("rest of vLLM's init engine", max(0.0, init - compile_s - graphs)),
    ]


def plot(doc: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    runs = [m for m in RUNS if m in doc["results"] and segments(m, doc["results"][m])]
    if not runs:
        return False
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.55 * len(runs)))
    seen: set[str] = set()
    for i, mode in enumerate(runs):
        r = doc["results"][mode]
        left = 0.0
        for j, (label, seconds) in enumerate(segments(mode, r)):
            ax.barh(i, seconds, left=left, color=f"C{j}", label=None if label in seen else label)
            seen.add(label)
            left += seconds
        if r.get("first_answer_wall_s"):
            ax.plot([r["first_answer_wall_s"]], [i], "k|", markersize=14)
        ax.text(left + 0.5, i, f"{left:.1f} s", va="center")
    ax.set_yticks(range(len(runs)), [LABELS[m] for m in runs])
    ax.invert_yaxis()
    cfg = doc["config"]
    ax.set_xlabel(f"seconds from process start to ready ({'LLM()' if cfg['api'] == 'llm' else '/health'}), "
                  f"{cfg['shape']}")  # fmt: skip
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3, fontsize=8)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return True


def write_report(doc: dict[str, Any], out: Path) -> str:
    """OUT.json, OUT.txt and OUT.png; returns the text (also printed)."""

    def named(suffix: str) -> Path:  # the tag holds dots ("qwen3-0.6b"): no with_suffix
        return out.parent / (out.name + suffix)

    named(".json").write_text(json.dumps(doc, indent=1) + "\n")
    text = render(doc)
    named(".txt").write_text(text)
    plot(doc, named(".png"))
    print(text, end="", flush=True)
    return text


if __name__ == "__main__":
    source = Path(sys.argv[1])
    write_report(json.loads(source.read_text()), source.parent / source.name.removesuffix(".json"))
