"""The fake vLLM's configuration (tests/support/fakevllm.py): a ``VllmConfig`` with the fields the adapter reads,
and the fake-only knobs that shape the fake model."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from tests.support.fakevllm_compile import CUDAGraphMode

__all__ = ["make_config"]


def make_config(
    runner: str = "v2",
    capture_sizes: Sequence[int] = (1, 2, 4, 8),
    model: str = "/tmp/tiny-qwen3",
    cudagraph_mode: CUDAGraphMode = CUDAGraphMode.FULL_DECODE_ONLY,
    pieces: int = 3,
    compile_before_capture: bool = False,
    workspace: int = 0,
    compile_mode: str | None = None,
    tp: int = 1,
    disable_custom_all_reduce: bool = False,
    custom_all_reduce: bool = False,
    **model_flags: Any,
) -> SimpleNamespace:
    model_config = SimpleNamespace(
        model=model, enable_sleep_mode=False, enable_cumem_allocator=False, enforce_eager=False
    )
    for k, v in model_flags.items():
        setattr(model_config, k, v)
    return SimpleNamespace(
        model_config=model_config,
        parallel_config=SimpleNamespace(
            tensor_parallel_size=tp,
            pipeline_parallel_size=1,
            data_parallel_size=1,
            world_size=tp,
            disable_custom_all_reduce=disable_custom_all_reduce,
        ),
        speculative_config=None,
        lora_config=None,
        compilation_config=SimpleNamespace(
            cudagraph_mode=cudagraph_mode,
            cudagraph_capture_sizes=list(capture_sizes),
            use_inductor_graph_partition=False,
            # vLLM's CompilationMode by name (VLLM_COMPILE: compiled through its AOT cache, fakevllm_cache.py)
            **({"mode": SimpleNamespace(name=compile_mode)} if compile_mode else {}),
        ),
        use_v2_model_runner=runner == "v2",
        # fake-only: how many pieces the compiled model has, and whether a compile warm-up runs before capture
        fake_pieces=pieces,
        fake_compile_before_capture=compile_before_capture,
        # fake-only: the workspace bytes the profile run asks for (an MoE model's; 0: the model asks none)
        fake_workspace=workspace,
        # fake-only: above one GPU, vLLM's custom all-reduce is built unless disable_custom_all_reduce
        # (fakevllm_allreduce.py; the stand-in Foundry is its memory)
        fake_custom_ar=custom_all_reduce,
    )
