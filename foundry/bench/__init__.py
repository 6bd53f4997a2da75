"""The cold-start benchmark (`foundry bench`) and the decoder model it measures.

The runner and its report are torch-free (``summarize`` runs anywhere); the model and the workers
need torch, so the model's names are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from .runner import run_bench, summarize

_MODEL = ("SHAPES", "DecoderConfig", "QwenDecoder", "vllm_batch_sizes")

__all__ = ["SHAPES", "DecoderConfig", "QwenDecoder", "run_bench", "summarize", "vllm_batch_sizes"]


def __getattr__(name: str) -> Any:
    if name not in _MODEL:
        raise AttributeError(f"module 'foundry.bench' has no attribute {name!r}")
    return getattr(importlib.import_module(".model", __name__), name)
