"""The vLLM start-up comparison as a table and a plot, from the JSON run_vllm.py writes.

    python3 scripts/vllm/report.py results/vllm-0.6b-h100-54f577a.json [--out results/vllm-0.6b-h100]

Writes OUT.txt (the table, also printed) and, where matplotlib is installed, OUT.png. Every figure comes
from one run_vllm.py call: native, SAVE and LOAD processes on one machine, one after the other.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path
from typing import Any

from foundry.tables import table

MODES = ("native", "save", "load")


def _s(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, int | float) else "-"


def _restore(r: dict[str, Any]) -> float | None:
    """Seconds LOAD spent on graphs: image loading at start plus waiting for the builds."""
    timings = (r.get("plugin") or {}).get("timings") or {}
    parts = [timings.get(k) for k in ("load_modules_s", "start_graph_builds_s", "graphs_ready_s")]
    return sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None


def rows(doc: dict[str, Any]) -> list[list[str]]:
    out = []
    compare = doc.get("compare", {})
    for mode in MODES:
        r = doc["results"].get(mode)
        if r is None:
            continue
        graphs = r.get("capture_s") if mode != "load" else _restore(r)
        identical = "reference" if mode == "native" else ("yes" if compare.get(mode, {}).get("identical") else "NO")
        out.append(
            [
                mode,
                _s(r.get("import_s")),
                _s(r.get("llm_init_s")),
                _s(r.get("model_load_s")),
                _s(r.get("compile_s")),
                _s(graphs),
                _s(r.get("init_engine_s")),
                _s(r.get("process_wall_s")),
                _s(r.get("generate_again_8_s")),
                identical,
            ]
        )
    return out


HEADER = [
    "run",
    "import s",
    "LLM() s",
    "weights s",
    "torch.compile s",
    "graphs s",
    "engine init s",
    "process s",
    "generate bs8 s",
    "tokens identical",
]


def render(doc: dict[str, Any]) -> str:
    first = next(iter(doc["results"].values()))
    lines = [
        f"vLLM {first.get('vllm')} on {first.get('gpu')}, torch {first.get('torch')}, runner {doc.get('runner')}, "
        f"greedy, {doc.get('max_tokens')} tokens at batch sizes {doc.get('batches')}",
        table(HEADER, rows(doc)),
        *textwrap.wrap(
            "graphs s: capture (native, SAVE: vLLM's log, whole seconds) or LOAD's image loading and the graph "
            "builds it waited for; engine init: vLLM's 'init engine' (profile, KV cache, warm-up, capture); "
            "generate bs8: a second generate of batch 8, after the timed ones.",
            110,
        ),
    ]
    return "\n".join(lines) + "\n"


def plot(doc: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    modes = [m for m in MODES if m in doc["results"]]
    parts = ("import_s", "model_load_s", "compile_s", "graphs", "other")
    labels = ("import", "weights", "torch.compile", "graphs (capture / LOAD)", "rest of LLM()")
    fig, ax = plt.subplots(figsize=(9, 2.8))
    longest = 0.0
    for i, mode in enumerate(modes):
        r = doc["results"][mode]
        graphs = (r.get("capture_s") if mode != "load" else _restore(r)) or 0.0
        known = (r.get("model_load_s") or 0.0) + (r.get("compile_s") or 0.0) + graphs
        values = {
            "import_s": r.get("import_s") or 0.0,
            "model_load_s": r.get("model_load_s") or 0.0,
            "compile_s": r.get("compile_s") or 0.0,
            "graphs": graphs,
            "other": max(0.0, (r.get("llm_init_s") or 0.0) - known),
        }
        left = 0.0
        for j, key in enumerate(parts):
            ax.barh(i, values[key], left=left, color=f"C{j}", label=labels[j] if i == 0 else None)
            left += values[key]
        ax.text(left + 0.5, i, f"{left:.1f} s", va="center")
        longest = max(longest, left)
    ax.set_xlim(0, longest * 1.12)
    ax.set_yticks(range(len(modes)), modes)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from process start to LLM() ready")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", type=Path)
    parser.add_argument("--out", type=Path, help="path without suffix (default: beside the JSON)")
    args = parser.parse_args()
    doc = json.loads(args.json.read_text())
    out = str(args.out or args.json.with_name(args.json.name.removesuffix(".json")))
    text = render(doc)
    Path(out + ".txt").write_text(text)
    print(text, end="")
    if plot(doc, Path(out + ".png")):
        print(f"plot: {out}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
