"""Engine integrations: adapters that make a serving engine start from a Foundry archive.

``shared`` holds what every engine's plugin needs; each engine's package (``vllm``, ``sglang``) holds only
that engine's hook points and start-up phases. Each uses only Foundry's public API (``import foundry``) and its
engine's own extension points. Importing this package imports no engine: an adapter imports its engine
only once it is switched on.
"""

from __future__ import annotations

from . import sglang, shared, vllm

__all__ = ["sglang", "shared", "vllm"]
