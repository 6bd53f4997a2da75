"""What `foundry bench` can run, torch-free so that its arguments are checked before anything looks for
a GPU: the decoder shapes (Qwen3 configurations), the variants, and vLLM's capture batch sizes."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SHAPES", "VARIANTS", "DecoderConfig", "vllm_batch_sizes"]

VARIANTS = ("eager", "compiled")
"""The decoder run as is, or through torch.compile."""


@dataclass(frozen=True)
class DecoderConfig:
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    max_batch: int = 512
    max_seq: int = 64
    rope_theta: float = 1_000_000.0
    eps: float = 1e-6


SHAPES: dict[str, DecoderConfig] = {
    # Qwen/Qwen3-0.6B and Qwen/Qwen3-8B config.json shapes
    "qwen3-0.6b": DecoderConfig(
        vocab=151936, hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128, intermediate=3072
    ),
    "qwen3-8b": DecoderConfig(
        vocab=151936, hidden=4096, layers=36, heads=32, kv_heads=8, head_dim=128, intermediate=12288
    ),
    # small enough for quick tests, same structure
    "tiny": DecoderConfig(
        vocab=4096, hidden=256, layers=28, heads=4, kv_heads=2, head_dim=64, intermediate=512, max_batch=64
    ),
}


def vllm_batch_sizes(max_batch: int = 512) -> list[int]:
    """vLLM's default CUDA-graph capture sizes: 1, 2, 4, then 8..512 in steps of 8."""
    return [b for b in [1, 2, 4, *range(8, 513, 8)] if b <= max_batch]
