"""`foundry bench --engine vllm`: vLLM 0.26 started as its users start it (``LLM()`` or ``vllm serve``), natively
and from a Foundry archive, on one GPU: start-up by phase, greedy tokens compared, and decode/prefill speed of
a LOAD process against a native one measured side by side (runs.py, on ../serving). Needs vLLM and a GPU; the
report (report.py) renders anywhere."""

from __future__ import annotations

from foundry_bench.serving.shapes import SHAPES

from .runs import MODES, VllmBenchConfig, compare_tokens, log_numbers, run_vllm_bench

__all__ = ["MODES", "SHAPES", "VllmBenchConfig", "compare_tokens", "log_numbers", "run_vllm_bench"]
