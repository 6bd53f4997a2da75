"""vLLM's own memory profile, to the byte: what its ``determine_available_memory`` left on the worker. vLLM logs
these figures rounded to 0.01 GiB, and a SAVE whose KV cache is one 2 MiB granule smaller than native's cannot
say from those which of them grew; SAVE logs them whole (lifecycle.py), as the benchmark's native runs do
(foundry_bench/serving/stacksite/foundry_memory_profile.py, the same keys), so that the two logs say where they
part."""

from __future__ import annotations

from typing import Any

__all__ = ["KEYS", "line", "profile_bytes"]

# key: where vLLM 0.26's worker keeps it after determine_available_memory (gpu_worker.py)
KEYS = {
    "init_non_torch": ("init_snapshot", "non_torch_memory"),  # at vLLM's snapshot, after NCCL's set-up
    "non_torch_increase": ("non_torch_memory",),  # since that snapshot, through the profile
    "torch_peak_increase": ("peak_activation_memory",),
    "cudagraph_estimate": ("cudagraph_memory_estimate",),  # the V1 runner's throwaway graphs; 0 on V2
    "weights": ("model_runner", "model_memory_usage"),
    "kv_cache": ("available_kv_cache_memory_bytes",),
}


def profile_bytes(worker: Any) -> dict[str, int]:
    """The figures the worker holds, whole; a figure it does not hold is left out."""
    out = {}
    for key, path in KEYS.items():
        value: Any = worker
        for name in path:
            value = getattr(value, name, None)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = int(value)
    return out


def line(values: dict[str, int]) -> str:
    return "vLLM's memory profile, bytes: " + " ".join(f"{k}={v}" for k, v in values.items())
