"""A stand-in vLLM for the benchmark's CPU tests (see ../README.md)."""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace
from typing import Any

import _fakeengine
from _fakeengine import next_logprobs, next_tokens

__version__ = "0.26.0-fake"
__all__ = ["LLM", "SamplingParams", "kv_cache_tokens", "next_logprobs", "next_tokens", "write_report"]


def write_report() -> None:
    """The Foundry plugin's report, with vLLM's phases."""
    timings = {"load_modules_s": 0.01, "start_graph_builds_s": 0.02, "graphs_ready_s": 0.03}
    _fakeengine.write_report("vllm", ("init_device", "load_model", "kv_cache", "capture"), timings)


def kv_cache_tokens() -> int:
    """What the fake engine's memory profile sizes: smaller by one block under ``FAKE_ENGINE_KV=<mode>``."""
    mode = os.environ.get("FOUNDRY_VLLM_MODE") or "native"
    return 1_000_016 - (16 if os.environ.get("FAKE_ENGINE_KV") == mode else 0)


class SamplingParams:
    def __init__(
        self, temperature: float = 1.0, max_tokens: int = 16, ignore_eos: bool = False, logprobs: int | None = None
    ) -> None:
        self.max_tokens = max_tokens
        self.logprobs = logprobs


class LLM:
    def __init__(self, **kwargs: Any) -> None:
        os.environ["FAKE_ENGINE_ARGS"] = json.dumps(
            {
                k: v
                for k, v in kwargs.items()
                if isinstance(v, (int, bool)) or k in ("compilation_config", "kernel_config")
            }
        )
        print("INFO Model loading took 1.00 GiB and 0.50 seconds", flush=True)
        print("INFO torch.compile took 1.25 s in total", flush=True)
        print(f"INFO GPU KV cache size: {kv_cache_tokens():,} tokens", flush=True)
        from vllm.v1.worker.gpu.model_runner import capture_unless_loaded

        capture_unless_loaded(os.environ.get("FOUNDRY_VLLM_MODE") or "native")
        write_report()

    def generate(self, prompts: list[dict[str, Any]], params: SamplingParams, use_tqdm: bool = False) -> list[Any]:
        time.sleep(0.001 * len(prompts))
        return [self._output(p["prompt_token_ids"], params) for p in prompts]

    @staticmethod
    def _output(prompt: list[int], params: SamplingParams) -> Any:
        logprobs = None
        if params.logprobs:  # vLLM's: per position {token_id: Logprob}
            logprobs = [
                {t: SimpleNamespace(logprob=lp) for t, lp in pos}
                for pos in next_logprobs(prompt, params.max_tokens, params.logprobs)
            ]
        token_ids = next_tokens(prompt, params.max_tokens)
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=token_ids, logprobs=logprobs)])
