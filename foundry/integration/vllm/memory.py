"""The allocator isolation vLLM's KV-cache phase runs in (shared/memory.py): vLLM profiles memory before it
allocates the KV cache and LOAD does not, so both runs allocate that phase from a fresh pool."""

from __future__ import annotations

from ..shared.memory import isolated_pool

__all__ = ["isolated_pool"]
