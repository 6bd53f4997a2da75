"""LOAD: Triton's cache key of itself, computed on a thread of its own while the engine starts.

Before its first compile or cache lookup in a process, Triton hashes its own sources and backend files into one
key (``triton_key``, kept for the process's life). Natively that happens inside capture, at the first Triton
kernel the warm-up launches; LOAD captures nothing, so it happened in LOAD's own warm-up replay, on the engine's
thread: 0.4 of that replay's 0.67 s (SGLang's scheduler, Qwen3-0.6B, H200, 41f32dd, sampled stacks). Computed
here as soon as LOAD starts, it is ready by then.

Only where the engine imported Triton already (both engines do before any plugin runs) and Triton keeps the key
(an ``lru_cache``d function): nothing is imported from this thread, and a Triton that recomputes it each time
gains nothing from it. A failure is Triton's to report when it computes the key itself."""

from __future__ import annotations

import sys
import threading
from typing import Any

__all__ = ["prewarm"]

# Where Triton keeps the function, newest first.
_HOMES = ("triton.runtime.cache", "triton.compiler.compiler")


def _cached_key() -> Any:
    for home in _HOMES:
        fn = getattr(sys.modules.get(home), "triton_key", None)
        if callable(fn) and hasattr(fn, "cache_info"):
            return fn
    return None


def _compute(fn: Any) -> None:
    try:
        fn()
    except Exception:
        return  # Triton computes it again where it needs it, and says what fails then


def prewarm() -> threading.Thread | None:
    """Starts computing Triton's key on a daemon thread; the thread, or None where there is nothing to do."""
    fn = _cached_key()
    if fn is None or fn.cache_info().currsize:
        return None
    thread = threading.Thread(target=_compute, args=(fn,), name="foundry-triton-key", daemon=True)
    thread.start()
    return thread
