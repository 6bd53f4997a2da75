"""Allocator isolation for the phase LOAD repeats after skipping one SAVE ran.

SAVE profiles memory (a real forward pass) before it allocates the KV cache; LOAD skips that. The profiling
leaves PyTorch's caching allocator holding cached segments with free space, from which SAVE would serve some
of the KV-cache phase's small tensors (attention metadata buffers, block tables), while LOAD would need new
segments for them: the same tensors at other addresses. Allocating that phase from a memory pool of its own
(``torch.cuda.MemPool``), in both runs, gives both the same fresh segments in the same order.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["isolated_pool"]

_POOLS: list[Any] = []  # the pools' memory holds the KV cache: they live as long as the process


@contextmanager
def isolated_pool() -> Iterator[None]:
    import torch

    torch.cuda.synchronize()
    pool = torch.cuda.MemPool()
    _POOLS.append(pool)
    with torch.cuda.use_mem_pool(pool):
        yield
