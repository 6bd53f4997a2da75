"""vLLM's capture of its CUDA graphs, timed to the millisecond in the native runs of ``foundry bench --engine vllm``.

vLLM logs its capture in whole seconds ("Graph capturing finished in %.0f secs"), and the start-up target that
LOAD's "init engine" be at most native warm's less native's capture was then undecided within half a second
(Gemma2, H200: 5.70 s against 8.46 - 3.00, 41f32dd). Loaded by this folder's ``sitecustomize`` while
``FOUNDRY_BENCH_CAPTURE_TIMER`` is set: ``capture_model`` of both of vLLM's model runners is wrapped, once its
module is imported, to write its seconds to standard error (the engine's log) as ``TIMER_LINE``, what it
returns unchanged. Nothing of vLLM's is imported here."""

from __future__ import annotations

import importlib
import os
import sys
import time
from typing import Any

__all__ = ["ENV", "TARGETS", "TIMER_LINE", "start"]

ENV = "FOUNDRY_BENCH_CAPTURE_TIMER"
TIMER_LINE = "foundry bench: capture_model took {:.3f} s"
# vLLM 0.26's model runners, V1 and V2, each with its capture_model.
TARGETS = {"vllm.v1.worker.gpu_model_runner": "GPUModelRunner", "vllm.v1.worker.gpu.model_runner": "GPUModelRunner"}


def _timed(original: Any) -> Any:
    def capture_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        result = original(self, *args, **kwargs)
        print(TIMER_LINE.format(time.perf_counter() - t0), file=sys.stderr, flush=True)
        return result

    return capture_model


def start() -> bool:
    """Times every capture from now on where ``$FOUNDRY_BENCH_CAPTURE_TIMER`` is set; whether it will."""
    if not os.environ.get(ENV):
        return False
    hooks = importlib.import_module(f"{__package__}.foundry_site_hooks" if __package__ else "foundry_site_hooks")
    for module, name in TARGETS.items():
        hooks.wrap_after_import(module, name, "capture_model", _timed)
    return True
