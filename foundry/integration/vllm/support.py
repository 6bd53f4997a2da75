"""The vLLM settings the adapter refuses, checked in each worker before anything is allocated, all named in one
message with what to change (SGLang's are in ../sglang/support.py)."""

from __future__ import annotations

import os
from typing import Any

from ..shared.errors import UnsupportedConfigError
from .graphs import BREAKABLE

__all__ = ["INEXACT", "SAVED_MODES", "check_supported"]

# The cudagraph modes whose graphs SAVE writes and LOAD restores, all of them: FULL graphs (decode only, or every
# batch) and the compiled model's piecewise graphs.
SAVED_MODES = ("FULL_AND_PIECEWISE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY")


# Model classes with which LOAD was measured not bit-identical to native under vLLM, and what was measured. They
# are refused by name at SAVE and LOAD (never served with a silent difference) unless FOUNDRY_VLLM_ALLOW_INEXACT
# names them. Only what was measured is here: a class is added when a run shows a difference, and removed when
# the cause is mended and a run shows it identical. Gemma2ForCausalLM was here until LOAD replayed SAVE's Inductor
# kernel choices (shared/autotune.py): SAVE, LOAD and LOAD again then answered alike in every call, and with
# TORCHINDUCTOR_DETERMINISTIC=1 native cold and warm too (H200, 5b6b493; docs/DESIGN.md).
INEXACT: dict[str, str] = {}


def check_supported(vllm_config: Any, allow_inexact: tuple[str, ...] = ()) -> None:
    """Refuses settings the adapter cannot save or load, and the model classes with which LOAD was measured
    inexact (``INEXACT``) unless ``allow_inexact`` names them, all of them in one message."""
    model = vllm_config.model_config
    parallel = vllm_config.parallel_config
    problems = []
    for arch in getattr(model, "architectures", None) or ():
        if arch in INEXACT and arch not in allow_inexact:
            problems.append(
                f"{arch}: {INEXACT[arch]}. Serve it without Foundry, or set FOUNDRY_VLLM_ALLOW_INEXACT={arch} in "
                "SAVE and LOAD to accept that difference knowingly"
            )
    if getattr(model, "enable_sleep_mode", False) or getattr(model, "enable_cumem_allocator", False):
        problems.append(
            "vLLM's cumem allocator (enable_sleep_mode / enable_cumem_allocator) maps device memory itself, outside "
            "Foundry's region, so LOAD could not put weights and KV cache where SAVE had them: turn both off"
        )
    problems += _parallel_problems(parallel)
    if getattr(vllm_config, "speculative_config", None) is not None:
        problems.append("speculative decoding: its drafter's graphs are not saved")
    if getattr(vllm_config, "lora_config", None) is not None:
        problems.append("LoRA: adapter-dependent graphs are not saved")
    if getattr(model, "enforce_eager", False):
        problems.append("enforce_eager: there are no CUDA graphs to save or load")
    compilation = vllm_config.compilation_config
    mode = getattr(getattr(compilation, "cudagraph_mode", None), "name", None)
    if mode not in SAVED_MODES:
        problems.append(
            f"cudagraph_mode {mode}: there are no CUDA graphs to save or load; use one of {', '.join(SAVED_MODES)} "
            "(FULL_AND_PIECEWISE is vLLM's default)"
        )
    if mode in ("PIECEWISE", "FULL_AND_PIECEWISE") and getattr(compilation, "use_inductor_graph_partition", False):
        problems.append(
            "use_inductor_graph_partition: Inductor captures its partitions through its own CUDA graph wrapper, which "
            "the adapter does not save; turn it off (vLLM's piecewise graphs are saved)"
        )
    if os.environ.get("VLLM_USE_BREAKABLE_CUDAGRAPH", "0").strip().lower() not in ("", "0", "false"):
        problems.append(BREAKABLE)
    if problems:
        raise UnsupportedConfigError(
            "the Foundry vLLM adapter cannot run with these settings:\n  - "
            + "\n  - ".join(problems)
            + "\nChange them, or start vLLM with FOUNDRY_VLLM_MODE=off."
        )


def _parallel_problems(parallel: Any) -> list[str]:
    """What the adapter refuses of vLLM's parallel settings. Tensor parallelism is saved and loaded per rank
    (shared/ranks.py), with NCCL's all-reduce or vLLM's custom all-reduce inside the graphs (its peer table
    written again at LOAD: allreduce.py); torch and NCCL symmetric memory keep peer windows and signal pads that
    nothing restores (docs/DESIGN.md, "Many GPUs")."""
    problems = []
    for name, what in (("pipeline_parallel_size", "pipeline"), ("data_parallel_size", "data"),
                       ("prefill_context_parallel_size", "prefill context"),
                       ("decode_context_parallel_size", "decode context")):  # fmt: skip
        if (getattr(parallel, name, 1) or 1) > 1:
            size = getattr(parallel, name)
            problems.append(f"{what} parallelism ({name}={size}): the adapter saves tensor parallel only")
    # Expert parallel over the tensor-parallel group (data parallel 1): each rank holds its share of the experts,
    # and vLLM's MoE layer sums their outputs with the same NCCL all-reduce as tensor parallel; no all-to-all
    # kernel runs (FusedMoEParallelConfig.use_all2all_kernels needs data, context or sequence parallel above 1,
    # refused above), so nothing beyond what tensor parallel saves is in the graphs. The expert load balancer
    # moves experts between ranks while serving, which a saved graph cannot follow.
    if getattr(parallel, "enable_expert_parallel", False) and getattr(parallel, "enable_eplb", False):
        problems.append(
            "expert load balancing (enable_eplb): it moves experts between ranks while serving, and the graphs saved "
            "read the placement SAVE had; serve without --enable-eplb (expert parallel itself is supported)"
        )
    if (getattr(parallel, "tensor_parallel_size", 1) or 1) > 1:
        # VLLM_ALLREDUCE_USE_SYMM_MEM (on by default) is judged after vLLM's set-up, on what vLLM made of it
        # (allreduce.py): its torch symmetric-memory all-reduce needs multicast, which the NCCL settings turn off.
        for var in ("VLLM_ALLREDUCE_USE_FLASHINFER", "VLLM_USE_NCCL_SYMM_MEM"):
            if os.environ.get(var, "0").strip() not in ("0", ""):
                problems.append(
                    f"tensor parallel with {var}={os.environ[var]} (an all-reduce over symmetric memory, whose peer "
                    f"windows are not restored): set {var}=0"
                )
    return problems
