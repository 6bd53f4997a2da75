"""vLLM's memory profile to the byte in the native runs of ``foundry bench --engine vllm``, beside the line SAVE's
plugin logs (foundry/integration/vllm/memreport.py, whose keys these are; a test holds them alike). vLLM logs
its profile rounded to 0.01 GiB, and SAVE's KV cache one 2 MiB granule smaller than native's cannot be traced
from that. Loaded by this folder's ``sitecustomize`` while ``FOUNDRY_BENCH_MEMORY_PROFILE`` is set: vLLM's
``Worker.determine_available_memory`` is wrapped once its module is imported, and after it returns (its answer
unchanged) what it left on the worker is written to standard error (the engine's log) as ``PROFILE_LINE``.
Nothing of vLLM's or Foundry's is imported here."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

__all__ = ["ENV", "KEYS", "PROFILE_LINE", "start"]

ENV = "FOUNDRY_BENCH_MEMORY_PROFILE"
PROFILE_LINE = "foundry bench: vLLM's memory profile, bytes: {}"
KEYS = {
    "init_non_torch": ("init_snapshot", "non_torch_memory"),
    "non_torch_increase": ("non_torch_memory",),
    "torch_peak_increase": ("peak_activation_memory",),
    "cudagraph_estimate": ("cudagraph_memory_estimate",),
    "weights": ("model_runner", "model_memory_usage"),
    "kv_cache": ("available_kv_cache_memory_bytes",),
}
TARGET = ("vllm.v1.worker.gpu_worker", "Worker")


def _figures(worker: Any) -> str:
    out = []
    for key, path in KEYS.items():
        value: Any = worker
        for name in path:
            value = getattr(value, name, None)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out.append(f"{key}={int(value)}")
    return " ".join(out)


def _logging(original: Any) -> Any:
    def determine_available_memory(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        print(PROFILE_LINE.format(_figures(self)), file=sys.stderr, flush=True)
        return result

    return determine_available_memory


def start() -> bool:
    """Logs every memory profile from now on where ``$FOUNDRY_BENCH_MEMORY_PROFILE`` is set; whether it will."""
    if not os.environ.get(ENV):
        return False
    hooks = importlib.import_module(f"{__package__}.foundry_site_hooks" if __package__ else "foundry_site_hooks")
    hooks.wrap_after_import(*TARGET, "determine_available_memory", _logging)
    return True
