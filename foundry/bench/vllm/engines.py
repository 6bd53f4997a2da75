"""One vLLM engine process of the benchmark, driven the way its users drive it: ``LLM()`` (a child running
offline.py) or ``vllm serve`` (the OpenAI-compatible server, over HTTP). Both answer ``generate`` with the
greedy tokens of each prompt and the seconds the call took, so the runs compare them alike.

The process's stdout and stderr go to a log file (vLLM's log, the engine core's included); the offline
child's answers are the lines that start with ``MARK``.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

from .offline import MARK
from .workload import Request

__all__ = ["Engine", "EngineError", "OfflineEngine", "ServerEngine"]


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

    def generate(self, request: Request, timeout: float = 600) -> tuple[list[list[int]], float]:
        raise NotImplementedError

    def _ask_to_end(self) -> None:
        """How the engine is asked to end on its own (stop() ends what is left of its process group)."""

    def stop(self) -> int | None:
        """Ends the process group (the engine core and its workers too) and returns the exit status; a second
        call only returns it."""
        if self._log.closed:
            return self.proc.returncode
        if self.proc.poll() is None:
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


class OfflineEngine(Engine):
    """``LLM(**kwargs)`` in a child process (offline.py)."""

    def __init__(self, kwargs: dict[str, Any], prefix: list[str], env: dict[str, str], log: Path, cwd: Path) -> None:
        cmd = [*prefix, sys.executable, "-m", "foundry.bench.vllm.offline", json.dumps(kwargs)]
        super().__init__(cmd, env, log, cwd)

    def _ask_to_end(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # the child's request loop ends, and LLM() shuts down

    def _answer(self, timeout: float, what: str) -> dict[str, Any]:
        deadline = time.perf_counter() + timeout
        while True:
            try:
                return self.marks.get(timeout=1.0)
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise self.fail(f"the LLM() process ended while {what}") from None
                if time.perf_counter() > deadline:
                    raise self.fail(f"no answer after {timeout:.0f} s while {what}") from None

    def ready(self, timeout: float) -> dict[str, Any]:
        doc = self._answer(timeout, "building LLM()")
        return {**doc["ready"], "ready_wall_s": self.seconds()}

    def generate(self, request: Request, timeout: float = 600) -> tuple[list[list[int]], float]:
        assert self.proc.stdin is not None
        line = json.dumps({"prompts": [list(p) for p in request.prompts], "max_tokens": request.max_tokens})
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        doc = self._answer(timeout, f"generating for batch {request.batch}")
        return doc["tokens"], float(doc["seconds"])


class ServerEngine(Engine):
    """``vllm serve MODEL`` (vLLM's CLI module; the bundle installs no console script) on 127.0.0.1:port."""

    def __init__(self, args: list[str], port: int, prefix: list[str], env: dict[str, str], log: Path,
                 cwd: Path) -> None:  # fmt: skip
        self.base = f"http://127.0.0.1:{port}"
        cmd = [*prefix, sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", *args, "--port", str(port)]
        cmd += ["--host", "127.0.0.1", "--served-model-name", "m"]
        super().__init__(cmd, env, log, cwd)

    def _ask_to_end(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)  # what a supervisor sends; vLLM's server shuts down on it

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
                    return {"health_s": self.seconds(), "ready_wall_s": self.seconds()}
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.perf_counter() > deadline:
                raise self.fail(f"/health did not answer 200 within {timeout:.0f} s")
            time.sleep(0.1)

    def generate(self, request: Request, timeout: float = 600) -> tuple[list[list[int]], float]:
        # One completion request holding the whole batch: the server takes its prompts in one go, as LLM()
        # does, so every process schedules them alike (requests sent one by one would interleave by timing).
        body = {
            "model": "m",
            "prompt": [list(p) for p in request.prompts],
            "max_tokens": request.max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "return_token_ids": True,
        }
        t = time.perf_counter()
        status, doc = self._http("/v1/completions", body, timeout)
        seconds = time.perf_counter() - t
        if status != 200 or not isinstance(doc, dict):
            raise self.fail(f"/v1/completions answered {status}: {str(doc)[:400]}")
        choices = sorted(doc["choices"], key=lambda c: c["index"])
        return [list(c["token_ids"]) for c in choices], seconds
