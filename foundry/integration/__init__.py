"""Engine integrations: adapters that make a serving engine start from a Foundry archive.

Each adapter uses only Foundry's public API (``import foundry``) and its engine's own extension points.
Importing this package imports no engine: an adapter imports its engine only once it is switched on.
"""

from __future__ import annotations

from . import vllm

__all__ = ["vllm"]
