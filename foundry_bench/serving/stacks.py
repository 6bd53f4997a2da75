"""Where a run's seconds went, from its sampled stacks (``--stacks``; stacksite/foundry_stack_sampler.py writes
them in every process of the engine): for a window of the run (its start-up, its first request), the stacks
that held a thread longest, with the seconds of each, across every process.

A thread that waits (for a lock, a queue, a socket, the event loop's ``select``) is left out: those are the
engine's idle threads, and the question is what the busy one did. A wait for a child process (``nvcc``, ``gcc``,
``ptxas``) is kept, since its caller names what is being built."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from .stacksite import foundry_stack_sampler as sampler

__all__ = ["SITE", "Sampled", "busiest", "env", "read", "site_path", "stack_lines", "waiting"]

SITE = Path(sampler.__file__).resolve().parent  # first on the engines' path: its sitecustomize starts the sampler
SHOWN = 12  # frames of a stack kept in the document, innermost first
TOP = 6  # stacks a window lists
MIN_S = 0.2  # a stack that held a thread for less is not listed
# Innermost frames that are a thread waiting for work, by file and function.
_WAITS = {
    "threading.py": ("wait", "_wait_for_tstate_lock", "join", "acquire"),
    "selectors.py": ("select",),
    "queue.py": ("get",),
    "multiprocessing/connection.py": ("wait", "_poll", "poll", "_recv", "_recv_bytes", "recv", "recv_bytes"),
    "multiprocessing/popen_fork.py": ("wait", "poll"),
    "multiprocessing/resource_tracker.py": ("main",),
    "asyncio/base_events.py": ("_run_once", "run_forever"),
    "concurrent/futures/thread.py": ("_worker",),
    "socketserver.py": ("serve_forever",),
}
_WAIT_PACKAGES = ("zmq/", "uvloop/")


def site_path(path: str) -> str:
    """``path`` (an engine's ``PYTHONPATH``) with the site folder first, once: its ``sitecustomize`` starts each
    recorder whose variable is set."""
    return ":".join([str(SITE), *(p for p in path.split(":") if p and p != str(SITE))])


def env(folder: Path, path: str) -> dict[str, str]:
    """The variables that make every process of an engine sample its stacks into ``folder``: the sampler's
    folder first on ``path`` (the engine's ``PYTHONPATH``)."""
    return {sampler.ENV: str(folder), "PYTHONPATH": site_path(path)}


def waiting(stack: list[str]) -> bool:
    """Whether a stack (innermost first) is a thread waiting for work."""
    if not stack:
        return True
    if any(frame.split(":", 1)[0].endswith("subprocess.py") for frame in stack):
        return False  # a wait for a program it started (nvcc, ninja, gcc): what is built is the question
    where, _, func = stack[0].partition(" ")
    path = where.rsplit(":", 1)[0]
    if path.startswith(_WAIT_PACKAGES):
        return True
    return any(path.endswith(name) and func in funcs for name, funcs in _WAITS.items())


@dataclass
class Sampled:
    """One process's samples: its pid, its last name, and each stretch a thread spent in one stack."""

    pid: int
    name: str = ""
    stretches: list[dict[str, Any]] = field(default_factory=list)


def read(folder: Path) -> list[Sampled]:
    """Every process's samples in ``folder``, each stretch with its end (a stretch the process never ended, as when
    it was killed or exec()ed another program, ends where the process was last seen); a line that does not parse
    (a process killed mid-write) is left out."""
    out = []
    for path in sorted(folder.glob("stacks-*.jsonl")):
        try:
            pid = int(path.stem.split("-", 1)[1])
        except ValueError:
            continue
        proc = Sampled(pid)
        begun: dict[Any, dict[str, Any]] = {}
        last = 0.0
        with path.open(errors="replace") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(record, dict):
                    continue
                if "argv" in record:
                    # A process that exec()s another program keeps its pid and file: the new interpreter's
                    # stretches are numbered anew, and what the old one had open ended where it was last seen.
                    proc.stretches += _ended(begun, last)
                    begun = {}
                for key in ("from", "to", "alive", "at"):
                    if isinstance(record.get(key), int | float):
                        last = max(last, float(record[key]))
                if "stack" in record:
                    begun[record.get("id")] = {k: record[k] for k in ("thread", "from", "stack") if k in record}
                elif "end" in record and record["end"] in begun:
                    proc.stretches.append({**begun.pop(record["end"]), "to": record.get("to", last)})
                elif "process" in record:
                    proc.name = str(record["process"])
                elif "argv" in record:
                    proc.name = " ".join(str(a) for a in record["argv"])
        proc.stretches += _ended(begun, last)
        out.append(proc)
    return out


def _ended(begun: dict[Any, dict[str, Any]], last: float) -> list[dict[str, Any]]:
    """Stretches never ended, ended where their process was last seen."""
    return [{**s, "to": max(last, float(s.get("from", 0.0)))} for s in begun.values()]


def busiest(procs: list[Sampled], start: float, end: float, top: int = TOP) -> list[dict[str, Any]]:
    """The stacks that held a thread longest between ``start`` and ``end`` (epoch seconds), waits left out: each
    with its process, thread, seconds within the window and its innermost frames."""
    held: dict[tuple[int, str, tuple[str, ...]], float] = defaultdict(float)
    names = {p.pid: p.name for p in procs}
    for proc in procs:
        for s in proc.stretches:
            overlap = min(float(s["to"]), end) - max(float(s["from"]), start)
            if overlap > 0 and not waiting(s["stack"]):
                held[(proc.pid, str(s["thread"]), tuple(s["stack"][:SHOWN]))] += overlap
    ranked = sorted(held.items(), key=lambda kv: -kv[1])
    return [
        {"pid": pid, "process": names.get(pid, ""), "thread": thread, "seconds": round(secs, 2), "stack": list(stack)}
        for (pid, thread, stack), secs in ranked[:top]
        if secs >= MIN_S
    ]


def _standard(frame: str) -> bool:
    """A frame of Python's own library (a top-level module's file, or frozen), as the sampler labels files."""
    path = frame.split(":", 1)[0]
    return path.startswith("<") or "/" not in path or path.startswith(("lib/python3", "python3."))


def _short(stack: list[str]) -> str:
    """The innermost frame, then the innermost frame outside Python's own library (what called it: a build, a
    compile), then the innermost of the engine's own code, where those are further out."""
    shown = stack[:1]
    caller = next((f for f in stack if not _standard(f)), None)
    engine = next((f for f in stack if f.startswith(("sglang/", "vllm/"))), None)
    for frame in (caller, engine):
        if frame is not None and frame not in shown:
            shown.append(frame)
    text = shown[0]
    for before, frame in pairwise(shown):
        text += (" < " if stack.index(frame) == stack.index(before) + 1 else " < ... < ") + frame
    return text


def _who(entry: dict[str, Any]) -> str:
    """A process as the report names it: its title where the engine retitled it (``sglang::scheduler``), the
    module a Python process runs (``-m``), else its program; with its pid."""
    words = str(entry.get("process") or "").split()
    if words and os.path.basename(words[0]).startswith("python"):
        words = words[2:3] if words[1:2] == ["-m"] else words[1:2]
    name = os.path.basename(words[0]) if words and "/" in words[0] else (words[0] if words else "?")
    return f"{name[:40]} {entry['pid']}"


def stack_lines(results: dict[str, dict[str, Any]], labels: dict[str, str]) -> list[str]:
    """The report's lines on each sampled run's windows (``stacks`` in its result)."""
    lines = []
    for mode, r in results.items():
        for window, entries in (r.get("stacks") or {}).items():
            if not isinstance(entries, list):
                continue
            lines.append(f"- {labels.get(mode, mode)}, {window.replace('_', ' ')}:" + ("" if entries else " nothing"))
            for e in entries:
                lines.append(f"  {e['seconds']:.2f} s {_who(e)} ({e['thread']}): {_short(e['stack'])}")
    if not lines:
        return []
    title = (
        "Where the seconds went (--stacks: every thread's stack sampled in every engine process; waits left "
        f"out; at most {TOP} stacks of {MIN_S} s or more a window, innermost frame first):"
    )
    return ["", title, *lines]
