"""What a vLLM archive is for: vLLM's version, the model and the settings that shape the graphs and the
memory layout, with the software versions and GPU every engine's fingerprint holds (shared/fingerprint.py).

Taken in the worker's ``init_device`` just before distributed set-up: later, vLLM resolves some settings
(capture sizes, block size) in place, and both runs must be compared at the same moment.
"""

from __future__ import annotations

from typing import Any

from ..shared.fingerprint import config_digest, software_fields
from ..shared.metadata import Fingerprint

__all__ = ["describe", "runner_name"]


def runner_name(vllm_config: Any) -> str:
    """The runner a worker builds: "v2" (vllm/v1/worker/gpu/model_runner.py, the default for dense models) or "v1"."""
    return "v2" if bool(getattr(vllm_config, "use_v2_model_runner", False)) else "v1"


def describe(vllm_config: Any, device_name: str | None = None) -> Fingerprint:
    """The fingerprint of this process's configuration (imports torch and vLLM: call it in a worker)."""
    import torch
    import vllm

    if device_name is None:
        from vllm.platforms import current_platform

        device_name = str(current_platform.get_device_name())
    model = vllm_config.model_config
    compilation = vllm_config.compilation_config
    return Fingerprint.of(
        {
            "vllm": vllm.__version__,
            **software_fields(torch, device_name),
            "model": _get(model, "model"),
            "hf_config_sha256": _hf_config_digest(model),
            "dtype": _get(model, "dtype"),
            "quantization": _get(model, "quantization"),
            "max_model_len": _get(model, "max_model_len"),
            "max_num_seqs": _get(vllm_config, "scheduler_config.max_num_seqs"),
            "max_num_batched_tokens": _get(vllm_config, "scheduler_config.max_num_batched_tokens"),
            "block_size": _get(vllm_config, "cache_config.block_size"),
            "cache_dtype": _get(vllm_config, "cache_config.cache_dtype"),
            "compilation_mode": _name(_get(compilation, "mode", None)),
            "cudagraph_mode": _name(_get(compilation, "cudagraph_mode", None)),
            "cudagraph_capture_sizes": _get(compilation, "cudagraph_capture_sizes"),
            "attention_backend": _name(_get(vllm_config, "attention_config.backend", None)),
            "tensor_parallel_size": _get(vllm_config, "parallel_config.tensor_parallel_size"),
            "pipeline_parallel_size": _get(vllm_config, "parallel_config.pipeline_parallel_size"),
            # which experts a rank holds, and so its graphs' expert maps and weights' shapes
            "expert_parallel": bool(_get(vllm_config, "parallel_config.enable_expert_parallel", False)),
            "runner": runner_name(vllm_config),
            "vllm_config_hash": _call(vllm_config, "compute_hash"),
        }
    )


def _get(obj: Any, path: str, default: Any = "?") -> Any:
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return default
    return obj


def _name(value: Any) -> str:
    return str(getattr(value, "name", value))


def _call(obj: Any, method: str) -> str:
    fn = getattr(obj, method, None)
    return str(fn()) if callable(fn) else "?"


def _hf_config_digest(model_config: Any) -> str:
    hf = getattr(model_config, "hf_config", None)
    to_dict = getattr(hf, "to_dict", None)
    return config_digest(to_dict()) if callable(to_dict) else "?"
