"""The cold-start benchmark (`foundry bench`) and the decoder model it measures.

The runner, its report and what it can run (``shapes``) are torch-free (``summarize`` runs anywhere,
and the command checks its arguments before it looks for a GPU); the model and the workers need
torch, so the model is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from .runner import run_bench, summarize
from .shapes import SHAPES, VARIANTS, DecoderConfig, vllm_batch_sizes

_MODEL = ("QwenDecoder",)

__all__ = ["SHAPES", "VARIANTS", "DecoderConfig", "QwenDecoder", "run_bench", "summarize", "vllm_batch_sizes"]


def __getattr__(name: str) -> Any:
    if name not in _MODEL:
        raise AttributeError(f"module 'foundry.bench' has no attribute {name!r}")
    return getattr(importlib.import_module(".model", __name__), name)
