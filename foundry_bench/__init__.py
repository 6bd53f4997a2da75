"""The cold-start benchmark (`foundry bench`) and the decoder model it measures; `--engine vllm` (vllm/) and
`--engine sglang` (sglang/) run those engines natively and from an archive, on the engine-neutral serving/.

The runner, its report and what it can run (``shapes``) are torch-free (``summarize`` runs anywhere,
and the command checks its arguments before it looks for a GPU); the model and the workers need
torch, so the model is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from .runner import run_bench, summarize
from .serving.matrix import write_matrix
from .serving.shapes import MATRIX
from .sglang import SglangBenchConfig, run_sglang_bench
from .shapes import SHAPES, VARIANTS, DecoderConfig, vllm_batch_sizes
from .vllm import MODES as VLLM_MODES
from .vllm import SHAPES as VLLM_SHAPES
from .vllm import VllmBenchConfig, run_vllm_bench

_MODEL = ("QwenDecoder",)

__all__ = [
    "MATRIX",
    "SHAPES",
    "VARIANTS",
    "VLLM_MODES",
    "VLLM_SHAPES",
    "DecoderConfig",
    "QwenDecoder",
    "SglangBenchConfig",
    "VllmBenchConfig",
    "run_bench",
    "run_sglang_bench",
    "run_vllm_bench",
    "summarize",
    "vllm_batch_sizes",
    "write_matrix",
]


def __getattr__(name: str) -> Any:
    if name not in _MODEL:
        raise AttributeError(f"module 'foundry_bench' has no attribute {name!r}")
    return getattr(importlib.import_module(".model", __name__), name)
