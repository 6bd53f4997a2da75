"""The serving benchmarks' report, engine-neutral parts: number formats, the steady-state parity table, a
run's start-up as a table of steps, the start-up plot (one bar per run, in parts) and the files written.
Each engine's report.py says what its columns and parts are."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from foundry.probe import table

from .compare import answer_groups
from .failures import cause_line

__all__ = [
    "LABELS",
    "LOADS",
    "answer_group_lines",
    "fmt",
    "foundry_rows",
    "foundry_seconds",
    "native_env_lines",
    "number",
    "parity_lines",
    "phase_steps",
    "plot_startup",
    "render_again",
    "repeat_lines",
    "sameness",
    "slower_steps_line",
    "start_up_check_lines",
    "start_up_checks",
    "step_table",
    "wrap",
    "write_files",
]

LOADS = ("load", "load_fresh", "load_replica", "load_again")  # under LOAD: warm, fresh node, next GPUs, again
# Each run's name in the tables and the plot, in the order the benchmark runs them.
LABELS = {"native_cold": "native, cold caches", "save": "Foundry SAVE", "native": "native, warm caches",
          "load": "Foundry LOAD", "native_fresh": "native, fresh node (empty caches)",
          "load_fresh": "Foundry LOAD, fresh node (the archive's caches)",
          "load_replica": "Foundry LOAD, a replica on the next GPUs",
          "load_again": "Foundry LOAD, another process"}  # fmt: skip

Segments = Callable[[str, dict[str, Any]], list[tuple[str, float]]]

PARITY_HEADER = ["what", "native", "LOAD", "LOAD/native", "paired ratio", "range native / LOAD",
                 "IQR native / LOAD"]  # fmt: skip


def fmt(value: Any, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else "-"


def sameness(mode: str, c: dict[str, Any], r: dict[str, Any] | None = None) -> str:
    """A run's "tokens, logprobs identical" cell from its comparison (compare.compare_runs) and, where given, its
    result ``r``: a native run that answered nothing is no reference, and a run with nothing to compare with is
    said to be so, not "NO"."""
    if r is not None and "tokens" not in r and "skipped" not in r and not c.get("reference"):
        rc = f"rc {r['rc']}, " if isinstance(r.get("rc"), int) else ""
        why = rc + cause_line(r.get("error", "no tokens"))
        return f"no answers, no reference: {why}" if mode == "native" else f"NO, no answers: {why}"
    if mode == "native" or c.get("reference"):
        return "reference"
    if "why" in c and c.get("identical") is False and "tokens" in (r or {}):
        return f"not compared: {c['why']}"
    if c.get("identical"):
        same = "yes"
    elif c.get("tokens_identical"):
        requests = c["logprobs"].get("requests", [])
        worst = max((p.get("max_abs_diff") or 0.0 for p in requests), default=0.0)
        where = [p["first_position"] for p in requests if p.get("first_position") is not None]
        since = f", from token {min(where)}" if where else ""
        same = f"NO: tokens yes, logprobs differ (max {worst:.3g}{since})"
    else:
        same = "NO"
    if "same_as_load" in c:
        same += ", the same as LOAD's" if c["same_as_load"] else ", not the same as LOAD's"
    return same + (f" (vs {c['against']})" if c.get("against", "native") != "native" else "")


def repeat_lines(results: dict[str, dict[str, Any]], labels: dict[str, str]) -> list[str]:
    """The report's lines on each run's second answer to the same batches (``--repeat``): per batch, the
    sequences whose tokens and log-probabilities both came out as the first time."""
    lines = []
    for mode, r in results.items():
        again = r.get("repeat")
        if isinstance(again, list) and again:
            cells = [
                f"batch {b['batch']} {b['identical']}/{b['of']}"
                + (f" (tokens {b['tokens']}/{b['of']})" if b["tokens"] != b["identical"] else "")
                for b in again
            ]
            lines.append(f"- {labels.get(mode, mode)}: {', '.join(cells)}")
    title = "Each run asked the same batches again, in the same process (identical to its own first answer):"
    return ["", title, *lines] if lines else []


def answer_group_lines(results: dict[str, dict[str, Any]], labels: dict[str, str]) -> list[str]:
    """One line naming the groups of runs that answered bit for bit alike (compare.answer_groups), where there are
    three runs or more and not all of them agree: it shows which process is the odd one."""
    groups = answer_groups(results)
    if sum(len(g) for g in groups) < 3 or len(groups) < 2:
        return []
    named = " ".join("{" + ", ".join(labels.get(m, m) for m in g) + "}" for g in groups)
    return ["", f"Runs that answered alike, every token and log-probability at every batch: {named}"]


def foundry_seconds(r: dict[str, Any]) -> float | None:
    """LOAD: the seconds Foundry's own calls took inside the engine (images, graph builds started, waited for),
    less the CUDA context ``load_cuda_modules_and_libraries`` creates first: that is the engine's own cost (it
    creates the context in the same process natively, and finds it made under LOAD), paid a little earlier."""
    timings = (r.get("plugin") or {}).get("timings") or {}
    parts = [timings.get(k) for k in ("load_modules_s", "start_graph_builds_s", "graphs_ready_s")]
    if not any(p is not None for p in parts):
        return None
    context = timings.get("load_modules_context_s")
    return sum(p for p in parts if p is not None) - (context if isinstance(context, int | float) else 0.0)


def foundry_rows(r: dict[str, Any], engine: str) -> list[list[str]]:
    """LOAD: Foundry's own seconds on the engine's thread, step by step. ``graphs ready`` splits into the wait
    for the background builds (the loader's "all replayable" past the moment the engine asked) and the
    per-graph work after it (outputs placed, graphs handed to the engine)."""
    plugin = r.get("plugin") or {}
    t = plugin.get("timings") or {}
    loader = plugin.get("loader") or {}
    rows = [["load_cuda_modules_and_libraries", fmt(t.get("load_modules_s"), 3)]]
    steps = [k[len("load_modules_") : -len("_s")] for k in t if k.startswith("load_modules_") and k != "load_modules_s"]
    rows += [[f"  {k}" + (f" ({engine}'s own: not in the total)" if k == "context" else ""),
              fmt(t[f"load_modules_{k}_s"], 3)] for k in steps]  # fmt: skip
    rows.append(["start_graph_builds", fmt(t.get("start_graph_builds_s"), 3)])
    # Start-up's background reading of the graph files, taken over here: what waiting for it and reading the
    # graphs it had not reached cost on the engine's thread.
    rows.append(["  waited for start-up", fmt(loader.get("startup_wait_s"), 3)])
    here, ahead = loader.get("graphs_read_here"), loader.get("graphs_read_ahead")
    if isinstance(here, int) and isinstance(ahead, int):
        rows.append([f"  read graphs start-up had not ({here} of {here + ahead})", fmt(loader.get("read_s"), 3)])
    rows.append([f"graphs ready, handed to {engine}", fmt(t.get("graphs_ready_s"), 3)])
    marks = (t.get("start_graph_builds_at"), loader.get("all_replayable_s"), t.get("graphs_ready_at"))
    if all(isinstance(x, int | float) for x in (*marks, t.get("graphs_ready_s"))):
        started, replayable, asked = (float(x) for x in marks)  # type: ignore[arg-type]
        waited = min(float(t["graphs_ready_s"]), max(0.0, started + replayable - asked))
        rows.append(["  waited for the builds", fmt(waited, 3)])
        rows.append(["  per graph, after", fmt(float(t["graphs_ready_s"]) - waited, 3)])
    # Where the per-graph work goes: finish_one_graph_load (the wait above included: the graph wrapped and its
    # output tensors made), then the engine's install of them all.
    rows.append(["  in finish_one_graph_load, wait included", fmt(t.get("graphs_ready_finish_s"), 3)])
    rows.append([f"  installed into {engine}", fmt(t.get("graphs_ready_install_s"), 3)])
    rows.append(["total", fmt(foundry_seconds(r), 3)])
    # In the background, after the hand-over (the report written again once they are built): until a member
    # has its own exec it replays on its group's shared exec, correct but slower.
    if t.get("own_execs_error"):
        rows.append(["own execs NOT all built", str(t["own_execs_error"])[:60]])
    elif isinstance(loader.get("all_dedicated_s"), int | float):
        rows.append(["own execs all built, s after start_graph_builds", fmt(loader["all_dedicated_s"], 3)])
        rows.append(["  switches of shared execs before", str(loader.get("switches", "-"))])
    return [row for row in rows if row[1] != "-" or not row[0].startswith("  ")]


def phase_steps(r: dict[str, Any], first: list[tuple[str, Any]], names: dict[str, str]) -> list[tuple[str, float]]:
    """A Foundry run's start-up as (step, seconds from the process's start) in order: ``first`` (steps the
    engine's report says were before the plugin's phases), the plugin's phase ends (named by ``names``),
    ready, first answer."""
    started = r.get("started_at")
    if started is None:
        return []
    steps = list(first)
    for phase in (r.get("plugin") or {}).get("phases", []):
        if phase.get("ended_at") is not None:
            steps.append((names.get(phase["name"], phase["name"]), phase["ended_at"] - started))
    steps.append(("ready (the engine built, or /health)", r.get("ready_wall_s")))
    steps.append(("first request answered", r.get("first_answer_wall_s")))
    return [(name, t) for name, t in steps if isinstance(t, int | float)]


FIRST_REQUEST_RATIO = 1.1  # the first request after LOAD, at most this much native warm's


def number(value: Any) -> float | None:
    """``value`` as a float where it is a number (not a bool), else None: a figure a run may lack."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def start_up_checks(
    native: dict[str, Any], load: dict[str, Any], init_key: str, capture_s: Any, capture_rounding_s: float = 0.0
) -> dict[str, Any]:
    """The start-up targets both engines' reports judge: LOAD's init (``init_key``: vLLM's "init engine",
    SGLang's ``Engine()``) at most native warm's less native's capture (``capture_s``), since LOAD replaces the
    capture and must add nothing else; and the first request after LOAD at most 1.1x native warm's. A check
    whose figures a run lacks is None (not measured), never guessed. ``capture_rounding_s``: how far the capture's
    figure may be from the real one (vLLM logs it in whole seconds: 0.5); a LOAD within that of the bound is
    judged neither way ("undecided")."""
    native_init, load_init, capture = number(native.get(init_key)), number(load.get(init_key)), number(capture_s)
    bound = native_init - capture if native_init is not None and capture is not None else None
    met: bool | str | None = None if bound is None or load_init is None else load_init <= bound
    if met is not None and bound is not None and load_init is not None and abs(load_init - bound) < capture_rounding_s:
        met = "undecided"
    native_first, load_first = number(native.get("first_request_s")), number(load.get("first_request_s"))
    ratio = load_first / native_first if load_first is not None and native_first else None
    return {
        "startup_less_capture": {
            "native_s": native_init,
            "native_capture_s": capture,
            "bound_s": bound,
            "load_s": load_init,
            "capture_rounding_s": capture_rounding_s,
            "met": met,
        },
        "first_request": {
            "native_s": native_first,
            "load_s": load_first,
            "ratio": ratio,
            "target": FIRST_REQUEST_RATIO,
            "met": None if ratio is None else ratio <= FIRST_REQUEST_RATIO,
        },
    }


