"""A stack sampler for the engines' processes (``foundry bench --engine ... --stacks``): where a process's
seconds go when its log says nothing, e.g. a first request that takes seconds on a fresh node.

Loaded by this folder's ``sitecustomize`` in every Python process the engine starts (its server, engine core or
scheduler, workers, detokenizer), spawned or forked, while ``FOUNDRY_BENCH_STACKS`` names a folder. A daemon
thread looks at every thread's Python stack every ``FOUNDRY_BENCH_STACKS_INTERVAL`` seconds (0.05 by default)
and writes each stretch of time a thread spent in one stack to ``stacks-<pid>.jsonl``, one JSON line as it begins
(``{"id", "thread", "from", "stack"}``: epoch seconds, the stack innermost frame first) and one as it ends
(``{"end", "to"}``); a stack that does not change is written once, and the process says it is alive once a
quarter of a second, so that a stretch a killed process never ended ends where the process was last seen.

Standard library only, and nothing of the engine's or Foundry's is imported: it runs before either, in every
process, and must not change what they do. A sampler that fails stops itself and says so on stderr."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterable
from types import FrameType
from typing import IO, Any

__all__ = ["DEPTH", "ENV", "INTERVAL_ENV", "MAX_LINES", "Stretches", "file_label", "frame_label", "stack_of", "start"]

ENV = "FOUNDRY_BENCH_STACKS"  # the folder the samples go to; unset: no sampling
INTERVAL_ENV = "FOUNDRY_BENCH_STACKS_INTERVAL"
DEPTH = 32  # frames kept of each stack, innermost first: enough to reach the engine's own call
MAX_LINES = 200_000  # a process writes at most this many lines (bounded disk whatever the engine does)
_ALIVE_EVERY_S = 0.25  # a process whose stacks do not change says it is alive this often
_NAME_EVERY_S = 2.0  # how often the process's name (its command line, which engines retitle) is looked at again


_ROOTS: list[str] = []  # sys.path's folders, longest first: a file is labelled by its path below one of them
_LABELS: dict[str, str] = {}  # file -> its label part, cached (a sample labels hundreds of frames)


def _roots() -> list[str]:
    if not _ROOTS:
        folders = {os.path.realpath(p or ".") for p in sys.path if isinstance(p, str)}
        _ROOTS.extend(sorted((f.rstrip("/") + "/" for f in folders), key=len, reverse=True))
    return _ROOTS


def file_label(path: str) -> str:
    """A file as the import system names it: its path below the ``sys.path`` folder that holds it
    (``sglang/srt/managers/scheduler.py``, ``subprocess.py``), else its last three parts."""
    label = _LABELS.get(path)
    if label is None:
        real = os.path.realpath(path) if path.startswith("/") else path
        root = next((r for r in _roots() if real.startswith(r)), None)
        label = real[len(root) :] if root else "/".join(path.split("/")[-3:])
        _LABELS[path] = label
    return label


def frame_label(frame: FrameType) -> str:
    """``<file label>:<line> <function>`` (``file_label``)."""
    return f"{file_label(frame.f_code.co_filename)}:{frame.f_lineno} {frame.f_code.co_name}"


def stack_of(frame: FrameType | None, depth: int = DEPTH) -> tuple[str, ...]:
    """A frame's stack as labels, innermost first, at most ``depth`` of them."""
    out: list[str] = []
    while frame is not None and len(out) < depth:
        out.append(frame_label(frame))
        frame = frame.f_back
    return tuple(out)


class Stretches:
    """Each thread's current stack and since when. ``add`` takes one sample and returns what to write: a stretch
    that begins (``{"id", "thread", "from", "stack"}``, written as it begins, so that a process killed while one
    thread holds one stack still shows it) and the end of one whose thread changed stack or is gone
    (``{"end": id, "to"}``); ``close`` ends them all."""

    def __init__(self) -> None:
        self._open: dict[int, tuple[int, float, tuple[str, ...]]] = {}  # thread: stretch id, last seen, stack
        self._next = 0

    def add(self, now: float, threads: dict[int, tuple[str, tuple[str, ...]]]) -> list[dict[str, Any]]:
        out = [self._end(ident, self._open[ident][1]) for ident in [i for i in self._open if i not in threads]]
        for ident, (name, stack) in threads.items():
            current = self._open.get(ident)
            if current is not None and current[2] == stack:
                self._open[ident] = (current[0], now, stack)
                continue
            if current is not None:
                out.append(self._end(ident, now))
            self._next += 1
            self._open[ident] = (self._next, now, stack)
            out.append({"id": self._next, "thread": name, "from": round(now, 3), "stack": list(stack)})
        return out

    def close(self, now: float) -> list[dict[str, Any]]:
        return [self._end(ident, now) for ident in list(self._open)]

    def _end(self, ident: int, until: float) -> dict[str, Any]:
        stretch, _, _ = self._open.pop(ident)
        return {"end": stretch, "to": round(until, 3)}


