"""One vLLM engine process of the benchmark, driven the way its users drive it: ``LLM()`` (a child running
offline.py) or ``vllm serve`` (the OpenAI-compatible server, over HTTP)."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

from foundry_bench.serving.logprobs import canonical
from foundry_bench.serving.process import Answer, ChildEngine, HttpEngine
from foundry_bench.serving.workload import Request

__all__ = ["HOLD_S", "OfflineEngine", "ServerEngine"]

# How long the paused server is given to take a held batch's prompts into its queue (it turns a prompt into a
# request in well under a millisecond; nothing is scheduled meanwhile, so a longer wait changes no output).
HOLD_S = 1.0


class OfflineEngine(ChildEngine):
    """``LLM(**kwargs)`` in a child process (offline.py)."""

    def __init__(self, kwargs: dict[str, Any], prefix: list[str], env: dict[str, str], log: Path, cwd: Path) -> None:
        cmd = [*prefix, sys.executable, "-m", "foundry_bench.vllm.offline", json.dumps(kwargs)]
        super().__init__(cmd, env, log, cwd)


class ServerEngine(HttpEngine):
    """``vllm serve MODEL`` (vLLM's CLI module; the bundle installs no console script) on 127.0.0.1:port; one
    /v1/completions request with token-ID prompts holds the whole batch.

    vLLM's server hands such a request's prompts to its engine one by one, and an idle engine starts a step on
    the first to arrive: which prompts a step holds then depends on the processes' timing, and a batch's
    numbers with it (a matrix multiply's kernel depends on its rows). A batch whose prompts must start together
    (``Request.together``: those compared bit for bit) is held: the scheduler paused with its queue kept
    (``/pause?mode=keep``), the request posted, ``HOLD_S`` later the scheduler resumed, which then schedules the
    whole queue in one step, in every process alike (``VLLM_SERVER_DEV_MODE=1``, runs.py)."""

    path = "/v1/completions"

    def __init__(self, args: list[str], port: int, prefix: list[str], env: dict[str, str], log: Path,
                 cwd: Path) -> None:  # fmt: skip
        cmd = [*prefix, sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", *args, "--port", str(port)]
        super().__init__([*cmd, "--host", "127.0.0.1", "--served-model-name", "m"], port, env, log, cwd)

    def generate(self, request: Request, timeout: float = 600) -> Answer:
        if not request.together or request.batch < 2:
            return super().generate(request, timeout)
        self._control("/pause?mode=keep&clear_cache=false")
        got: list[Answer] = []
        failed: list[BaseException] = []

        def post() -> None:
            try:
                got.append(HttpEngine.generate(self, request, timeout))
            except BaseException as exc:
                failed.append(exc)

        poster = threading.Thread(target=post, name="held-batch", daemon=True)
        poster.start()
        poster.join(HOLD_S)  # ends early only where the post failed: a paused server answers nothing
        self._control("/resume")
        poster.join(timeout)
        if failed:
            raise failed[0]
        if not got:
            raise self.fail(f"{self.path} did not answer batch {request.batch} within {timeout:.0f} s after /resume")
        return got[0]

    def _control(self, path: str) -> None:
        try:
            status, doc = self._http(path, {}, 60)
        except OSError as exc:
            raise self.fail(f"{path} did not answer: {exc}") from None
        if status != 200:
            raise self.fail(
                f"{path} answered {status}: {str(doc)[:200]}. The benchmark holds a batch's prompts with vLLM's "
                "/pause and /resume, which vLLM serves with VLLM_SERVER_DEV_MODE=1 (set for every run)"
            )

    def body(self, request: Request) -> dict[str, Any]:
        return {
            "model": "m",
            "prompt": [list(p) for p in request.prompts],
            "max_tokens": request.max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "return_token_ids": True,
            # top_logprobs keyed "token_id:N" (no tokenizer to decode with)
            **({"logprobs": request.logprobs, "return_tokens_as_token_ids": True} if request.logprobs else {}),
        }

    def tokens(self, doc: Any) -> list[list[int]]:
        return [list(c["token_ids"]) for c in sorted(doc["choices"], key=lambda c: c["index"])]

    def top(self, doc: Any) -> list[Any]:
        return [
            [canonical((int(k.removeprefix("token_id:")), lp) for k, lp in pos.items())
             for pos in c["logprobs"]["top_logprobs"]]
            for c in sorted(doc["choices"], key=lambda c: c["index"])
        ]  # fmt: skip
