"""One configuration of a serving benchmark run to its end (runs.py says what runs and in which order): the
document written after every run, the engines stopped whatever happens, then the report."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .marks import archive_problem
from .runs import BenchRuns
from .shapes import SHAPES

__all__ = ["run_bench"]


def run_bench(runs: BenchRuns, write_report: Callable[[dict[str, Any], Path], str]) -> dict[str, Any]:
    """Runs the configuration and writes ``OUT/<tag>.json`` after every run (so a run stopped from outside
    leaves what it had), then the table and the plot; returns the document.

    The engines run in process groups of their own (so that stopping one ends its other processes); a
    SIGTERM to the benchmark stops every engine it started, and the report is written, before it exits."""
    cfg = runs.cfg
    if cfg.shape not in SHAPES:
        raise ValueError(f"unknown shape {cfg.shape!r}; choose from {sorted(SHAPES)}")
    if problem := archive_problem(cfg):
        raise ValueError(problem)
    cfg.out.mkdir(parents=True, exist_ok=True)
    base = cfg.out / cfg.tag()
    json_path = base.parent / (base.name + ".json")  # the tag holds dots ("qwen3-0.6b"): no with_suffix

    def write(doc: dict[str, Any]) -> None:
        json_path.write_text(json.dumps(doc, indent=1) + "\n")

    runs.write = write

    def terminated(signum: int, frame: Any) -> None:
        raise SystemExit(f"foundry bench: signal {signum}; stopping the engines")

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        runs.run()
    except SystemExit as exc:
        runs.measured.setdefault("error", str(exc))
        for result in runs.results.values():
            if not {"tokens", "skipped", "error"} & set(result):
                result["error"] = f"{exc} before this run answered"
    finally:
        for engine in runs.started:
            engine.stop()
        runs.fresh.clear()  # fresh runs a stop cut short
        signal.signal(signal.SIGTERM, previous)
    doc = runs.document()
    write_report(doc, base)
    return doc
