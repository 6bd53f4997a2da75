"""One vLLM engine process of the benchmark, driven the way its users drive it: ``LLM()`` (a child running
offline.py) or ``vllm serve`` (the OpenAI-compatible server, over HTTP)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from foundry_bench.serving.logprobs import canonical
from foundry_bench.serving.process import ChildEngine, HttpEngine
from foundry_bench.serving.workload import Request

__all__ = ["OfflineEngine", "ServerEngine"]


class OfflineEngine(ChildEngine):
    """``LLM(**kwargs)`` in a child process (offline.py)."""

    def __init__(self, kwargs: dict[str, Any], prefix: list[str], env: dict[str, str], log: Path, cwd: Path) -> None:
        cmd = [*prefix, sys.executable, "-m", "foundry_bench.vllm.offline", json.dumps(kwargs)]
        super().__init__(cmd, env, log, cwd)


class ServerEngine(HttpEngine):
    """``vllm serve MODEL`` (vLLM's CLI module; the bundle installs no console script) on 127.0.0.1:port; one
    /v1/completions request with token-ID prompts holds the whole batch."""

    path = "/v1/completions"

    def __init__(self, args: list[str], port: int, prefix: list[str], env: dict[str, str], log: Path,
                 cwd: Path) -> None:  # fmt: skip
        cmd = [*prefix, sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", *args, "--port", str(port)]
        super().__init__([*cmd, "--host", "127.0.0.1", "--served-model-name", "m"], port, env, log, cwd)

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
