"""One engine process of a serving benchmark, driven the way its users drive it: in a child process of ours
that builds the engine's Python object and answers requests (``ChildEngine``, protocol.py), or as the
engine's HTTP server (``HttpEngine``). Both answer ``generate`` with the greedy tokens of each prompt and the
seconds the call took, so the runs compare them alike. Each engine's package says which command starts it.

The process's stdout and stderr go to a log file (the engine's log, its other processes' included); the
child's answers are the lines that start with ``MARK``.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any, NamedTuple

from .protocol import MARK
from .workload import Request

__all__ = ["Answer", "ChildEngine", "Engine", "EngineError", "HttpEngine", "free_port"]


class Answer(NamedTuple):
    """What ``generate`` returns: each prompt's tokens, the seconds the request took, and with the request's
    ``logprobs`` each prompt's top log-probabilities per position (logprobs.py's canonical form), else None."""

    tokens: list[list[int]]
    seconds: float
    top: list[Any] | None = None


class EngineError(RuntimeError):
    """The engine process died, timed out or answered something unexpected; the message ends with its log."""


class Engine:
    """A started engine process: ``ready()`` waits for it, ``generate()`` asks it, ``stop()`` ends it."""

    def __init__(self, cmd: list[str], env: dict[str, str], log_path: Path, cwd: Path) -> None:
        self.log_path = log_path
        self.started_at = time.time()  # epoch: the plugin's report marks its phases in epoch seconds too
        self._t0 = time.perf_counter()
        self._log: IO[str] = log_path.open("w")
        self.proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # stop() ends the engine core and workers with it
        )
        self.marks: queue.Queue[dict[str, Any]] = queue.Queue()
        self.serving = False  # ready() returned: the engine can be asked to end on its own
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(MARK):
                self.marks.put(json.loads(line[len(MARK) :]))
            else:
                self._log.write(line)
                self._log.flush()

    def seconds(self) -> float:
        """Seconds since the process was started."""
        return time.perf_counter() - self._t0

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def fail(self, what: str) -> EngineError:
        return EngineError(f"{what} (rc={self.proc.poll()}); the last lines of {self.log_path}:\n{self.log_tail()}")

    def ready(self, timeout: float) -> dict[str, Any]:
        raise NotImplementedError

    def generate(self, request: Request, timeout: float = 600) -> Answer:
        raise NotImplementedError

    def _ask_to_end(self) -> None:
        """How the engine is asked to end on its own (stop() ends what is left of its process group)."""

    def stop(self) -> int | None:
        """Ends the process group (the engine core and its workers too) and returns the exit status; a second
        call only returns it."""
        if self._log.closed:
            return self.proc.returncode
        if self.proc.poll() is None and self.serving:  # one still starting is not listening: signals end it
            try:
                self._ask_to_end()
                self.proc.wait(timeout=20)
            except (subprocess.TimeoutExpired, OSError):
                pass
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
                try:
                    os.killpg(self.proc.pid, sig)
                    self.proc.wait(timeout=wait)
                    break
                except (subprocess.TimeoutExpired, ProcessLookupError):
                    continue
        self._log.close()
        return self.proc.returncode


class ChildEngine(Engine):
    """The engine's Python object built in a child process that speaks protocol.py: ``cmd`` starts it."""

    def _ask_to_end(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # the child's request loop ends, and the engine shuts down

    def _answer(self, timeout: float, what: str) -> dict[str, Any]:
        deadline = time.perf_counter() + timeout
        while True:
            try:
                return self.marks.get(timeout=1.0)
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise self.fail(f"the engine process ended while {what}") from None
                if time.perf_counter() > deadline:
                    raise self.fail(f"no answer after {timeout:.0f} s while {what}") from None

    def ready(self, timeout: float) -> dict[str, Any]:
        doc = self._answer(timeout, "building the engine")
        self.serving = True
        return {**doc["ready"], "ready_wall_s": self.seconds()}

    def generate(self, request: Request, timeout: float = 600) -> Answer:
        assert self.proc.stdin is not None
        line = json.dumps({"prompts": [list(p) for p in request.prompts], "max_tokens": request.max_tokens,
                           "logprobs": request.logprobs})  # fmt: skip
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except OSError:
            raise self.fail(f"the engine process took no request for batch {request.batch}") from None
        doc = self._answer(timeout, f"generating for batch {request.batch}")
        return Answer(doc["tokens"], float(doc["seconds"]), doc.get("top"))


def free_port() -> int:
    """A TCP port of 127.0.0.1 that no socket holds, as the OS hands one out for the server about to start.
    Not a fixed port: whatever else listens there (another run of this benchmark, or of its tests, at the same
    time) would answer in the server's place, or keep it from starting."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpEngine(Engine):
    """The engine's HTTP server on 127.0.0.1:port: ready once ``/health`` answers 200; ``generate`` posts one
    request holding the whole batch to ``path`` (the server takes its prompts in one go, as the Python API
    does, so every process schedules them alike) and reads the tokens back with ``tokens``."""

    path = "/generate"

    def __init__(self, cmd: list[str], port: int, env: dict[str, str], log: Path, cwd: Path) -> None:
        self.base = f"http://127.0.0.1:{port}"
        super().__init__(cmd, env, log, cwd)

    def body(self, request: Request) -> dict[str, Any]:
        raise NotImplementedError

    def tokens(self, doc: Any) -> list[list[int]]:
        """The answer's token IDs per prompt, in the prompts' order."""
        raise NotImplementedError

    def top(self, doc: Any) -> list[Any]:
        """The answer's top log-probabilities per prompt (logprobs.py's canonical form), where ``body`` asked."""
        raise NotImplementedError

    def _ask_to_end(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)  # what a supervisor sends; the servers shut down on it

    def _http(self, path: str, body: dict[str, Any] | None, timeout: float) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                text = resp.read().decode()
                return resp.status, json.loads(text) if text.strip().startswith(("{", "[")) else text
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    def ready(self, timeout: float) -> dict[str, Any]:
        deadline = time.perf_counter() + timeout
        while True:
            if self.proc.poll() is not None:
                raise self.fail("the server ended before /health answered")
            try:
                status, _ = self._http("/health", None, 2)
                if status == 200:
                    self.serving = True
                    return {"health_s": self.seconds(), "ready_wall_s": self.seconds()}
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.perf_counter() > deadline:
                raise self.fail(f"/health did not answer 200 within {timeout:.0f} s")
            time.sleep(0.1)

    def generate(self, request: Request, timeout: float = 600) -> Answer:
        t = time.perf_counter()
        try:
            status, doc = self._http(self.path, self.body(request), timeout)
        except (urllib.error.URLError, OSError) as exc:
            raise self.fail(f"{self.path} did not answer: {exc}") from None
        seconds = time.perf_counter() - t
        if status != 200 or not isinstance(doc, list | dict):
            raise self.fail(f"{self.path} answered {status}: {str(doc)[:400]}")
        try:
            return Answer(self.tokens(doc), seconds, self.top(doc) if request.logprobs else None)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise self.fail(f"{self.path} answered without what was asked ({exc!r}): {str(doc)[:400]}") from None
