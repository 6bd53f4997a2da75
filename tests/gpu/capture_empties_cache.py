"""foundry.graph prepares a capture through torch.cuda.graph itself: the caching allocator's free blocks go back
to the driver before the capture, unless the program switched empty_cache off (vLLM does for every capture but
its first; torch.cuda.graph calls torch.cuda.empty_cache or, in newer torch, torch.accelerator.empty_cache, so
both are patched). Measures, for torch.cuda.graph and foundry.graph alike, the memory the allocator still
reserves just after a capture begins when 256 MiB were freed (cached) before it, with empty_cache as it is and
patched out. Prints one JSON line."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any
from unittest import mock

import torch

import foundry

MIB = 1 << 20


def cached_at_capture(new_graph: Callable[[], Any], graph: Callable[..., Any]) -> int:
    """Bytes of freed blocks the allocator still holds inside a capture that began after they were freed."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    x = torch.ones(1024, device="cuda")
    scratch = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
    del scratch  # freed: the allocator caches its block
    g = new_graph()
    with graph(g):
        cached = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
        y = x * 2
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, x * 2)
    return int(cached)


def main() -> None:
    foundry.set_allocation_region(0x600000000000, "8GB")
    out = {}
    for name, new_graph, graph in (
        ("torch", torch.cuda.CUDAGraph, torch.cuda.graph),
        ("foundry", foundry.CUDAGraph, foundry.graph),
    ):
        out[name] = cached_at_capture(new_graph, graph)
        with contextlib.ExitStack() as patched:
            patched.enter_context(mock.patch("torch.cuda.empty_cache", lambda *a, **k: None))
            if hasattr(torch, "accelerator") and hasattr(torch.accelerator, "empty_cache"):
                patched.enter_context(mock.patch("torch.accelerator.empty_cache", lambda *a, **k: None))
            out[f"{name}_patched"] = cached_at_capture(new_graph, graph)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
