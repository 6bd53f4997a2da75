"""What the stand-in engines share (see README.md): the fake model's greedy tokens and the plugin's report."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def next_tokens(prompt: list[int], count: int) -> list[int]:
    """Greedy tokens of the fake model: a function of the prompt only (every process agrees). Under
    ``FAKE_ENGINE_SLOW_FIRST=<mode>`` that mode's first prompt waits in ``compile_kernels_on_first_request``
    (what a sampled stack should name)."""
    if not _SLOWED and os.environ.get("FAKE_ENGINE_SLOW_FIRST") == _mode():
        _SLOWED.append(True)
        compile_kernels_on_first_request()
    seed = sum(prompt) % 997
    return [(seed + 31 * i) % 1000 for i in range(count)]


_ANSWERED: set[tuple[int, ...]] = set()  # the prompts this process answered (FAKE_ENGINE_DRIFT)
_SLOWED: list[bool] = []  # whether this process's first prompt waited (FAKE_ENGINE_SLOW_FIRST)


def _mode() -> str:
    return os.environ.get("FOUNDRY_VLLM_MODE") or os.environ.get("FOUNDRY_SGLANG_MODE") or "native"


def compile_kernels_on_first_request() -> None:
    """Stands for the seconds an engine spends compiling at its first request on a fresh node."""
    time.sleep(1.5)


def next_logprobs(prompt: list[int], count: int, k: int) -> list[list[tuple[int, float]]]:
    """The fake model's top-``k`` (token, logprob) at each of ``count`` positions, the greedy token first, the last
    two tied (the same value). Under ``FAKE_ENGINE_NUDGE=<mode>`` that mode's first logprob moves by one unit in
    the last place (a last-bit difference the greedy tokens do not show); under ``FAKE_ENGINE_TIE=<mode>`` that
    mode lists another token with the tied value last (as an engine's top-k may break a tie either way); under
    ``FAKE_ENGINE_DRIFT=<mode>`` that mode answers a prompt it answered before one unit in the last place off (a
    process that does not repeat itself)."""
    seed = sum(prompt) % 997
    tokens = next_tokens(prompt, count)
    value = [-0.125 * (min(j, k - 2) + 1) - seed / 4096 for j in range(k)]
    out = [[(tokens[i] if j == 0 else 1000 + j, value[j]) for j in range(k)] for i in range(count)]
    mode = _mode()
    if out and os.environ.get("FAKE_ENGINE_NUDGE") == mode:
        token, lp = out[0][0]
        out[0][0] = (token, math.nextafter(lp, 0.0))
    again = tuple(prompt) in _ANSWERED
    _ANSWERED.add(tuple(prompt))
    if out and again and os.environ.get("FAKE_ENGINE_DRIFT") == mode:
        token, lp = out[0][0]
        out[0][0] = (token, math.nextafter(lp, -1.0))
    if k >= 3 and os.environ.get("FAKE_ENGINE_TIE") == mode:
        out = [[*pos[:-1], (5000, pos[-1][1])] for pos in out]
    return out


CACHE_VARIABLES = ("HOME", "XDG_CACHE_HOME", "VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                   "CUDA_CACHE_PATH", "TVM_FFI_CACHE_DIR")  # fmt: skip


PARALLEL_VARIABLES = ("NCCL_RUNTIME_CONNECT", "NCCL_NVLS_ENABLE", "VLLM_ALLREDUCE_USE_SYMM_MEM")


def probe_caches(engine: str) -> None:
    """Under ``FAKE_ENGINE_CACHE_PROBE=<file>``, one JSON line appended to it: what this engine process sees of its
    cache folders as it starts (each variable, and whether its folder is empty or absent) and of the archive's
    shipping (caches packed, a signing key, vLLM's compile setting)."""
    path = os.environ.get("FAKE_ENGINE_CACHE_PROBE")
    if not path:
        return
    prefix = f"FOUNDRY_{engine.upper()}_"
    seen = {name: os.environ.get(name) for name in CACHE_VARIABLES}
    line = {
        "mode": os.environ.get(prefix + "MODE") or "native",
        "env": seen,
        "empty": {name: not os.path.exists(v) or not os.listdir(v) for name, v in seen.items() if v},
        "pack": os.environ.get(prefix + "PACK_CACHES"),
        "allow_inexact": os.environ.get(prefix + "ALLOW_INEXACT"),
        "key": os.environ.get("FOUNDRY_SIGNING_KEY"),
        "mega": os.environ.get("VLLM_USE_MEGA_AOT_ARTIFACT"),
        # vLLM's settings that are paths and key its compiled model
        "compile_paths": {name: os.environ.get(name) for name in ("VLLM_CONFIG_ROOT", "VLLM_XLA_CACHE_PATH")},
        # how many GPUs, and with which all-reduce settings, the engine was started (tensor parallel)
        "args": json.loads(os.environ.get("FAKE_ENGINE_ARGS", "{}")),
        "nccl": {name: os.environ.get(name) for name in PARALLEL_VARIABLES},
        "deterministic": os.environ.get("TORCHINDUCTOR_DETERMINISTIC"),  # --env, or inherited: every run alike
        "pythonpath": os.environ.get("PYTHONPATH", ""),
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),  # which GPUs (a replica runs on the next ones)
        "rank_gpus": os.environ.get("FOUNDRY_RANK_GPUS"),  # a replica of a group asks for GPUs alike
    }
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
    triton = seen.get("TRITON_CACHE_DIR")
    if line["mode"] == "native" and triton and line["empty"].get("TRITON_CACHE_DIR"):
        # a native engine on an empty cache compiles its kernels into it (LOAD's come from the archive)
        os.makedirs(os.path.join(triton, "entry"), exist_ok=True)
        with open(os.path.join(triton, "entry", "kernel.cubin"), "wb") as f:
            f.write(b"\0" * 4096)
    inductor = seen.get("TORCHINDUCTOR_CACHE_DIR")
    if inductor and os.environ.get("FAKE_ENGINE_TUNE") == line["mode"]:
        # FAKE_ENGINE_TUNE=<mode>: that mode's process chooses a kernel's configuration by timing, as Inductor
        # does where its cache holds no choice, and records it beside the kernel
        os.makedirs(os.path.join(inductor, "ab"), exist_ok=True)
        with open(os.path.join(inductor, "ab", "kernel.best_config"), "w") as f:
            f.write(json.dumps({"XBLOCK": 128, "pid": os.getpid()}))


def write_report(engine: str, phases: tuple[str, ...], timings: dict[str, float]) -> None:
    """What the Foundry plugin writes under FOUNDRY_<ENGINE>_MODE (shared.steps.write_report's shape); first, the
    cache probe (``probe_caches``)."""
    probe_caches(engine)
    prefix = f"FOUNDRY_{engine.upper()}_"
    path = os.environ.get(prefix + "REPORT")
    if not path or not os.environ.get(prefix + "MODE"):
        return
    now = time.time()
    doc = {
        "mode": os.environ[prefix + "MODE"],
        "process_started_at": now - 0.5,
        "phases": [{"name": n, "cursor": 0, "allocations": 0, "seconds": 0.01, "ended_at": now} for n in phases],
        "timings": timings,
        # not in the plugin's report: the settings this process was started with, for the benchmark's tests
        "settings": {k.removeprefix(prefix): v for k, v in os.environ.items() if k.startswith(prefix)},
    }
    with open(path, "w") as f:
        json.dump(doc, f)
    # On several GPUs each rank's plugin writes its own report, rank r's beside rank 0's (shared/ranks.py's
    # report_path); the stand-in runs every rank in one process, rank r's restore r times as long.
    stem, dot, suffix = os.path.basename(path).rpartition(".")
    for rank in range(1, tensor_parallel_size()):
        other = {**doc, "timings": {k: v * (rank + 1) for k, v in timings.items()}}
        with open(os.path.join(os.path.dirname(path), f"{stem}.rank{rank}{dot}{suffix}"), "w") as f:
            json.dump(other, f)


def tensor_parallel_size() -> int:
    """The engine's tensor-parallel size as the benchmark asked for it (1 where it did not): vLLM's argument, or
    what the stand-in SGLang noted of its ``tp_size``."""
    args = json.loads(os.environ.get("FAKE_ENGINE_ARGS", "{}"))
    return int(args.get("tensor_parallel_size", os.environ.get("FAKE_ENGINE_TP", 1)))


Route = Callable[[str], tuple[int, object]]  # the POST's path (with its query) -> status and JSON answer


def serve_http(port: int, answer: Callable[[dict[str, Any]], object], routes: dict[str, Route] | None = None) -> None:
    """A server on 127.0.0.1:port, one thread a request: GET /health answers 200, a POST to a path ``routes``
    names (without its query) answers what that route returns, any other POST ``answer(request body)``."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return None

        def _answer(self, code: int, doc: object) -> None:
            body = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer(200 if self.path == "/health" else 404, {})

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            route = (routes or {}).get(self.path.split("?", 1)[0])
            if route is not None:
                self._answer(*route(self.path))
                return
            self._answer(200, answer(json.loads(body)))

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
