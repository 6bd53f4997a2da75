"""A run on several GPUs, rank by rank: each rank's capture seconds from the engine's log, its plugin report, and
the many-GPU targets: graph restore at least 20x faster than native capture on every rank, and the engine's init
under LOAD at most 0.3x native warm's.

The engines log every rank's lines with the rank in the line's prefix (vLLM ``(Worker_TP1 pid=...)``, SGLang
``[... TP1 EP1]``); a figure read as "the last such line" mixes ranks (SGLang's prefill capture from one, its
decode capture from another). The plugins write rank 0's report where ``FOUNDRY_<E>_REPORT`` names it and each
other rank's beside it (``report_path``). The target is judged on the rank where restore gains least."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from foundry.integration.shared import Place, report_path
from foundry.probe import table

from .report import fmt, foundry_seconds, number
from .starts import start_figures, starts_of

__all__ = [
    "INIT_RATIO",
    "RESTORE_X",
    "arrival_lines",
    "arrivals_by_rank",
    "captures_by_rank",
    "clear_rank_reports",
    "init_ratio_line",
    "rank_reports",
    "rank_zero_lines",
    "restore_lines",
]

RESTORE_X = 20.0  # per rank, native capture over LOAD's restore (Foundry's own seconds)
INIT_RATIO = 0.3  # the engine's init under LOAD over native warm's

# The rank in a log line's prefix: "Worker_TP1", "Worker_TP1_EP1" (vLLM in expert parallel), "TP1 EP1"; not the TP of a
# word such as "HTTP1".
_RANK = re.compile(r"(?<![A-Za-z])TP(\d+)(?!\d)")


def captures_by_rank(text: str, patterns: Sequence[str]) -> dict[int, float]:
    """Each rank's capture seconds: the value of every line matching one of ``patterns`` (one group: seconds),
    added up by the rank its prefix names (the last line of a pattern per rank, where a rank logs one twice)."""
    found: dict[tuple[int, str], float] = {}
    for line in text.splitlines():
        for pattern in patterns:
            m = re.search(pattern, line)
            prefix = _RANK.search(line[: m.start()]) if m else None
            if m and prefix:
                found[(int(prefix.group(1)), pattern)] = float(m.group(1))
    out: dict[int, float] = {}
    for (rank, _), seconds in sorted(found.items()):
        out[rank] = round(out.get(rank, 0.0) + seconds, 3)
    return out


# A log line's time: SGLang's "[2026-11-29 19:38:27.360 TP0]" (milliseconds), vLLM's "INFO 11-29 19:22:52" (seconds).
_STAMPS = (
    (re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)"), "%Y-%m-%d %H:%M:%S.%f"),
    (re.compile(r"\b(\d\d-\d\d \d\d:\d\d:\d\d)\b"), "%m-%d %H:%M:%S"),
)


def _stamp(line: str) -> float | None:
    for pattern, form in _STAMPS:
        m = pattern.search(line)
        if m:
            return datetime.strptime(m.group(1), form).replace(tzinfo=timezone.utc).timestamp()
    return None


def arrivals_by_rank(text: str, markers: Mapping[str, str]) -> dict[str, dict[str, float]]:
    """When each rank reached each step (``markers``: step -> a pattern of its log line), in seconds after the
    first rank to reach it, the first such line of each rank. A collective after a step waits for the last rank
    there, and the engines log their step times on rank 0 alone: a step longer under LOAD may be another rank's
    lateness (keyed by the rank as a string, as the JSON keeps them)."""
    seen: dict[str, dict[int, float]] = {}
    for line in text.splitlines():
        for step, pattern in markers.items():
            m = re.search(pattern, line)
            prefix = _RANK.search(line[: m.start()]) if m else None
            at = _stamp(line) if prefix else None
            if m and prefix and at is not None:
                seen.setdefault(step, {}).setdefault(int(prefix.group(1)), at)
    return {
        step: {str(rank): round(at - min(ranks.values()), 3) for rank, at in sorted(ranks.items())}
        for step, ranks in seen.items()
        if len(ranks) > 1
    }


def arrival_lines(doc: dict[str, Any]) -> list[str]:
    """Per step, the rank that reached it last and how long after the first, native warm against LOAD."""
    results = doc["results"]
    found = {m: (results.get(m) or {}).get("arrivals_by_rank") or {} for m in ("native", "load")}
    steps = list(dict.fromkeys([*found["native"], *found["load"]]))
    if not steps:
        return []

    def last(ranks: dict[str, float] | None) -> str:
        if not ranks:
            return "-"
        rank = max(ranks, key=lambda r: ranks[r])
        return f"rank {rank} +{ranks[rank]:.2f} s"

    rows = [[step, last(found["native"].get(step)), last(found["load"].get(step))] for step in steps]
    return [
        "",
        "The ranks reaching each step, by their own log lines: the last, after the first (vLLM logs whole seconds):",
        table(["step", "native warm", "LOAD"], rows),
    ]


def rank_zero_lines(text: str) -> str:
    """The log without the lines of ranks above 0: a run's figures are rank 0's, as its plugin report is, not
    whichever rank logged a line last."""
    kept = []
    for line in text.splitlines(keepends=True):
        rank = _RANK.search(line)
        if rank is None or rank.group(1) == "0":
            kept.append(line)
    return "".join(kept)


def rank_reports(report: Path, world: int) -> dict[int, dict[str, Any]]:
    """The plugin reports of ranks 1 .. world-1 that exist, by rank (rank 0's is ``report`` itself)."""
    out = {}
    for rank in range(1, world):
        path = report_path(report, Place(rank, world))
        if path.is_file():
            out[rank] = json.loads(path.read_text())
    return out


def clear_rank_reports(report: Path, world: int) -> None:
    """Before a run: no rank's report of an earlier run is read as this one's."""
    for rank in range(world):
        report_path(report, Place(rank, world)).unlink(missing_ok=True)


def init_ratio_line(doc: dict[str, Any], key: str, what: str) -> list[str]:
    """On several GPUs: the engine's init under LOAD (``key`` of a run's result, ``what`` it is called) against
    native warm's, on the medians where ``--starts`` asked for more; nothing on one GPU or without both figures.
    The engines log their init on rank 0, after the collective set-up that waits for every rank."""
    if int(doc["config"].get("tp", 1)) < 2:
        return []
    native, load = start_figures(doc, "native"), start_figures(doc, "load")
    n, got = number(native.get(key)), number(load.get(key))
    if n is None or got is None or n <= 0:
        return []
    starts = starts_of(native, load)
    each = f" (medians of {starts} starts)" if starts > 1 else ""
    ratio = got / n
    met = "met" if ratio <= INIT_RATIO else "NOT met"
    return [f"- {what} under LOAD <= {INIT_RATIO}x native warm's{each}: {got:.2f} s / {n:.2f} s = {ratio:.2f}: {met}"]


def restore_lines(doc: dict[str, Any], init_key: str, init_what: str) -> list[str]:
    """On several GPUs: each rank's native capture against LOAD's restore (Foundry's own seconds), and the
    target on the rank that gains least, then the init target (``init_ratio_line``); nothing on one GPU or before
    native and LOAD have both run."""
    results = doc["results"]
    native, load = results.get("native") or {}, results.get("load") or {}
    captures = {int(k): v for k, v in (native.get("capture_by_rank") or {}).items()}
    restores = {0: foundry_seconds(load)} if load.get("plugin") else {}
    restores.update({int(k): foundry_seconds({"plugin": v}) for k, v in (load.get("plugin_ranks") or {}).items()})
    ranks = sorted(set(captures) | set(restores))
    if int(doc["config"].get("tp", 1)) < 2 or not ranks:
        return []
    rows, ratios = [], {}
    for rank in ranks:
        capture, restore = captures.get(rank), restores.get(rank)
        if capture is not None and restore:
            ratios[rank] = capture / restore
        rows.append([str(rank), fmt(capture, 3), fmt(restore, 3), f"{ratios[rank]:.1f}x" if rank in ratios else "-"])
    lines = ["", "Rank by rank: native warm's capture against LOAD's restore (Foundry's own seconds):"]
    lines.append(table(["rank", "native capture s", "LOAD restore s", "capture / restore"], rows))
    if len(ratios) < int(doc["config"]["tp"]):
        lines.append(f"- restore >= {RESTORE_X:.0f}x faster than capture on every rank: not judged (a rank's figure "
                     f"is missing: ranks {sorted(set(range(int(doc['config']['tp']))) - set(ratios))})")  # fmt: skip
        return lines + init_ratio_line(doc, init_key, init_what)
    worst = min(ratios, key=lambda r: ratios[r])
    met = "met" if ratios[worst] >= RESTORE_X else "NOT met"
    lines.append(
        f"- restore >= {RESTORE_X:.0f}x faster than capture on every rank: the least, rank {worst}, "
        f"{captures[worst]:.3f} / {restores[worst]:.3f} s = {ratios[worst]:.1f}x: {met}"
    )
    return lines + init_ratio_line(doc, init_key, init_what)
