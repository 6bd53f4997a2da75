"""`foundry bench`: the cold-start benchmark (needs a CUDA GPU and PyTorch)."""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path
from typing import Any

__all__ = ["add_parser"]


def _run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("torch") is None:
        print("foundry bench: PyTorch is not installed; the benchmark runs a PyTorch model on a CUDA GPU")
        return 2
    import torch

    if not torch.cuda.is_available():
        print("foundry bench: no CUDA GPU is visible; run the benchmark on a machine with an NVIDIA GPU")
        return 2
    from foundry.bench import SHAPES, run_bench, vllm_batch_sizes

    shapes = args.shapes.split(",")
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        print(f"foundry bench: unknown shape(s) {unknown}; choose from {sorted(SHAPES)}")
        return 2
    sizes = vllm_batch_sizes()[: args.graphs] if args.graphs else None
    # The workers read these (foundry/bench/worker.py); they are inherited by the processes run_bench starts.
    os.environ["FOUNDRY_BENCH_THREADS"] = str(args.threads)
    os.environ["FOUNDRY_BENCH_MODULES_FIRST"] = "0" if args.images_after_start else "1"
    run_bench(Path(args.out), shapes, args.variants.split(","), sizes)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "bench",
        description=(
            "The cold-start benchmark: for each model shape and variant, a native process warms up, captures and "
            "saves the decode graphs, and a fresh process LOADs them; the report (JSON, a table, a plot) compares"
            " cold start, replay latency and outputs. Needs a CUDA GPU and PyTorch."
        ),
        help="cold-start benchmark: native warm-up + capture vs Foundry LOAD (GPU)",
    )
    p.add_argument("--out", default="bench-results", help="where the JSON, table and plot go")
    p.add_argument("--shapes", default="qwen3-0.6b,qwen3-8b", help="comma-separated model shapes")
    p.add_argument("--variants", default="eager,compiled", help="eager and/or compiled (torch.compile)")
    p.add_argument("--graphs", type=int, default=0, help="only the first N of vLLM's 67 batch sizes (quick runs)")
    p.add_argument("--threads", type=int, default=8, help="start_graph_builds(num_threads=...) in the LOAD process")
    p.add_argument(
        "--images-after-start",
        action="store_true",
        help="load the kernel images after start_graph_builds instead of at process start "
        "(load_cuda_modules_and_libraries, the seed README's order)",
    )
    p.set_defaults(func=_run)
