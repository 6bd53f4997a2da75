"""`foundry bench`: the cold-start benchmark (needs a CUDA GPU and PyTorch).

Its arguments are checked first, torch-free, so that a mistyped shape or a negative count is reported
as such on any machine; only then does it look for PyTorch (or vLLM) and a GPU. Errors go to stderr,
exit 2."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from foundry_bench import SHAPES, VARIANTS, vllm_batch_sizes

__all__ = ["add_parser"]

EXIT_CANNOT_RUN = 2


def _fail(message: str) -> int:
    print(f"foundry bench: {message}", file=sys.stderr)
    return EXIT_CANNOT_RUN


# Environment switches that change what the engines compute (Inductor's run-to-run determinism, cuBLAS's
# workspace, vLLM's batch invariance): inherited by every run anyway, recorded in the document so that its report
# says which reference it was measured against.
NUMERICS_SWITCHES = ("TORCHINDUCTOR_DETERMINISTIC", "TORCHINDUCTOR_FORCE_FILTER_REDUCTION_CONFIGS",
                     "CUBLAS_WORKSPACE_CONFIG", "VLLM_BATCH_INVARIANT")  # fmt: skip


def _csv(text: str) -> list[str]:
    return [t for t in text.split(",") if t]


def _variables(flag: str, text: str, problems: list[str]) -> dict[str, str]:
    """``NAME=VALUE,...`` of environment variables (not Foundry's own); each item that is not one named."""
    found: dict[str, str] = {}
    for item in _csv(text):
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier() or name.startswith("FOUNDRY_"):
            problems.append(f"{flag} {item!r}: give NAME=VALUE, an environment variable (not a FOUNDRY_ one)")
        else:
            found[name] = value
    return found


def _serving_problems(
    args: argparse.Namespace, shapes: list[str], modes: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """The serving engines' common arguments, checked: the settings they give and what is wrong with them."""
    from foundry_bench import VLLM_MODES as MODES
    from foundry_bench import VLLM_SHAPES as SHAPES

    problems = [f"unknown shape {s!r} (choose from {sorted(SHAPES)})" for s in shapes if s not in SHAPES]
    problems += [f"unknown mode {m!r} (choose from {list(MODES)})" for m in modes if m not in MODES]
    if not modes:
        problems.append("--modes names no run")
    try:
        batches = tuple(int(b) for b in _csv(args.batches))
        decode = tuple(int(b) for b in _csv(args.decode_batches))
    except ValueError:
        batches = decode = ()
        problems.append("--batches and --decode-batches take comma-separated integers")
    if any(b < 1 for b in (*batches, *decode)) or args.reps < 1 or args.starts < 1:
        problems.append("batch sizes, --reps and --starts must be at least 1")
    if args.seconds is not None and args.seconds <= 0:
        problems.append("--seconds must be positive")
    if args.logprobs < 0:
        problems.append("--logprobs must be 0 or more")
    settings: dict[str, Any] = {"out": Path(args.out), "modes": tuple(modes), "batches": batches,
                                "decode_batches": decode, "reps": args.reps, "starts": args.starts,
                                "seconds": args.seconds, "logprobs": args.logprobs, "repeat": args.repeat,
                                "stacks": args.stacks, "digests": args.digests}  # fmt: skip
    if args.decode_steps is not None:
        settings["decode_steps"] = args.decode_steps
    plugin_env: dict[str, str] = {}
    for item in _csv(args.plugin_env):
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier() or not name.isupper() or name.startswith("FOUNDRY_"):
            problems.append(f"--plugin-env {item!r}: give NAME=VALUE, NAME without the FOUNDRY_<ENGINE>_ prefix")
        elif name in ("MODE", "ARCHIVE", "REPORT"):
            problems.append(f"--plugin-env {item!r}: the benchmark sets {name} for each run itself")
        else:
            plugin_env[name] = value
    settings["plugin_env"] = plugin_env
    settings["native_env"] = _variables("--native-env", args.native_env, problems)
    inherited = {name: os.environ[name] for name in NUMERICS_SWITCHES if name in os.environ}
    settings["extra_env"] = {**inherited, **_variables("--env", args.env, problems)}
    if args.tp < 1:
        problems.append(f"--tp {args.tp}: give the GPUs per engine, at least 1")
    settings["tp"] = args.tp
    if args.custom_all_reduce and args.tp < 2:
        problems.append("--custom-all-reduce needs --tp 2 or more: one GPU all-reduces nothing")
    settings["custom_all_reduce"] = args.custom_all_reduce
    if args.scratch:  # the archive and model folders of this benchmark, apart from another's on the same machine
        engine = args.engine
        settings["archive"] = Path(args.scratch) / f"foundry-{engine}-archive"
        settings["models"] = Path(args.scratch) / f"foundry-{engine}-models"
    return settings, problems


def _report_problems(problems: list[str]) -> int:
    print("foundry bench: " + "; ".join(dict.fromkeys(problems)), file=sys.stderr)
    return EXIT_CANNOT_RUN


def _identical(doc: dict[str, Any]) -> bool:
    """Every run compared equals its reference (the reference itself, SAVE's where no native run was asked for,
    counts as equal)."""
    return all(c.get("identical") or c.get("reference") for c in doc["compare"].values())


def _matrix(args: argparse.Namespace, default: str) -> str:
    """The shapes to run: --shapes, else every architecture of the matrix with --matrix, else ``default``."""
    from foundry_bench import MATRIX

    return args.shapes or (",".join(MATRIX) if args.matrix else default)


def _write_matrix(args: argparse.Namespace, engine: str) -> None:
    if args.matrix:
        from foundry_bench import write_matrix

        print(write_matrix(Path(args.out), engine), end="")


def _json_object(flag: str, text: str, what: str) -> tuple[dict[str, Any], str | None]:
    """An option that takes a JSON object (``what``: of what), or ``{}`` and the problem with it; empty: ``{}``."""
    if not text.strip():
        return {}, None
    try:
        value = json.loads(text)
    except ValueError as exc:
        return {}, f"{flag} is not JSON ({exc})"
    if not isinstance(value, dict):
        return {}, f"{flag} must be a JSON object of {what}"
    return value, None


def _canonical(value: dict[str, Any]) -> str:
    """A JSON object as the vLLM benchmark's configuration holds it: sorted keys, so that one config names one set
    of files; "" for none."""
    return json.dumps(value, sort_keys=True) if value else ""


def _run_vllm(args: argparse.Namespace) -> int:
    from foundry_bench import VllmBenchConfig, run_vllm_bench
    from foundry_bench.serving.marks import archive_problem

    # The matrix runs `vllm serve`, as users serve (its defaults differ from LLM()'s).
    api = args.api or ("serve" if args.matrix else "llm")
    shapes, apis, runners = _csv(_matrix(args, "qwen3-0.6b,qwen3-8b")), _csv(api), _csv(args.runner)
    settings, problems = _serving_problems(args, shapes, _csv(args.modes))
    problems += [f"unknown --api {a!r} (llm or serve)" for a in apis if a not in ("llm", "serve")]
    problems += [f"unknown --runner {r!r} (v2 or v1)" for r in runners if r not in ("v2", "v1")]
    compilation, problem = _json_object("--compilation-config", args.compilation_config, "vLLM's compilation config")
    kernel, kernel_problem = _json_object("--kernel-config", args.kernel_config, "vLLM's kernel config")
    problems += [p for p in (problem, kernel_problem) if p]
    if "cudagraph_mode" in compilation:
        problems.append("--compilation-config: give the graph mode with --cudagraph-mode (it names the report's files)")
    if problems:
        return _report_problems(problems)
    configs = [VllmBenchConfig(shape=shape, api=api, runner=runner, cudagraph_mode=args.cudagraph_mode,
                               compilation=_canonical(compilation), kernel=_canonical(kernel),
                               gpu_memory_utilization=args.gpu_memory_utilization,
                               expert_parallel=args.expert_parallel, **settings)
               for shape in shapes for api in apis for runner in runners]  # fmt: skip
    problems = [p for p in map(archive_problem, configs) if p]
    if problems:
        return _report_problems(problems)
    if importlib.util.find_spec("vllm") is None:
        print("foundry bench --engine vllm: vLLM is not installed (pip install vllm==0.26.0)", file=sys.stderr)
        return 2
    failed = sum(not _identical(run_vllm_bench(cfg)) for cfg in configs)
    _write_matrix(args, "vllm")
    return 1 if failed else 0


def _run_sglang(args: argparse.Namespace) -> int:
    from foundry_bench import SglangBenchConfig, run_sglang_bench
    from foundry_bench.serving.marks import archive_problem

    shapes, apis = _csv(_matrix(args, "qwen3-0.6b")), _csv(args.api or "engine")
    settings, problems = _serving_problems(args, shapes, _csv(args.modes))
    engine_args, problem = _json_object("--engine-args", args.engine_args, "Engine keyword arguments")
    problems += [problem] if problem else []
    if args.mem_fraction_static is not None:
        settings["mem_fraction_static"] = args.mem_fraction_static
    if args.expert_parallel:  # SGLang's expert parallel over the tensor-parallel GPUs: ep_size = tp_size
        if args.tp < 2:
            problems.append("--expert-parallel needs --tp 2 or more: the experts are split over those GPUs")
        engine_args = {**engine_args, "ep_size": args.tp}
    configs = [SglangBenchConfig(shape=shape, api=api, engine_args=engine_args, **settings)
               for shape in shapes for api in apis]  # fmt: skip
    problems += [p for cfg in configs for p in cfg.problems()]
    problems += [p for p in map(archive_problem, configs) if p]
    if problems:
        return _report_problems(problems)
    if importlib.util.find_spec("sglang") is None:
        print("foundry bench --engine sglang: SGLang is not installed (pip install sglang==0.5.17 beside Foundry)",
              file=sys.stderr)  # fmt: skip
        return 2
    failed = sum(not _identical(run_sglang_bench(cfg)) for cfg in configs)
    _write_matrix(args, "sglang")
    return 1 if failed else 0


def _run(args: argparse.Namespace) -> int:
    if args.engine in ("vllm", "sglang"):
        return _run_vllm(args) if args.engine == "vllm" else _run_sglang(args)
    try:
        shapes = _names("shape", list(SHAPES))(args.shapes or "qwen3-0.6b,qwen3-8b")
    except argparse.ArgumentTypeError as exc:
        return _fail(str(exc))
    if importlib.util.find_spec("torch") is None:
        return _fail(
            "PyTorch is not installed; the benchmark runs a PyTorch model on a CUDA GPU "
            "(pip install 'foundry-graphs[bench]' on a machine with an NVIDIA GPU)"
        )
    import torch

    if not torch.cuda.is_available():
        return _fail("no CUDA GPU is visible; run the benchmark on a machine with an NVIDIA GPU")
    from foundry_bench import run_bench

    sizes = vllm_batch_sizes()[: args.graphs] if args.graphs else None
    # The workers read these (foundry_bench/worker.py); they are inherited by the processes run_bench starts.
    os.environ["FOUNDRY_BENCH_THREADS"] = str(args.threads)
    os.environ["FOUNDRY_BENCH_MODULES_FIRST"] = "0" if args.images_after_start else "1"
    run_bench(Path(args.out), shapes, args.variants, sizes)
    return 0


def _names(what: str, allowed: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type: a comma-separated list of ``allowed`` names, at least one."""

    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",")]
        unknown = [n for n in names if n not in allowed]
        if unknown:
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
    p.add_argument(
        "--engine",
        choices=["decoder", "vllm", "sglang"],
        default="decoder",
        help="decoder: Foundry's own decoder model; vllm: vLLM 0.26 (LLM() or vllm serve); sglang: SGLang 0.5.17 "
        "(sglang.Engine or launch_server); the engines natively and from an archive",
    )
    p.add_argument("--out", default="bench-results", help="where the JSON, table and plot go")
    p.add_argument(
        "--shapes",
        help=f"comma-separated model shapes (default qwen3-0.6b,qwen3-8b; --engine sglang: qwen3-0.6b; "
        f"--engine decoder: {', '.join(SHAPES)})",
    )
    p.add_argument(
        "--variants",
        type=_names("variant", VARIANTS),
        default=",".join(VARIANTS),
        help="eager and/or compiled (torch.compile)",
    )
    p.add_argument(
        "--graphs",
        type=_at_least(0),
        default=0,
        help=f"only the first N of vLLM's {len(vllm_batch_sizes())} batch sizes (quick runs); 0: all",
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
    v = p.add_argument_group("--engine vllm and --engine sglang")
    v.add_argument("--api", help="vllm: llm (LLM(), the default) and/or serve; sglang: engine (sglang.Engine, the "
                   "default) and/or serve (launch_server); comma-separated")  # fmt: skip
    v.add_argument(
        "--modes",
        "--runs",
        default="native_cold,save,native,load",
        help="which runs, in this order; add native_fresh,load_fresh for the fresh-node rows (every cache folder "
        "empty; SAVE then packs the engine's caches into the archive, signed with a key the benchmark makes), and "
        "load_replica for a data-parallel replica: LOAD of the same archive on the next --tp GPUs, load_again for a "
        "second LOAD process (whether two LOADs answer alike where LOAD and native differ)",
    )
    v.add_argument("--matrix", action="store_true", help="every architecture of the matrix (Llama, Qwen3, Gemma2, "
                   "Mistral, Qwen3-MoE, Mixtral, DeepSeek-V2-Lite shapes) unless --shapes names some; vllm: `vllm "
                   "serve` unless --api names another; then OUT/<engine>-matrix.txt from every run in OUT")  # fmt: skip
    v.add_argument("--scratch", help="the folder of the benchmark's archive and model folders (default /tmp); two "
                   "benchmarks side by side on one machine, each on its own GPUs, each need their own")  # fmt: skip
    v.add_argument("--batches", default="1,8,64,256", help="batch sizes whose greedy tokens and logprobs are compared")
    v.add_argument("--logprobs", type=int, default=20, help="top log-probabilities compared at every token (0: none)")
    v.add_argument("--repeat", action="store_true", help="every run asks its compared batches twice and says "
                   "whether its own two answers are bit-identical (within one process; an engine with a prefix "
                   "cache answers the second from it)")  # fmt: skip
    v.add_argument("--stacks", action="store_true", help="every process of every run samples its threads' Python "
                   "stacks (OUT/<tag>/stacks-<run>/); the report lists the stacks that held a thread longest in "
                   "each run's start-up and first request")  # fmt: skip
    v.add_argument("--digests", action="store_true", help="every engine process fingerprints each attention layer's "
                   "query, key, value and output (vLLM's FlashAttention, FlashInfer and Triton backends) and each "
                   "matrix product the compiled model runs outside graphs, its input and output "
                   "(OUT/<tag>/digests-<run>/); the report names the first call where each run differs from the "
                   "reference run. Synchronises the device at every call: not for timing")  # fmt: skip
    v.add_argument("--decode-batches", default="1,32,256", help="batch sizes of the decode-throughput comparison")
    v.add_argument("--decode-steps", type=int, help="tokens a prompt in each decode measurement (vllm 256, sglang 512)")
    v.add_argument("--reps", type=int, default=7, help="alternating repetitions of each throughput measurement")
    v.add_argument("--starts", type=int, default=1, help="warm native and LOAD each started this many times, "
                   "alternately, each alone (the starts before the compared pair answer their first request only); "
                   "the start-up targets are judged on the medians, and the report lists every start")  # fmt: skip
    v.add_argument("--seconds", type=float, help="the whole benchmark's bound: runs that would not fit are skipped, "
                   "the steady-state phase shares what is left, and the report holds what ran")  # fmt: skip
    v.add_argument("--plugin-env", default="", help="the plugin's settings for the SAVE and LOAD runs, comma-separated "
                   "NAME=VALUE without the FOUNDRY_<ENGINE>_ prefix, e.g. WARM_UP=1 (the engines are started with "
                   "none of the caller's own)")  # fmt: skip
    v.add_argument("--env", default="", help="environment for every run alike, comma-separated NAME=VALUE (e.g. "
                   "TORCHINDUCTOR_DETERMINISTIC=1: natives then compare with each other bit for bit); the numerics "
                   f"switches {', '.join(NUMERICS_SWITCHES)} set in the caller's environment are recorded as if given "
                   "here, and the report names them")  # fmt: skip
    v.add_argument("--native-env", default="", help="environment for the native runs only, comma-separated NAME=VALUE "
                   "(e.g. NCCL_RUNTIME_CONNECT=1 at --tp 2, to time what a setting Foundry needs costs natively; the "
                   "reference then runs otherwise than SAVE and LOAD, and the report says so)")  # fmt: skip
    v.add_argument(
        "--tp",
        type=int,
        default=1,
        help="GPUs per engine, tensor parallel (NCCL all-reduces inside the "
        "graphs; every run, native too, with the NCCL settings SAVE and LOAD need)",
    )
    v.add_argument("--expert-parallel", action="store_true", help="the experts split over the --tp GPUs (vllm: "
                   "--enable-expert-parallel; sglang: ep_size = --tp), data parallel 1: their outputs summed by "
                   "NCCL's all-reduce")  # fmt: skip
    v.add_argument("--custom-all-reduce", action="store_true", help="--tp 2 or more: keep the engine's custom "
                   "all-reduce on (its default; the plugin writes its peer table again at LOAD) rather than NCCL's "
                   "inside the graphs")  # fmt: skip
    v.add_argument("--runner", default="v2", help="vllm's model runner: v2 (default) and/or v1, comma-separated")
    v.add_argument("--cudagraph-mode", default="default", help="vllm's cudagraph_mode (default: FULL_AND_PIECEWISE)")
    v.add_argument("--compilation-config", default="", help="vllm: more of its compilation config as a JSON "
                   "object, for every run alike, e.g. "
                   "'{\"inductor_compile_config\": {\"benchmark_combo_kernel\": false}}'")  # fmt: skip
    v.add_argument("--kernel-config", default="", help="vllm: its kernel config as a JSON object, for every run "
                   "alike, e.g. '{\"enable_flashinfer_autotune\": false}'")  # fmt: skip
    v.add_argument("--gpu-memory-utilization", type=float, default=0.35, help="vllm, per engine (two side by side)")
    v.add_argument("--mem-fraction-static", type=float, help="sglang, per engine (two side by side; default 0.35)")
    v.add_argument("--engine-args", default="{}", help="sglang: more Engine keyword arguments as a JSON object "
                   "(server flags), e.g. '{\"cuda_graph_max_bs_prefill\": 1024}' for fewer prefill graphs")  # fmt: skip
    p.set_defaults(func=_run)
