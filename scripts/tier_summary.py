"""What scripts/gpu_tier.sh (and gpu_setup.sh) print last: the machine's Python and torch, the GPU tier's outcome
and figures, the decoder benchmark's results, and this checkout beside a baseline's, from the JSON they wrote.

    python3 scripts/tier_summary.py machine                 Python, torch and CUDA versions (torch may be missing)
    python3 scripts/tier_summary.py codecs                  exit 1, naming them, without lz4 and zstandard
    python3 scripts/tier_summary.py tier GPU_TIER_JSON      passed / failed, the tests that did not pass, figures
    python3 scripts/tier_summary.py cold COLD_START_JSON    each result's LOAD timings, replay ratios, cold path
    python3 scripts/tier_summary.py compare NEW BASE        two cold-start.json side by side, key by key
    python3 scripts/tier_summary.py rounds DIR              this-R.json against base-R.json of every round R in
                                                            DIR: medians (min-max) and this over the baseline
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path
from typing import Any

# The cold-start figures compared side by side with a baseline run in the same call.
COMPARED = (
    "native_warmup_capture_s", "save_s", "save_over_capture", "load_modules_s", "load_first_s", "load_all_s",
    "speedup", "restore_us_per_node", "first_step_native_s", "first_step_load_s", "replay_ratio_max",
    "replay_ratio_max_template", "bit_identical", "bit_identical_template",
)  # fmt: skip
COLD_PATH = (
    "startup_wait_s", "load_all_s", "modules_and_load_s", "load_us_per_node", "own_execs_s",
    "first_replay_over_native_max", "first_replay_over_native_max_switched",
    "first_replay_over_native_max_unswitched", "second_replay_over_native_max", "first_replay_own_over_native_max",
    "first_replay_own_over_native_median", "second_replay_own_over_native_max", "modules_background_s", "model_s",
)  # fmt: skip
EXTRA = (
    "save_phases_s", "save_phases_beside_capture_s", "save_gc", "save_phase_faults", "build_probe", "driver_probe",
    "process_probe_us", "tensor_at_us",
)  # fmt: skip


def machine() -> list[str]:
    cuda = torch = "not installed"
    if importlib.util.find_spec("torch") is not None:
        import torch as t

        torch, cuda = t.__version__, str(t.version.cuda)
    return [f"python {sys.version.split()[0]} torch {torch} cuda {cuda}"]


def codecs() -> list[str]:
    missing = [name for name in ("lz4", "zstandard") if importlib.util.find_spec(name) is None]
    if not missing:
        return []
    return [
        f"WARNING: python3 lacks {' and '.join(missing)}: install their wheels (pip install lz4 zstandard); SAVE "
        "refuses every graph whose compressed images it cannot read (VariablesUnknownError)"
    ]


def tier(doc: dict[str, Any]) -> list[str]:
    skipped = sum(t["outcome"] == "skipped" for t in doc["tests"])
    # a summary written after some test, the run then killed from outside (tests/gpu/conftest.py)
    cut = "" if doc.get("complete", True) else f"; CUT SHORT after {len(doc['tests'])} tests"
    lines = [f"GPU tier: {doc['passed']} passed, {doc['failed']} failed, {skipped} skipped{cut}"]
    lines += [f"   {t['outcome']} {t['test']}" for t in doc["tests"] if t["outcome"] != "passed"]
    slowest = sorted(doc["tests"], key=lambda t: -t["seconds"])[:5]
    lines.append("  slowest: " + ", ".join(f"{t['test'].split('::')[-1][:60]} {t['seconds']:.0f} s" for t in slowest))
    lines += [f"  {k}: {json.dumps(v)[:400]}" for k, v in doc["figures"].items()]
    return lines


def _num(v: Any, digits: int = 4) -> Any:
    return round(v, digits) if isinstance(v, float) else v


def cold(doc: dict[str, Any]) -> list[str]:
    lines = []
    for r in doc["results"]:
        lines.append(
            f"{r['shape']} {r['variant']} load timings { ({k: round(v, 3) for k, v in r['load_timings'].items()}) }"
        )
        lines.append(
            f"  replay max/median: same process {_num(r['replay_ratio_max'])} {_num(r['replay_ratio_median'])} "
            f"cross process {_num(r['replay_ratio_max_cross_process'])} {_num(r['replay_ratio_median_cross_process'])} "
            f"shared/own max {_num(r['shared_over_own_exec_max'])}"
        )
        c = r.get("cold_path") or {}
        lines.append(f"  cold path { ({k: _num(v) for k, v in c.items() if k in COLD_PATH}) }")
        lines.append(f"  startup phases { ({k: round(v, 4) for k, v in (c.get('startup_phases_s') or {}).items()}) }")
        lines += [f"  {key}: {json.dumps(r[key])[:600]}" for key in EXTRA if r.get(key)]
    return lines


def compare(new: dict[str, Any], base: dict[str, Any]) -> list[str]:
    lines = ["side by side, this checkout vs the baseline, in this call"]
    for a, b in zip(new["results"], base["results"], strict=False):
        lines.append(f"  {a['shape']} {a['variant']}")
        for k in COMPARED:
            x, y = a.get(k), b.get(k)
            fx = f"{x:.4f}" if isinstance(x, float) else str(x)
            fy = f"{y:.4f}" if isinstance(y, float) else str(y)
            lines.append(f"    {k:28s} {fx:>12s} {fy:>12s}")
    return lines


def rounds(folder: Path) -> list[str]:
    """Every round's this-R.json against base-R.json: each compared figure's median over the rounds on both
    sides (min-max), and the median's ratio, this checkout over the baseline."""
    sides: dict[str, list[dict[str, Any]]] = {"this": [], "base": []}
    for side in sides:
        paths = sorted(folder.glob(f"{side}-*.json"), key=lambda p: int(p.stem.split("-")[1]))
        sides[side] = [_doc(str(p)) for p in paths]
    count = min(len(sides["this"]), len(sides["base"]))
    lines = [f"rounds: {count} of each checkout, medians (min-max), this checkout over the baseline"]
    if not count:
        return [*lines, "  no round has both reports"]
    for i, first in enumerate(sides["this"][0]["results"]):
        lines.append(f"  {first['shape']} {first['variant']}")
        for k in COMPARED:
            got = {s: [d["results"][i].get(k) for d in docs[:count]] for s, docs in sides.items()}
            if not all(isinstance(v, int | float) and not isinstance(v, bool) for vs in got.values() for v in vs):
                continue
            med = {s: statistics.median(vs) for s, vs in got.items()}
            cells = [f"{med[s]:.4f} ({min(got[s]):.4f}-{max(got[s]):.4f})" for s in ("this", "base")]
            ratio = f"{med['this'] / med['base']:.3f}" if med["base"] else "-"
            lines.append(f"    {k:28s} {cells[0]:>26s} {cells[1]:>26s} {ratio:>7s}")
    return lines


def _doc(path: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(Path(path).read_text())
    return doc


def main(argv: list[str]) -> int:
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    wanted = {"machine": 0, "codecs": 0, "tier": 1, "cold": 1, "compare": 2, "rounds": 1}
    if wanted.get(command) != len(args):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        lines = {
            "machine": lambda: machine(),
            "codecs": lambda: codecs(),
            "tier": lambda: tier(_doc(args[0])),
            "cold": lambda: cold(_doc(args[0])),
            "compare": lambda: compare(_doc(args[0]), _doc(args[1])),
            "rounds": lambda: rounds(Path(args[0])),
        }[command]()
    except OSError as exc:
        print(f"tier_summary {command}: {exc}", file=sys.stderr)
        return 1
    if lines:
        print("\n".join(lines))
    return 1 if command == "codecs" and lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
