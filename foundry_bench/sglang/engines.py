"""One SGLang 0.5.17 process of the benchmark, driven the way its users drive it: ``sglang.Engine`` (a child
running child.py) or ``python -m sglang.launch_server`` (``/health``, then ``/generate`` with ``input_ids``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from foundry_bench.serving.process import ChildEngine, HttpEngine
from foundry_bench.serving.workload import Request
from foundry_bench.sglang.child import top_logprobs

__all__ = ["EngineProcess", "ServerProcess", "cli_flags"]


def cli_flags(kwargs: dict[str, Any]) -> list[str]:
    """Engine keyword arguments as launch_server flags (``True``: a bare flag; ``False`` and None: left out)."""
    flags: list[str] = []
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif isinstance(value, list | tuple):
            flags += [flag, *map(str, value)]
        elif isinstance(value, dict):
            flags += [flag, json.dumps(value)]
        elif value is not False and value is not None:
            flags += [flag, str(value)]
    return flags


class EngineProcess(ChildEngine):
    """``sglang.Engine(**kwargs)`` in a child process (child.py)."""

    def __init__(self, kwargs: dict[str, Any], prefix: list[str], env: dict[str, str], log: Path, cwd: Path) -> None:
        super().__init__(
            [*prefix, sys.executable, "-m", "foundry_bench.sglang.child", json.dumps(kwargs)], env, log, cwd
        )


class ServerProcess(HttpEngine):
    """``python -m sglang.launch_server`` on 127.0.0.1:port with the same settings as flags."""

    path = "/generate"

    def __init__(self, kwargs: dict[str, Any], port: int, prefix: list[str], env: dict[str, str], log: Path,
                 cwd: Path) -> None:  # fmt: skip
        cmd = [*prefix, sys.executable, "-m", "sglang.launch_server", *cli_flags(kwargs)]
        super().__init__([*cmd, "--host", "127.0.0.1", "--port", str(port)], port, env, log, cwd)

    def body(self, request: Request) -> dict[str, Any]:
        params = {"temperature": 0.0, "max_new_tokens": request.max_tokens, "ignore_eos": True}
        asks = {"return_logprob": True, "top_logprobs_num": request.logprobs} if request.logprobs else {}
        return {"input_ids": [list(p) for p in request.prompts], "sampling_params": params, **asks}

    def tokens(self, doc: Any) -> list[list[int]]:
        return [list(o["output_ids"]) for o in (doc if isinstance(doc, list) else [doc])]

    def top(self, doc: Any) -> list[Any]:
        return top_logprobs(doc if isinstance(doc, list) else [doc])
