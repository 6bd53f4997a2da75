"""Allocator isolation for a start-up phase whose allocations must land where SAVE's did, although what ran
before it differs between SAVE and LOAD.

LOAD skips work SAVE did (vLLM's memory profiling, SGLang's prefill capture): that work leaves PyTorch's
caching allocator holding cached segments with free space, from which SAVE would serve some of the next
phase's tensors while LOAD would need new segments for them: the same tensors at other addresses.
Allocating that phase from a memory pool of its own (``torch.cuda.MemPool``), in both runs, gives both the
same fresh segments in the same order. Never wrap a CUDA graph capture in it: PyTorch serves an allocation
from the first pool whose filter matches, and the pool's (this thread, any stream) would take the graph's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["isolated_pool"]

_POOLS: list[Any] = []  # the pools' memory holds the phase's tensors: they live as long as the process


@contextmanager
def isolated_pool() -> Iterator[None]:
    import torch

    torch.cuda.synchronize()
    pool = torch.cuda.MemPool()
    _POOLS.append(pool)
    with torch.cuda.use_mem_pool(pool):
        yield
