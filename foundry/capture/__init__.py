"""The torch-facing API: ``CUDAGraph`` and ``graph()`` (capture, save, load, replay), output tensors at
fixed addresses, and graph-safe random numbers."""

from __future__ import annotations

from .cudagraph import CUDAGraph, graph, shared_pool
from .tensors import flatten_outputs, output_spec, restored_tensor, tensor_at

__all__ = ["CUDAGraph", "flatten_outputs", "graph", "output_spec", "restored_tensor", "shared_pool", "tensor_at"]
