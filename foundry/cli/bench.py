"""`foundry bench`: the cold-start benchmark (needs a CUDA GPU and PyTorch).

Its arguments are checked first, torch-free, so that a mistyped shape or a negative count is reported
as such on any machine; only then does it look for PyTorch and a GPU. Errors go to stderr, exit 2."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from foundry.bench import SHAPES, VARIANTS, vllm_batch_sizes

__all__ = ["add_parser"]

EXIT_CANNOT_RUN = 2


def _fail(message: str) -> int:
    print(f"foundry bench: {message}", file=sys.stderr)
    return EXIT_CANNOT_RUN


def _run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("torch") is None:
        return _fail(
            "PyTorch is not installed; the benchmark runs a PyTorch model on a CUDA GPU "
            "(pip install 'foundry-graphs[bench]' on a machine with an NVIDIA GPU)"
        )
    import torch

    if not torch.cuda.is_available():
        return _fail("no CUDA GPU is visible; run the benchmark on a machine with an NVIDIA GPU")
    from foundry.bench import run_bench

    sizes = vllm_batch_sizes()[: args.graphs] if args.graphs else None
    # The workers read these (foundry/bench/worker.py); they are inherited by the processes run_bench starts.
    os.environ["FOUNDRY_BENCH_THREADS"] = str(args.threads)
    os.environ["FOUNDRY_BENCH_MODULES_FIRST"] = "0" if args.images_after_start else "1"
    run_bench(Path(args.out), args.shapes, args.variants, sizes)
    return 0


def _names(what: str, allowed: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type: a comma-separated list of ``allowed`` names, at least one."""

    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",")]
        unknown = [n for n in names if n not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {', '.join(repr(n) for n in unknown)}: choose from {', '.join(allowed)}"
            )
        return names

    return parse


def _at_least(low: int) -> Callable[[str], int]:
    """An argparse type: a whole number of ``low`` or more."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of {low} or more")
        return value

    return parse


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
    p.add_argument(
        "--shapes",
        type=_names("shape", list(SHAPES)),
        default="qwen3-0.6b,qwen3-8b",
        help=f"comma-separated model shapes, of: {', '.join(SHAPES)}",
    )
    p.add_argument(
        "--variants",
        type=_names("variant", VARIANTS),
        default=",".join(VARIANTS),
        help="eager and/or compiled (torch.compile)",
    )
    batches = len(vllm_batch_sizes())
    p.add_argument(
        "--graphs",
        type=_at_least(0),
        default=0,
        help=f"only the first N of vLLM's {batches} batch sizes (quick runs); 0: all",
    )
    p.add_argument(
        "--threads", type=_at_least(1), default=8, help="start_graph_builds(num_threads=...) in the LOAD process"
    )
    p.add_argument(
        "--images-after-start",
        action="store_true",
        help="load the kernel images after start_graph_builds instead of at process start "
        "(load_cuda_modules_and_libraries, the seed README's order)",
    )
    p.set_defaults(func=_run)
