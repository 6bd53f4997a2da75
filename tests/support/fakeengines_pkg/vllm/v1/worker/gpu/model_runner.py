"""The stand-in vLLM's model runner: a capture that takes a moment and logs as vLLM's does, in whole seconds."""

from __future__ import annotations

import os
import sys
import time

import _fakeengine


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
    if mode == "native" and _fakeengine.tensor_parallel_size() > 1:
        # What the benchmark's capture timer writes in each rank's worker of a native run, behind the prefix
        # vLLM's executor puts on its workers' lines; rank r's capture (r + 2) / 4 s.
        for rank in range(_fakeengine.tensor_parallel_size()):
            line = f"(Worker_TP{rank} pid={os.getpid()}) foundry bench: capture_model took {(rank + 2) / 4:.3f} s"
            print(line, file=sys.stderr, flush=True)