def start_up_check_lines(checks: dict[str, Any], what: str, starts: int = 1) -> list[str]:
    """``start_up_checks``' verdicts as report lines (``what``: the init's name; ``starts``: of how many starts of
    each side the figures are medians); those not measured left out."""
    lines = []
    each = f" (medians of {starts} starts each)" if starts > 1 else ""
    b = checks.get("startup_less_capture") or {}
    if b.get("met") is not None:
        rounding = b.get("capture_rounding_s") or 0
        verdict = {True: "met", False: "NOT met"}.get(b["met"], "undecided")
        if b["met"] == "undecided":
            verdict += f": within the {rounding:g} s the capture's figure is rounded by"
        lines.append(
            f"- {what} under LOAD <= native warm's less its capture{each}: {fmt(b['load_s'])} s against "
            f"{fmt(b['native_s'])} - {fmt(b['native_capture_s'])}{f' (+-{rounding:g})' if rounding else ''} = "
            f"{fmt(b['bound_s'])} s: {verdict}"
        )
    f = checks.get("first_request") or {}
    if f.get("met") is not None:
        lines.append(
            f"- first request after LOAD <= {f['target']}x native warm's{each}: {fmt(f['load_s'], 3)} s / "
            f"{fmt(f['native_s'], 3)} s = {fmt(f['ratio'], 2)}: {'met' if f['met'] else 'NOT met'}"
        )
    return lines


