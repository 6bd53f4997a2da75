"""`python -m vllm.entrypoints.cli.main serve MODEL --port P ...` of the stand-in vLLM: /health, then
/v1/completions with token-ID prompts and return_token_ids."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from _fakeengine import serve_http

from vllm import next_logprobs, next_tokens, write_report


def completions(request: dict[str, Any]) -> object:
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
    print("INFO init engine (profile, create kv cache, warmup model) took 2.50 s", flush=True)
    write_report()
    serve_http(port, completions)


if __name__ == "__main__":
    main()
