"""The model shapes the serving benchmarks run: real architectures as weightless model folders (``config.json``
only; vLLM and SGLang fill seeded random weights with ``load_format="dummy"``). Values do not matter for
start-up, and a fixed seed makes every process's tokens comparable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["SHAPES", "make_model"]

_QWEN3: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000,
    "rope_scaling": None,
    "rms_norm_eps": 1e-06,
    "hidden_act": "silu",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "use_sliding_window": False,
    "sliding_window": None,
    "initializer_range": 0.02,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "use_cache": True,
    "torch_dtype": "bfloat16",
}

# The published Qwen3 configs' shapes.
SHAPES: dict[str, dict[str, Any]] = {
    "qwen3-0.6b": {
        **_QWEN3,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "max_window_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "tie_word_embeddings": True,
    },
    "qwen3-8b": {
        **_QWEN3,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "max_window_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "tie_word_embeddings": False,
    },
}


def make_model(folder: Path, shape: str) -> Path:
    """A weightless model folder of ``shape`` (one of SHAPES) at ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(SHAPES[shape], indent=1) + "\n")
    return folder
