"""A stand-in vLLM for the benchmark's CPU tests (see ../README.md)."""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace
from typing import Any

__version__ = "0.26.0-fake"


def next_tokens(prompt: list[int], count: int) -> list[int]:
    """Greedy tokens of the fake model: a function of the prompt only (every process agrees)."""
    seed = sum(prompt) % 997
    return [(seed + 31 * i) % 1000 for i in range(count)]


def write_report() -> None:
    """What the Foundry plugin's worker writes under FOUNDRY_VLLM_MODE (shared.steps.write_report's shape)."""
    path = os.environ.get("FOUNDRY_VLLM_REPORT")
    if not path or not os.environ.get("FOUNDRY_VLLM_MODE"):
        return
    now = time.time()
    phases = [
        {"name": n, "cursor": 0, "allocations": 0, "seconds": 0.01, "ended_at": now}
        for n in ("init_device", "load_model", "kv_cache", "capture")
    ]
    doc = {
        "mode": os.environ["FOUNDRY_VLLM_MODE"],
        "process_started_at": now - 0.5,
        "phases": phases,
        "timings": {"load_modules_s": 0.01, "start_graph_builds_s": 0.02, "graphs_ready_s": 0.03},
    }
    with open(path, "w") as f:
        json.dump(doc, f)


class SamplingParams:
    def __init__(self, temperature: float = 1.0, max_tokens: int = 16, ignore_eos: bool = False) -> None:
        self.max_tokens = max_tokens


class LLM:
    def __init__(self, **kwargs: Any) -> None:
        print("INFO Model loading took 1.00 GiB and 0.50 seconds", flush=True)
        print("INFO torch.compile took 1.25 s in total", flush=True)
        write_report()

    def generate(self, prompts: list[dict[str, Any]], params: SamplingParams, use_tqdm: bool = False) -> list[Any]:
        time.sleep(0.001 * len(prompts))
        return [
            SimpleNamespace(outputs=[SimpleNamespace(token_ids=next_tokens(p["prompt_token_ids"], params.max_tokens))])
            for p in prompts
        ]
