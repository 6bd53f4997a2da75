"""The SGLang benchmark's runs (foundry_bench/serving/runs.py says their order, what is measured and how the
time budget is kept): SGLang 0.5.17 as ``sglang.Engine`` or ``python -m sglang.launch_server``, on a
weightless model folder (``load_format="dummy"``), triton attention (the GPU bundle has no FlashAttention-3),
CUDA graphs as SGLang sizes them by default (36 decode batch sizes up to 256; 58 prefill token counts up to
8192, breakable) unless ``engine_args`` narrows them. Its Triton and JIT caches are cold for native_cold on a
fresh machine and warm after."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from foundry_bench.serving.bench import run_bench
from foundry_bench.serving.process import Engine, free_port
from foundry_bench.serving.runs import MODES, BenchRuns, ServingConfig

from .engines import EngineProcess, ServerProcess
from .logsteps import log_steps
from .targets import targets

__all__ = ["APIS", "MODES", "NEEDS", "SglangBenchConfig", "log_numbers", "run_sglang_bench"]

APIS = ("engine", "serve")
ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
    "SGLANG_IS_FLASHINFER_AVAILABLE": "false",
    "SGLANG_LOG_MS": "1",  # millisecond timestamps: the start-up's steps from the log (logsteps.py)
}
# What SGLang logs, by name: the last value of each.
LOG_NUMBERS = {
    "distributed_s": r"Init torch distributed ends\. elapsed=([\d.]+) s",
    "weights_s": r"Load weight end\. elapsed=([\d.]+) s",
    "prefill_graphs_s": r"Capture target prefill CUDA graph end\. elapsed=([\d.]+) s",
    "decode_graphs_s": r"Capture target decode CUDA graph end\. elapsed=([\d.]+) s",
    # its "Engine startup timings": the scheduler process's start-up from its own start, graphs included
    "scheduler_s": r"Engine startup timings \(s\):.*?scheduler_e2e=([\d.]+)",
    "max_total_num_tokens": r"max_total_num_tokens=(\d+)",
    "max_running_requests": r"max_running_requests=(\d+)",
}
# Seconds a run needs at least, on an H100 with the 0.6B shape: import ~27 s cold; native Engine() ~110-130 s
# on a cold machine (58 prefill graph sizes ~75 s), SAVE ~40 s and LOAD ~26 s after it; tokens and stopping.
NEEDS = {"native_cold": 170.0, "save": 75.0, "native_fresh": 170.0, "load_fresh": 60.0, "native": 65.0, "load": 50.0}
MAX_MEM_FRACTION = 0.45  # native and LOAD run side by side on one GPU


@dataclass(frozen=True)
class SglangBenchConfig(ServingConfig):
    api: str = "engine"  # "engine" (sglang.Engine) or "serve" (python -m sglang.launch_server)
    first_tokens: int = 1  # the first request: the first token
    decode_steps: int = 512
    mem_fraction_static: float = 0.35  # per engine: two run side by side
    context_length: int = 2048
    engine_args: dict[str, Any] = field(default_factory=dict)  # more Engine keyword arguments (server flags)
    archive: Path = Path("/tmp/foundry-sglang-archive")
    models: Path = Path("/tmp/foundry-sglang-models")

    def tag(self) -> str:
        ep = "-ep" if int(self.engine_args.get("ep_size", 1) or 1) > 1 else ""
        car = "-car" if self.custom_all_reduce else ""
        return f"sglang-{self.shape}-{self.api}" + (f"-tp{self.tp}" if self.tp > 1 else "") + ep + car

    def problems(self) -> list[str]:
        """What is wrong with these settings, each named (empty when they can run)."""
        out = []
        if self.api not in APIS:
            out.append(f"unknown --api {self.api!r} (engine or serve)")
        if not 0 < self.mem_fraction_static <= MAX_MEM_FRACTION:
            out.append(f"--mem-fraction-static {self.mem_fraction_static} must be above 0 and at most "
                       f"{MAX_MEM_FRACTION}: native and LOAD run side by side on one GPU")  # fmt: skip
        # decode: 8-token prompts; token requests: prompts of up to 199 tokens; prefill: one token after it
        longest = max(self.decode_steps + 8, self.max_tokens + 199 if self.batches else 0, self.prefill_tokens + 1)
        if longest > self.context_length:
            out.append(f"a request needs {longest} tokens of context, more than --context-length {self.context_length}")
        fixed = {"model_path", "load_format", "attention_backend", "skip_tokenizer_init", "random_seed"}
        out += [
            f"--engine-args may not set {k!r} (the benchmark sets it)" for k in sorted(fixed & set(self.engine_args))
        ]
        return out

    def kwargs(self, model: Path) -> dict[str, Any]:
        """``sglang.Engine``'s keyword arguments (the server gets them as flags)."""
        return {
            "model_path": str(model),
            "attention_backend": "triton",
            "load_format": "dummy",
            "skip_tokenizer_init": True,
            "random_seed": 0,
            "mem_fraction_static": self.mem_fraction_static,
            "context_length": self.context_length,
            "log_level": "info",  # the figures the benchmark reads are logged at info
            # Tensor parallel with NCCL as the only all-reduce in the graphs, unless the custom one is asked for
            **({"tp_size": self.tp, "disable_custom_all_reduce": not self.custom_all_reduce} if self.tp > 1 else {}),
            **self.engine_args,
        }


def log_numbers(text: str) -> dict[str, float]:
    """The figures SGLang logged (LOG_NUMBERS), the last of each, and its start-up's steps (logsteps.py)."""
    out = {}
    for name, pattern in LOG_NUMBERS.items():
        values = re.findall(pattern, text)
        if values:
            out[name] = float(values[-1])
    out.update(log_steps(text))
    return out


class _Runs(BenchRuns):
    profile_keys = ("max_total_num_tokens",)
    engine = "sglang"
    group = "sglang.srt.plugins"
    env_defaults = ENV
    needs = NEEDS
    steady_needs = 20.0
    capture_patterns = (LOG_NUMBERS["prefill_graphs_s"], LOG_NUMBERS["decode_graphs_s"])
    # Each scheduler's own lines (milliseconds): the first collective's set-up, then its weights.
    arrival_markers: ClassVar[dict[str, str]] = {
        "torch.distributed begins": r"Init torch distributed begin",
        "weights loaded": r"Load weight end",
    }

    def __init__(self, cfg: SglangBenchConfig) -> None:
        super().__init__(cfg)
        self.scfg = cfg

    def log_numbers(self, text: str) -> dict[str, float]:
        return log_numbers(text)

    def start(self, mode: str, env: dict[str, str], prefix: list[str], log: Path) -> Engine:
        kwargs = self.scfg.kwargs(self.model)
        if self.scfg.api == "engine":
            return EngineProcess(kwargs, prefix, env, log, self.cwd)
        return ServerProcess(kwargs, free_port(), prefix, env, log, self.cwd)

    def document(self) -> dict[str, Any]:
        doc = super().document()
        doc["engine_kwargs"] = self.scfg.kwargs(self.model)
        doc["targets"] = targets(doc)
        return doc


def run_sglang_bench(cfg: SglangBenchConfig) -> dict[str, Any]:
    """Runs the configuration and writes ``OUT/<tag>.json`` (after every run too), the table and the plot;
    returns the document. Raises ValueError naming what is wrong with ``cfg``."""
    from .report import write_report

    problems = cfg.problems()
    if problems:
        raise ValueError("; ".join(problems))
    return run_bench(_Runs(cfg), write_report)
