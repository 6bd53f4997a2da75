"""LOAD's warm-up (on unless FOUNDRY_SGLANG_WARM_UP=0): one replay of the smallest prefill graph, on the dummy
batch SGLang's own capture builds for it, once every graph is SGLang's and past SAVE's memory.

Natively, capture runs each prefill shape's forward eagerly before it captures it: the kernels that the prefill
graphs' eager steps launch between segments (attention) and the eager code after them are loaded and, for
Triton's, looked up in its cache there. LOAD captures nothing, so without this the first request pays for it
(0.7-0.9 s against 0.1 s natively for SGLang's MoE shapes on an H200). The replay writes the runner's static
buffers and the KV cache slots of the capture's dummy requests, as capture's own warm-up does; every request
writes its inputs into those buffers before its replay.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["warm_prefill"]


def warm_prefill(model_runner: Any) -> float | None:
    """Replays the smallest prefill graph of ``model_runner``'s prefill runner on its capture's dummy batch;
    returns the seconds it took, None where there is no prefill runner with graphs (prefill graphs disabled, or
    skipped for memory: SGLang's eager runner then serves prefill)."""
    runner = getattr(model_runner, "prefill_cuda_graph_runner", None)
    sizes = sorted(getattr(runner, "capture_num_tokens", None) or [])
    if runner is None or not sizes or not hasattr(runner, "capture_prepare"):
        return None
    t0 = time.perf_counter()
    forward_batch, _ = runner.capture_prepare(sizes[0])
    runner.execute(forward_batch)
    runner.device_module.synchronize()  # the replay's own time, not what follows it
    return time.perf_counter() - t0
