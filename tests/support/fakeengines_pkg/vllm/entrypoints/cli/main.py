"""`python -m vllm.entrypoints.cli.main serve MODEL --port P ...` of the stand-in vLLM: /health, then
/v1/completions with token-ID prompts and return_token_ids; with VLLM_SERVER_DEV_MODE=1, /pause?mode=keep and
/resume as vLLM's: a completion posted while paused is answered only after /resume. Under
``FAKE_ENGINE_HELD=<file>`` each completion appends whether it arrived while the server was paused."""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

from _fakeengine import serve_http

from vllm import next_logprobs, next_tokens, write_report

RUNNING = threading.Event()  # cleared while paused
RUNNING.set()


def control(path: str) -> tuple[int, object]:
    if os.environ.get("VLLM_SERVER_DEV_MODE") != "1":
        return 404, {"detail": "Not Found"}  # vLLM serves its development routes only in that mode
    if path.startswith("/pause"):
        assert "mode=keep" in path, path
        RUNNING.clear()
        return 200, {"status": "paused"}
    RUNNING.set()
    return 200, {"status": "resumed"}


def completions(request: dict[str, Any]) -> object:
    held = not RUNNING.is_set()
    if os.environ.get("FAKE_ENGINE_HELD"):
        with open(os.environ["FAKE_ENGINE_HELD"], "a") as f:
            f.write(json.dumps({"batch": len(request["prompt"]), "held": held}) + "\n")
    RUNNING.wait(60)
    prompts, count, k = request["prompt"], request["max_tokens"], request.get("logprobs")
    choices = [{"index": i, "token_ids": next_tokens(p, count)} for i, p in enumerate(prompts)]
    if k:  # top_logprobs keyed "token_id:N", as vLLM's with return_tokens_as_token_ids
        assert request.get("return_tokens_as_token_ids") is True, request
        for choice, p in zip(choices, prompts, strict=True):
            top = [{f"token_id:{t}": lp for t, lp in pos} for pos in next_logprobs(p, count, k)]
            choice["logprobs"] = {"top_logprobs": top}
    return {"choices": list(reversed(choices))}


def main() -> None:
    args = sys.argv[1:]
    assert args[0] == "serve"
    port = int(args[args.index("--port") + 1])
    # The flags as LLM()'s keyword arguments (--tensor-parallel-size 2 -> tensor_parallel_size=2), for the probe.
    flags: dict[str, Any] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            value = args[i + 1] if i + 1 < len(args) else "--"
            flags[arg[2:].replace("-", "_")] = int(value) if value.isdigit() else True
            if arg in ("--compilation-config", "--kernel-config"):  # a JSON object, as vLLM's CLI takes it
                flags[arg[2:].replace("-", "_")] = json.loads(value)
    os.environ["FAKE_ENGINE_ARGS"] = json.dumps(flags)
    from vllm.v1.worker.gpu.model_runner import capture_unless_loaded

    capture_unless_loaded(os.environ.get("FOUNDRY_VLLM_MODE") or "native")
    print("INFO init engine (profile, create kv cache, warmup model) took 2.50 s", flush=True)
    write_report()
    serve_http(port, completions, {"/pause": control, "/resume": control})


if __name__ == "__main__":
    main()
