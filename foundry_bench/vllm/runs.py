"""The vLLM benchmark's runs (foundry_bench/serving/runs.py says their order and what is measured): vLLM 0.26
as ``LLM()`` or ``vllm serve``, its compile cache cold for native_cold and warm after, empty for the fresh-node
runs (with those, every run sets VLLM_USE_MEGA_AOT_ARTIFACT=1: the compile cache SAVE packs)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from foundry_bench.serving.bench import run_bench
from foundry_bench.serving.process import Engine, free_port
from foundry_bench.serving.runs import MODES, BenchRuns, ServingConfig
from foundry_bench.serving.stacksite import foundry_capture_timer as capture_timer
from foundry_bench.serving.stacksite import foundry_memory_profile as memory_profile
from foundry_bench.serving.stats import compare_tokens

from .engines import OfflineEngine, ServerEngine

__all__ = ["MODES", "VllmBenchConfig", "compare_tokens", "log_numbers", "run_vllm_bench"]

ENV = {
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
    "VLLM_LOGGING_LEVEL": "INFO",
}

# vLLM's compile cache moves to a fresh node only as its mega AOT artifact (foundry/integration/vllm/caches.py)
PACK_ENV = {"VLLM_USE_MEGA_AOT_ARTIFACT": "1"}

# vLLM's /pause and /resume (engines.py holds a batch's prompts with them) exist in its development mode only, which
# is no compile factor (vllm/envs.py compile_factors): the compiled model's cache key stays the same.
SERVER_ENV = {"VLLM_SERVER_DEV_MODE": "1"}

# Two of vLLM's settings that key its compiled model (vllm.envs.compile_factors) are paths it derives from the home
# and XDG folders: its config root and XLA's cache. A fresh node has its folders empty but at the paths SAVE's
# machine had; the fresh runs move the home instead, so every run of a configuration is given the same two
# values (folders in the benchmark's own), and the fresh runs' keys stay SAVE's. Without this, LOAD on a "fresh
# node" compiled again (23.7 s, Qwen3-0.6B, H200, 43711a5).
PINNED_PATHS = {"VLLM_CONFIG_ROOT": "vllm-config", "VLLM_XLA_CACHE_PATH": "vllm-xla-cache"}

# Figures vLLM logs, by name: the pattern and whether repeated lines add up.
LOG_NUMBERS: dict[str, tuple[str, bool]] = {
    "model_load_s": (r"Model loading took [\d.]+ GiB(?: memory)? and ([\d.]+) seconds", False),
    "compile_s": (r"torch\.compile (?:took|takes) ([\d.]+) s", True),
    # torch.compile's two parts vLLM logs: Dynamo tracing the model, then the compiled graphs loaded from the cache
    # or compiled (each compile range); and the profile forward that follows (under LOAD with WARM_UP too).
    "dynamo_s": (r"Dynamo bytecode transform time: ([\d.]+) s", True),
    "compiled_graphs_s": (
        r"(?:Directly load the compiled graph\(s\) for compile range .*? from the cache, took|Compiling a graph for "
        r"compile range .*? takes) ([\d.]+) s",
        True,
    ),
    "profile_run_s": (r"Initial profiling/warmup run took ([\d.]+) s", False),
    "capture_s": (r"Graph capturing finished in ([\d.]+) secs", False),
    # The native runs' capture to the millisecond (stacksite/foundry_capture_timer.py), where vLLM rounds it.
    "capture_exact_s": (r"foundry bench: capture_model took ([\d.]+) s", False),
    "init_engine_s": (r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s", False),
    # The memory profile's outcome and capture's memory: a SAVE that changed the engine shows here first.
    "kv_cache_tokens": (r"GPU KV cache size: ([\d,]+) tokens", False),
    "capture_gib": (r"Graph capturing finished in [\d.]+ secs, took ([\d.]+) GiB", False),
}
# vLLM's memory profile to the byte, as SAVE's plugin and the native runs' site hook log it
# (foundry/integration/vllm/memreport.py, stacksite/foundry_memory_profile.py): the figures of a KV cache that
# came out otherwise. LOAD does not profile, so it logs none.
LOG_NUMBERS.update(
    {f"{key}_bytes": (rf"vLLM's memory profile, bytes: .*\b{key}=(\d+)", False) for key in memory_profile.KEYS}
)


@dataclass(frozen=True)
class VllmBenchConfig(ServingConfig):
    api: str = "llm"  # "llm" (offline LLM()) or "serve" (vllm serve)
    runner: str = "v2"
    cudagraph_mode: str = "default"  # vLLM's own (FULL_AND_PIECEWISE) unless named
    # More of vLLM's compilation config, for every run alike, as canonical JSON ("": none), e.g.
    # '{"inductor_compile_config": {"benchmark_combo_kernel": false}}' to take one of vLLM's per-process timed
    # choices away when a shape's native runs disagree with each other
    compilation: str = ""
    kernel: str = ""  # vLLM's kernel config alike, e.g. '{"enable_flashinfer_autotune": false}'
    gpu_memory_utilization: float = 0.35
    max_model_len: int = 2048
    expert_parallel: bool = False  # vLLM's --enable-expert-parallel (over the --tp group)
    archive: Path = Path("/tmp/foundry-vllm-archive")
    models: Path = Path("/tmp/foundry-vllm-models")

    def tag(self) -> str:
        tp = (f"-tp{self.tp}" if self.tp > 1 else "") + ("-ep" if self.expert_parallel else "")
        tp += "-car" if self.custom_all_reduce and self.tp > 1 else ""
        # another compilation or kernel config is another configuration: its files beside, not over, the default's
        extra = self.compilation + "|" + self.kernel if self.kernel else self.compilation
        cc = f"-cc{hashlib.sha256(extra.encode()).hexdigest()[:8]}" if extra else ""
        return f"vllm-{self.shape}-{self.api}-{self.runner}-{self.cudagraph_mode.lower()}{tp}{cc}"

    def compilation_config(self) -> dict[str, Any]:
        """vLLM's compilation config for every run: ``compilation`` with ``cudagraph_mode`` where one is named."""
        config: dict[str, Any] = json.loads(self.compilation) if self.compilation else {}
        if self.cudagraph_mode != "default":
            config["cudagraph_mode"] = self.cudagraph_mode
        return config