def slower_steps_line(diffs: Sequence[tuple[str, float | None]]) -> str:
    """The per-step verdict both engines' reports end their step tables with: the steps where LOAD took longer
    than native warm (``diffs``: step, LOAD less native in seconds, None where either lacks it), to the
    millisecond the engines log."""
    longer = [f"{name} {diff:+.2f} s" for name, diff in diffs if diff is not None and round(diff, 3) > 0]
    return f"- LOAD took longer than native warm at: {'; '.join(longer)}" if longer else "- LOAD no slower at any step"


def native_env_lines(cfg: dict[str, Any]) -> list[str]:
    """The environment every run had beyond the benchmark's own (--env, and the numerics switches it inherited),
    and the note a report carries when the native runs were started otherwise than SAVE and LOAD (--native-env)."""
    every = cfg.get("extra_env") or {}
    lines = [f"environment (every run): {', '.join(f'{k}={v}' for k, v in sorted(every.items()))}"] if every else []
    env = cfg.get("native_env") or {}
    if not env:
        return lines
    settings = ", ".join(f"{k}={v}" for k, v in sorted(env.items()))
    return lines + wrap(f"The native runs ran with {settings}, SAVE and LOAD without: a timing control, and a "
                        "reference that runs otherwise than they do.")  # fmt: skip


