"""`foundry bench`: the cold-start benchmark (needs a CUDA GPU and PyTorch)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parser"]


def _csv(text: str) -> list[str]:
    return [t for t in text.split(",") if t]


def _run_vllm(args: argparse.Namespace) -> int:
    from foundry.bench import VLLM_MODES as MODES
    from foundry.bench import VLLM_SHAPES as SHAPES
    from foundry.bench import VllmBenchConfig, run_vllm_bench

    shapes, apis, runners, modes = _csv(args.shapes), _csv(args.api), _csv(args.runner), _csv(args.modes)
    problems = [f"unknown shape {s!r} (choose from {sorted(SHAPES)})" for s in shapes if s not in SHAPES]
    problems += [f"unknown --api {a!r} (llm or serve)" for a in apis if a not in ("llm", "serve")]
    problems += [f"unknown --runner {r!r} (v2 or v1)" for r in runners if r not in ("v2", "v1")]
    problems += [f"unknown mode {m!r} (choose from {list(MODES)})" for m in modes if m not in MODES]
    try:
        batches = tuple(int(b) for b in _csv(args.batches))
        decode = tuple(int(b) for b in _csv(args.decode_batches))
    except ValueError:
        batches = decode = ()
        problems.append("--batches and --decode-batches take comma-separated integers")
    if any(b < 1 for b in (*batches, *decode)) or args.reps < 1:
        problems.append("batch sizes and --reps must be at least 1")
    if problems:
        print("foundry bench: " + "; ".join(problems), file=sys.stderr)
        return 2
    if importlib.util.find_spec("vllm") is None:
        print("foundry bench --engine vllm: vLLM is not installed (pip install vllm==0.26.0)", file=sys.stderr)
        return 2
    failed = 0
    for shape in shapes:
        for api in apis:
            for runner in runners:
                cfg = VllmBenchConfig(
                    out=Path(args.out), shape=shape, api=api, runner=runner, cudagraph_mode=args.cudagraph_mode,
                    modes=tuple(modes), batches=batches, decode_batches=decode, reps=args.reps,
                    gpu_memory_utilization=args.gpu_memory_utilization,
                )  # fmt: skip
                doc = run_vllm_bench(cfg)
                failed += not all(c.get("identical") for c in doc["compare"].values())
    return 1 if failed else 0


def _run(args: argparse.Namespace) -> int:
    if args.engine == "vllm":
        return _run_vllm(args)
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
    p.add_argument(
        "--engine",
        choices=["decoder", "vllm"],
        default="decoder",
        help="decoder: Foundry's own decoder model; vllm: vLLM 0.26 (LLM() or vllm serve) natively and from an archive",
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
    v = p.add_argument_group("--engine vllm")
    v.add_argument("--api", default="llm", help="llm (offline LLM()) and/or serve (vllm serve), comma-separated")
    v.add_argument("--runner", default="v2", help="vLLM's model runner: v2 (default) and/or v1, comma-separated")
    v.add_argument("--cudagraph-mode", default="default", help="vLLM's cudagraph_mode (default: FULL_AND_PIECEWISE)")
    v.add_argument("--modes", default="native_cold,save,native,load", help="which runs, in this order")
    v.add_argument("--batches", default="1,8,64,256", help="batch sizes whose greedy tokens are compared")
    v.add_argument("--decode-batches", default="1,32,256", help="batch sizes of the decode-throughput comparison")
    v.add_argument("--reps", type=int, default=5, help="alternating repetitions of each throughput measurement")
    v.add_argument("--gpu-memory-utilization", type=float, default=0.35, help="per engine (two run side by side)")
    p.set_defaults(func=_run)