def log_numbers(text: str) -> dict[str, float]:
    """The figures vLLM logged (LOG_NUMBERS), the last of each, or the sum where they add up."""
    out = {}
    for name, (pattern, summed) in LOG_NUMBERS.items():
        values = [float(v.replace(",", "")) for v in re.findall(pattern, text)]
        if values:
            out[name] = sum(values) if summed else values[-1]
    return out


class _Runs(BenchRuns):
    engine = "vllm"
    group = "vllm.general_plugins"
    env_defaults = ENV
    profile_keys = ("kv_cache_tokens", "capture_gib", *(f"{key}_bytes" for key in memory_profile.KEYS))
    pack_env = PACK_ENV
    native_site_env: ClassVar[dict[str, str]] = {capture_timer.ENV: "1", memory_profile.ENV: "1"}
    capture_patterns = (LOG_NUMBERS["capture_exact_s"][0],)  # the native runs' timer, every rank's worker
    # Each worker's own lines (whole seconds): its weights, then torch.compile's end (the artifact loaded).
    arrival_markers: ClassVar[dict[str, str]] = {
        "weights loaded": r"Model loading took",
        "torch.compile's graphs loaded": r"Directly load AOT",
    }

    def __init__(self, cfg: VllmBenchConfig) -> None:
        super().__init__(cfg)
        self.vcfg = cfg
        if cfg.tp > 1 and not cfg.custom_all_reduce:
            # NCCL's all-reduce alone: torch symmetric memory's off too (with multicast off vLLM switches it off)
            self.env["VLLM_ALLREDUCE_USE_SYMM_MEM"] = "0"
        self.env.update({name: str(self.out / sub) for name, sub in PINNED_PATHS.items()})
        if cfg.runner == "v1":
            self.env["VLLM_USE_V2_MODEL_RUNNER"] = "0"

    def log_numbers(self, text: str) -> dict[str, float]:
        return log_numbers(text)

    def config_doc(self) -> dict[str, Any]:
        # Recorded, not assumed by the report: documents of earlier commits were measured without it.
        return {**super().config_doc(), "batches_held": self.vcfg.api == "serve"}

    def start(self, mode: str, env: dict[str, str], prefix: list[str], log: Path) -> Engine:
        cfg = self.vcfg
        if cfg.api == "llm":
            kwargs: dict[str, Any] = {
                "model": str(self.model),
                "load_format": "dummy",
                "skip_tokenizer_init": True,
                "seed": 0,
                "max_model_len": cfg.max_model_len,
                "gpu_memory_utilization": cfg.gpu_memory_utilization,
                "enable_prefix_caching": False,
            }
            if cfg.compilation_config():
                kwargs["compilation_config"] = cfg.compilation_config()
            if cfg.kernel:
                kwargs["kernel_config"] = json.loads(cfg.kernel)
            if cfg.tp > 1:  # without the custom all-reduce, NCCL all-reduces inside the graphs
                kwargs.update(tensor_parallel_size=cfg.tp, disable_custom_all_reduce=not cfg.custom_all_reduce)
            if cfg.expert_parallel:
                kwargs["enable_expert_parallel"] = True
            return OfflineEngine(kwargs, prefix, env, log, self.cwd)
        env = {**env, **SERVER_ENV}
        args = [str(self.model), "--load-format", "dummy", "--skip-tokenizer-init", "--seed", "0"]
        args += ["--max-model-len", str(cfg.max_model_len), "--no-enable-prefix-caching"]
        args += ["--gpu-memory-utilization", str(cfg.gpu_memory_utilization)]
        if cfg.compilation_config():
            args += ["--compilation-config", json.dumps(cfg.compilation_config())]
        if cfg.kernel:
            args += ["--kernel-config", cfg.kernel]
        if cfg.tp > 1:
            args += ["--tensor-parallel-size", str(cfg.tp)]
            args += [] if cfg.custom_all_reduce else ["--disable-custom-all-reduce"]
        if cfg.expert_parallel:
            args += ["--enable-expert-parallel"]
        return ServerEngine(args, free_port(), prefix, env, log, self.cwd)


def run_vllm_bench(cfg: VllmBenchConfig) -> dict[str, Any]:
    """Runs the configuration and writes ``OUT/<tag>.json``, the table and the plot; returns the document."""
    from .report import write_report

    return run_bench(_Runs(cfg), write_report)
