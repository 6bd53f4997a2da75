"""The SGLang settings the adapter refuses, checked in the scheduler process before anything is allocated,
all named in one message with what still works.

The adapter saves the decode runner's ``full`` graphs and the prefill runner's ``breakable`` graphs of one
model on one GPU, or on several in tensor parallel (one archive folder per rank: shared/ranks.py), expert
parallel over them included, with NCCL or SGLang's custom all-reduce (CustomAllReduceV2, allreduce.py) inside
the graphs, with PyTorch's caching allocator allocating inside Foundry's region.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..shared.errors import UnsupportedConfigError

__all__ = ["check_supported", "problems"]

PARALLEL = ("dp_size", "pp_size", "attn_cp_size", "dcp_size", "moe_dp_size", "nnodes")
# Expert parallel over the tensor-parallel GPUs (ep_size = tp_size) with SGLang's standard dispatcher: no
# all-to-all, the experts' outputs summed by the NCCL all-reduce inside the graphs, and one piece of lazy state,
# each dispatcher's map of global to local experts, which moe.py has built before capture and before LOAD's
# graphs replay. The MoE runners measured so far with it: Triton's ("auto" picks it on NVIDIA GPUs).
EP_RUNNERS = ("auto", "triton")
# All-reduce paths other than NCCL, each on by its server argument; their peer state is not restored yet: the
# custom all-reduce keeps peer pointers opened from CUDA IPC handles, the others symmetric-memory windows.
ALL_REDUCE = {
    "enable_symm_mem": "NCCL symmetric memory",
    "enable_torch_symm_mem": "torch symmetric memory",
    "enable_mscclpp": "mscclpp",
    "enable_nccl_nvls": "NVLink multicast (NVLS)",
    "enable_flashinfer_allreduce_fusion": "FlashInfer's all-reduce fusion",
}
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
        named = ", ".join(f"{k}={v}" for k, v in many.items()) or "enable_dp_attention"
        found.append(
            f"more than one GPU other than tensor parallel ({named}): the adapter saves tensor parallel, and "
            "expert parallel over it, only"
        )
    found += _expert_parallel_problems(sa)
    if (getattr(sa, "tp_size", 1) or 1) > 1:
        found += [
            f"tp_size={sa.tp_size} with {name} ({what}), whose peer state is not restored: turn it off"
            for name, what in ALL_REDUCE.items()
            if getattr(sa, name, False)
        ]
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


def _expert_parallel_problems(sa: Any) -> list[str]:
    ep, tp = getattr(sa, "ep_size", 1) or 1, getattr(sa, "tp_size", 1) or 1
    if ep <= 1:
        return []
    found = []
    if ep != tp:
        found.append(
            f"ep_size={ep} with tp_size={tp}: the adapter saves expert parallel over the tensor-parallel GPUs "
            "(ep_size = tp_size)"
        )
    a2a = str(getattr(sa, "moe_a2a_backend", "none") or "none")
    if a2a != "none":
        found.append(
            f"moe_a2a_backend={a2a!r} with ep_size={ep}: its all-to-all kernels keep peer buffers and state of "
            "their own, which LOAD does not restore; the adapter saves the standard dispatcher (moe_a2a_backend "
            "'none', the default)"
        )
    runner = str(getattr(sa, "moe_runner_backend", "auto") or "auto")
    if runner not in EP_RUNNERS:
        found.append(
            f"moe_runner_backend={runner!r} with ep_size={ep}: not measured with expert parallel under Foundry "
            f"(measured: {', '.join(EP_RUNNERS)})"
        )
    if getattr(sa, "enable_eplb", False):
        found.append("enable_eplb (the expert load balancer moves experts while serving; the graphs hold them fixed)")
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
