"""`foundry bench --engine sglang`: SGLang 0.5.17 started as its users start it (``sglang.Engine`` or ``python
-m sglang.launch_server``), natively (cold and warm caches) and from a Foundry archive (SAVE, then LOAD), on
one GPU: start-up with the graphs' capture or restore, greedy tokens compared, decode/prefill speed of LOAD
against native side by side, and the targets (targets.py). Runs on ../serving; needs SGLang and a GPU; the
report (report.py) renders anywhere."""

from __future__ import annotations

from .runs import APIS, MODES, SglangBenchConfig, log_numbers, run_sglang_bench

__all__ = ["APIS", "MODES", "SglangBenchConfig", "log_numbers", "run_sglang_bench"]