class _Sampler:
    def __init__(self, folder: str, interval: float) -> None:
        self.folder, self.interval = folder, interval
        self.pid = os.getpid()
        self.stretches = Stretches()
        self.lines = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.name = ""
        self.named_at = 0.0
        self.alive_at = 0.0
        os.makedirs(folder, exist_ok=True)
        self.file: IO[str] = open(os.path.join(folder, f"stacks-{self.pid}.jsonl"), "a", buffering=1)  # noqa: SIM115
        self._write([{"pid": self.pid, "parent": os.getppid(), "argv": sys.argv[:4], "started": time.time()}])

    def _write(self, records: Iterable[dict[str, Any]]) -> None:
        with self.lock:
            for record in records:
                if self.lines >= MAX_LINES:
                    if self.lines == MAX_LINES:
                        self.file.write(json.dumps({"truncated": MAX_LINES}) + "\n")
                        self.lines += 1
                    return
                self.file.write(json.dumps(record) + "\n")
                self.lines += 1

    def _rename(self, now: float) -> None:
        # Engines retitle their processes (SGLang "sglang::scheduler", vLLM "VLLM::EngineCore"): the name the
        # report gives a process is the last one its command line had.
        self.named_at = now
        try:
            with open(f"/proc/{self.pid}/cmdline", "rb") as f:
                name = f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
        except OSError:
            return
        if name and name != self.name:
            self.name = name
            self._write([{"process": name, "at": round(now, 3)}])

    def sample(self) -> None:
        me = threading.get_ident()
        names = {t.ident: t.name for t in threading.enumerate()}
        now = time.time()
        threads = {
            ident: (names.get(ident, str(ident)), stack_of(frame))
            for ident, frame in sys._current_frames().items()
            if ident != me
        }
        written = self.stretches.add(now, threads)
        if not written and now - self.alive_at >= _ALIVE_EVERY_S:
            written = [{"alive": round(now, 3)}]  # a stretch still open ends no earlier than this
        if written:
            self.alive_at = now
            self._write(written)
        if now - self.named_at >= _NAME_EVERY_S:
            self._rename(now)

    def run(self) -> None:
        try:
            while not self.stop.wait(self.interval):
                self.sample()
        except Exception as exc:  # never the engine's problem: the samples stop, the process goes on
            print(f"foundry stack sampler (pid {self.pid}) stopped: {exc!r}", file=sys.stderr)

    def close(self) -> None:
        self.stop.set()
        self._write(self.stretches.close(time.time()))
        with self.lock:
            self.file.close()


_SAMPLER: _Sampler | None = None


def start(folder: str | None = None, interval: float | None = None) -> bool:
    """Starts sampling this process (and, through ``os.register_at_fork``, each child it forks) into ``folder``
    (default ``$FOUNDRY_BENCH_STACKS``); whether it started."""
    global _SAMPLER
    folder = folder or os.environ.get(ENV)
    if not folder or _SAMPLER is not None:
        return False
    if interval is None:
        try:
            interval = float(os.environ.get(INTERVAL_ENV) or 0.05)
        except ValueError:
            interval = 0.05
    sampler = _SAMPLER = _Sampler(folder, max(interval, 0.005))
    threading.Thread(target=sampler.run, name="foundry-stack-sampler", daemon=True).start()
    import atexit

    atexit.register(_close)
    return True


def _close() -> None:
    if _SAMPLER is not None and _SAMPLER.pid == os.getpid():
        _SAMPLER.close()


def _after_fork() -> None:
    # A forked child has no sampler thread and its parent's open stretches: it samples anew, into its own file.
    global _SAMPLER
    if _SAMPLER is not None:
        folder, interval = _SAMPLER.folder, _SAMPLER.interval
        _SAMPLER = None
        start(folder, interval)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
