"""The stand-in vLLM's model runner: a capture that takes a moment and logs as vLLM's does, in whole seconds."""

from __future__ import annotations

import time


class GPUModelRunner:
    def capture_model(self) -> int:
        t0 = time.perf_counter()
        time.sleep(0.02)
        print(f"INFO Graph capturing finished in {time.perf_counter() - t0:.0f} secs, took 0.10 GiB", flush=True)
        return 1 << 20


def capture_unless_loaded(mode: str) -> None:
    """Native and SAVE capture; LOAD installs the archive's graphs instead."""
    if mode != "load":
        GPUModelRunner().capture_model()