def wrap(text: str) -> list[str]:
    return textwrap.wrap(text, 110)


def _pct(d: dict[str, Any], key: str) -> str:
    return f"{d[key] * 100:.2f}%" if isinstance(d.get(key), int | float) else "-"


def _parity_row(what: str, m: dict[str, Any], digits: int) -> list[str]:
    med, spread, iqr = m["median"], m["spread"], m.get("iqr", {})
    return [
        what,
        fmt(med.get("native"), digits),
        fmt(med.get("load"), digits),
        fmt(m.get("load_over_native"), 4),
        fmt(m.get("paired_ratio_median"), 4),
        f"{_pct(spread, 'native')} / {_pct(spread, 'load')}",
        f"{_pct(iqr, 'native')} / {_pct(iqr, 'load')}",
    ]


PREFILLS = ("prefill", "short_prefill")  # the steady state's prefill measurements (serving/runs.py)


def parity_rows(measured: dict[str, Any]) -> list[list[str]]:
    out = [_parity_row(f"decode tokens/s, batch {b}", m, 1) for b, m in (measured.get("decode") or {}).items()]
    for key in PREFILLS:
        pre = measured.get(key)
        if pre:
            out.append(_parity_row(f"prefill, {pre['tokens']} tokens (s)", pre, 4))
    return out


def parity_lines(doc: dict[str, Any]) -> list[str]:
    """The steady-state block of the text report (or why it was not measured)."""
    measured = doc.get("measured") or {}
    rows = parity_rows(measured)
    lines: list[str] = []
    if rows:
        reps = sorted({m.get("reps") for m in [*(measured.get("decode") or {}).values(), *map(measured.get, PREFILLS)]
                       if m and m.get("reps") is not None})  # fmt: skip
        done = "/".join(map(str, reps)) if reps else "?"
        lines += ["", f"Steady state, native (warm) and LOAD up together, asked in turn, median of {done} "
                      f"repetitions (of {doc['config']['reps']} asked):",
                  table(PARITY_HEADER, rows),
                  *wrap("range: (max - min) / median of the repetitions; IQR: the interquartile range / median; "
                        "paired ratio: the median of LOAD / native over repetitions run back to back.")]  # fmt: skip
    if measured.get("error"):
        lines += ["", "parity not measured: " + measured["error"][:300]]
    return lines


def step_table(steps: Sequence[tuple[str, float]], title: str) -> list[str]:
    """Steps as (name, seconds from process start): when each ended and how long it took."""
    if not steps:
        return []
    rows, last = [], 0.0
    for name, t in steps:
        rows.append([name, fmt(t), fmt(t - last)])
        last = t
    return ["", title, table(["step", "at", "took"], rows)]


def plot_startup(doc: dict[str, Any], path: Path, labels: dict[str, str], segments: Segments, ready: str) -> bool:
    """One horizontal bar per run (in ``labels``' order) from process start to ``ready``, in the parts
    ``segments`` gives, with a tick at the first answer. False where matplotlib is missing or nothing ran."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    runs = [m for m in labels if m in doc["results"] and segments(m, doc["results"][m])]
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
    ax.set_yticks(range(len(runs)), [labels[m] for m in runs])
    ax.invert_yaxis()
    ax.set_xlabel(f"seconds from process start to ready ({ready}), {doc['config']['shape']}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3, fontsize=8)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return True


def write_files(doc: dict[str, Any], out: Path, render: Callable[[dict[str, Any]], str],
                plot: Callable[[dict[str, Any], Path], bool]) -> str:  # fmt: skip
    """OUT.json, OUT.txt and OUT.png; returns the text (also printed)."""

    def named(suffix: str) -> Path:  # the tag holds dots ("qwen3-0.6b"): no with_suffix
        return out.parent / (out.name + suffix)

    named(".json").write_text(json.dumps(doc, indent=1) + "\n")
    text = render(doc)
    named(".txt").write_text(text)
    plot(doc, named(".png"))
    print(text, end="", flush=True)
    return text


def render_again(argv: list[str], write_report: Callable[[dict[str, Any], Path], str]) -> None:
    """``python -m foundry_bench.<engine>.report OUT.json``: the table and the plot of a committed document."""
    source = Path(argv[0])
    write_report(json.loads(source.read_text()), source.parent / source.name.removesuffix(".json"))
