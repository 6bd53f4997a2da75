"""Start-up figures from several starts of the warm native and LOAD runs (``--starts N``).

A process's start-up varies by seconds from one process to the next: imports, the page cache, the GPU's clocks,
Triton's first compile of a kernel (one H200, 63f2524: SGLang's ``Engine()`` took 24.55 s and 34.02 s in two
native warm processes of one shape, minutes apart). A start-up target judged on one start of each side is then as
much the machine's as LOAD's. With N above 1 the benchmark starts warm native and LOAD N-1 more times each,
alternately and one process at a time, before the pair it compares; each of those answers its first request
and stops. The start-up targets are then judged on the medians over all N starts of each side, and the report
lists every start.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

from foundry.probe import table

from .failures import clipped
from .process import EngineError
from .report import number

if TYPE_CHECKING:
    from .runs import BenchRuns

__all__ = ["MORE_STARTS", "more_starts", "round_need", "start_figures", "start_lines", "starts_of"]

MORE_STARTS = "more_starts"  # the document's key: each side's starts before the compared pair, by mode
SIDES = ("native", "load")


def more_starts(runs: BenchRuns) -> None:
    """Starts warm native and LOAD ``starts - 1`` more times each, one process at a time, LOAD first in odd
    rounds, so that neither side always follows the other; each answers its first request and stops. Rounds that
    would leave the compared pair too little of the budget are skipped, and the document says so."""
    cfg = runs.cfg
    if cfg.starts < 2:
        return
    if not set(SIDES) <= set(cfg.modes):
        runs.say(f"--starts {cfg.starts}: ignored, it repeats warm native and LOAD, and the modes lack one of them")
        return
    found: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    runs.extra[MORE_STARTS] = found
    declared = sum(runs.needs.get(side, 0.0) for side in SIDES)  # a round's seconds, as the engine declares them
    last_round = 0.0
    for index in range(1, cfg.starts):
        order = ("load", "native") if index % 2 else SIDES
        need = round_need(declared, last_round, runs.steady_needs)
        if runs.room() < need:
            why = f"{max(runs.left(), 0):.0f} s of the budget left, a round and the compared pair need ~{need:.0f} s"
            runs.say(f"starts {index + 1} to {cfg.starts}: skipped ({why})")
            runs.extra[MORE_STARTS + "_skipped"] = why
            break
        began = time.perf_counter()
        for side in order:
            found[side].append(_one_start(runs, side, index))
            runs.write(runs.document())
        last_round = time.perf_counter() - began


def round_need(declared: float, last_round: float, steady: float) -> float:
    """Seconds one more round of starts needs, the compared pair after it included: two rounds' worth (the pair
    starts the same two processes and asks them more), each the larger of what the engine declares its runs need
    and what the last round took (an engine that declares nothing is held to what it took), and the steady-state
    phase's."""
    return 2 * max(declared, last_round) + steady


def _one_start(runs: BenchRuns, mode: str, index: int) -> dict[str, Any]:
    """One start of ``mode`` for its start-up figures alone: ready, the first request, stopped; its own log."""
    runs.say(f"{mode}: start {index + 1} of {runs.cfg.starts}, for the start-up figures")
    engine = runs.start_run(mode, log_name=f"{mode}-start{index + 1}.log", record=False)
    sample: dict[str, Any] = {"start": index + 1}
    try:
        sample.update(engine.ready(runs.ready_s()))
        sample["first_request_s"] = runs.first_request(engine)
    except EngineError as exc:
        sample["error"] = clipped(str(exc), 2000)
        runs.say(f"{mode}: start {index + 1} FAILED {sample['error'][-500:]}")
    sample["rc"] = engine.stop()
    runs.warm.finish(mode)  # its window on the machine's caches closes here, not at the compared run's end
    sample.update(runs.logged(engine.log_path.read_text(errors="replace")))
    return sample


def start_figures(doc: dict[str, Any], mode: str) -> dict[str, Any]:
    """``mode``'s result with each start-up figure its other starts also hold replaced by the median over all of
    them (``starts``: how many), or the result alone where it had no other start. A start that failed counts for
    nothing; the compared run's own figures count whenever it has them."""
    result = doc["results"].get(mode) or {}
    others = [s for s in ((doc.get(MORE_STARTS) or {}).get(mode) or []) if "error" not in s]
    if not others:
        return result
    samples = [s for s in (result, *others) if "error" not in s]
    out = dict(result)
    keys = {k for s in others for k, v in s.items() if number(v) is not None and k not in ("start", "rc")}
    for key in sorted(keys):
        values = [v for v in (number(s.get(key)) for s in samples) if v is not None]
        if values:
            out[key] = statistics.median(values)
    out["starts"] = len(samples)
    return out


def starts_of(native: dict[str, Any], load: dict[str, Any]) -> int:
    """Of how many starts of each side ``start_figures``' medians are (1: the compared runs alone)."""
    return min(native.get("starts", 1), load.get("starts", 1))


def start_lines(doc: dict[str, Any], labels: dict[str, str], figures: list[tuple[str, str]]) -> list[str]:
    """Every start of warm native and LOAD, a row each (the compared run last), ``figures`` (key, column) of each,
    under a title; nothing without other starts."""
    more = doc.get(MORE_STARTS) or {}
    if not any(more.get(side) for side in SIDES):
        return []
    rows = []
    for side in SIDES:
        compared = {**(doc["results"].get(side) or {}), "start": "compared"}
        for s in [*(more.get(side) or []), compared]:
            cells = ["-" if number(s.get(key)) is None else f"{s[key]:.3f}" for key, _ in figures]
            rows.append([labels.get(side, side), str(s.get("start", "")), *cells, "failed" if "error" in s else ""])
    skipped = doc.get(MORE_STARTS + "_skipped")
    return [
        "",
        "Every start of the warm runs, one process at a time, alternately (--starts); the targets take the medians:",
        table(["run", "start", *(column for _, column in figures), ""], rows),
        *([f"later starts skipped: {skipped}"] if skipped else []),
    ]
