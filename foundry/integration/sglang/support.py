"""The SGLang settings the adapter refuses, checked in the scheduler process before anything is allocated,
all named in one message with what still works.

The adapter saves the decode runner's ``full`` graphs and the prefill runner's ``breakable`` graphs of one
model on one GPU, with PyTorch's caching allocator allocating inside Foundry's region.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..shared.errors import UnsupportedConfigError

__all__ = ["check_supported", "problems"]

PARALLEL = ("tp_size", "dp_size", "pp_size", "ep_size", "attn_cp_size", "dcp_size", "moe_dp_size", "nnodes")
TRUE = ("1", "true", "yes", "on")


def _on(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "").strip().lower() in TRUE


def _phase(server_args: Any, phase: str) -> str:
    config = getattr(server_args, "cuda_graph_config", None)
    return str(getattr(getattr(config, phase, None), "backend", "disabled"))


def problems(server_args: Any, environ: Mapping[str, str]) -> list[str]:
    """What in these settings the adapter cannot save or load, one line each."""
    sa = server_args
    found = []
    many = {name: getattr(sa, name) for name in PARALLEL if (getattr(sa, name, 1) or 1) > 1}
    if many or getattr(sa, "enable_dp_attention", False):
        found.append(
            f"more than one GPU ({', '.join(f'{k}={v}' for k, v in many.items()) or 'enable_dp_attention'}): the "
            "adapter handles one GPU for now"
        )
    if getattr(sa, "enable_memory_saver", False):
        found.append(
            "SGLang's memory saver (enable_memory_saver) swaps PyTorch's allocator for torch_memory_saver's, whose "
            "memory is outside Foundry's region, so LOAD could not put weights and KV cache where SAVE had them: "
            "turn it off"
        )
    flags = {
        "cpu_offload_gb": "weights offloaded to the CPU move while serving",
        "speculative_algorithm": "speculative decoding: its draft graphs are not saved",
        "enable_lora": "LoRA: adapter-dependent graphs are not saved",
        "enable_torch_compile": "torch.compile: compiled code is captured, and compiled again at LOAD",
        "enable_pdmux": "PD multiplexing: per-stream graphs are not saved",
        "enable_two_batch_overlap": "two-batch overlap: its split graphs are not saved",
        "debug_cuda_graph": "debug_cuda_graph runs the whole forward eagerly between segments",
    }
    found += [f"{name} ({why})" for name, why in flags.items() if getattr(sa, name, None)]
    if str(getattr(sa, "disaggregation_mode", "null") or "null") != "null":
        found.append("prefill/decode disaggregation: its transfer engines hold memory outside the region")
    decode, prefill = _phase(sa, "decode"), _phase(sa, "prefill")
    if getattr(sa, "disable_cuda_graph", False) or (decode == "disabled" and prefill == "disabled"):
        found.append("CUDA graphs are off (disable_cuda_graph): there are no graphs to save or load")
    else:
        if decode not in ("full", "disabled"):
            found.append(
                f"decode CUDA graph backend {decode!r}: the adapter saves 'full' decode graphs (SGLang's default)"
            )
        if prefill not in ("breakable", "disabled"):
            found.append(
                f"prefill CUDA graph backend {prefill!r}: the adapter saves 'breakable' prefill graphs (SGLang's "
                "default on CUDA); with 'disabled' the decode graphs are saved and prefill runs eagerly"
            )
    if _on(environ, "SGLANG_ENABLE_CUDA_GRAPH_DEDUP"):
        found.append("SGLANG_ENABLE_CUDA_GRAPH_DEDUP: shared graph execs are not saved; unset it")
    if _on(environ, "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING"):
        found.append(
            "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING sizes the KV cache from the memory left after capture, which LOAD "
            "does not do; unset it"
        )
    return found


def check_supported(server_args: Any, environ: Mapping[str, str]) -> None:
    """Raises UnsupportedConfigError naming every setting the adapter cannot run with."""
    found = problems(server_args, environ)
    if found:
        raise UnsupportedConfigError(
            "the Foundry SGLang adapter cannot run with these settings:\n  - "
            + "\n  - ".join(found)
            + "\nChange them, or start SGLang with FOUNDRY_SGLANG_MODE=off."
        )
