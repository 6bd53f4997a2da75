"""The vLLM benchmark's runs: native and Foundry processes of one configuration, on one GPU, in one call.

Order (each a fresh process tree, on one machine, one after another):

  native_cold   vLLM as its users start it, compile cache as found (empty on a fresh machine); tokens
  save          under Foundry, FOUNDRY_VLLM_MODE=save: vLLM starts as usual and Foundry writes the archive
  native        vLLM again, its compile cache now warm: the baseline LOAD is compared with
  load          under Foundry, FOUNDRY_VLLM_MODE=load, beside the warm native process

Every process answers the same greedy token requests (``workload.token_requests``); LOAD's and SAVE's
tokens must equal native's. Then, with the warm native process and the LOAD process both up, decode
throughput and prefill time are measured alternately, one request to each in turn, so that both see the
same machine state; each figure is the median of its repetitions.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .engines import Engine, EngineError, OfflineEngine, ServerEngine
from .shapes import SHAPES, make_model
from .workload import decode_request, prefill_request, token_requests

__all__ = ["MODES", "VllmBenchConfig", "compare_tokens", "log_numbers", "plugin_shim", "run_vllm_bench"]

MODES = ("native_cold", "save", "native", "load")

ENV = {
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
    "VLLM_LOGGING_LEVEL": "INFO",
}

# Figures vLLM logs, by name: the pattern and whether repeated lines add up.
LOG_NUMBERS: dict[str, tuple[str, bool]] = {
    "model_load_s": (r"Model loading took [\d.]+ GiB(?: memory)? and ([\d.]+) seconds", False),
    "compile_s": (r"torch\.compile (?:took|takes) ([\d.]+) s", True),
    "capture_s": (r"Graph capturing finished in ([\d.]+) secs", False),
    "init_engine_s": (r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s", False),
}


@dataclass(frozen=True)
class VllmBenchConfig:
    out: Path
    shape: str = "qwen3-0.6b"
    api: str = "llm"  # "llm" (offline LLM()) or "serve" (vllm serve)
    runner: str = "v2"
    cudagraph_mode: str = "default"  # vLLM's own (FULL_AND_PIECEWISE) unless named
    modes: tuple[str, ...] = MODES
    batches: tuple[int, ...] = (1, 8, 64, 256)
    max_tokens: int = 32
    decode_batches: tuple[int, ...] = (1, 32, 256)
    decode_steps: int = 256
    reps: int = 7
    prefill_tokens: int = 2000
    gpu_memory_utilization: float = 0.35
    max_model_len: int = 2048
    timeout: float = 420
    archive: Path = Path("/tmp/foundry-vllm-archive")
    models: Path = Path("/tmp/foundry-vllm-models")
    extra_env: dict[str, str] = field(default_factory=dict)

    def tag(self) -> str:
        return f"vllm-{self.shape}-{self.api}-{self.runner}-{self.cudagraph_mode.lower()}"


def log_numbers(text: str) -> dict[str, float]:
    """The figures vLLM logged (LOG_NUMBERS), the last of each, or the sum where they add up."""
    out = {}
    for name, (pattern, summed) in LOG_NUMBERS.items():
        values = [float(v) for v in re.findall(pattern, text)]
        if values:
            out[name] = sum(values) if summed else values[-1]
    return out


def compare_tokens(reference: list[list[list[int]]], other: list[list[list[int]]]) -> dict[str, Any]:
    """Per request (one per batch size), how many sequences are identical and the first that is not."""
    per = []
    for ref, got in zip(reference, other, strict=False):
        same = sum(a == b for a, b in zip(ref, got, strict=False))
        first = next((i for i, (a, b) in enumerate(zip(ref, got, strict=False)) if a != b), None)
        per.append({"batch": len(ref), "identical": same, "of": len(ref), "first_diff": first})
    identical = len(reference) == len(other) and all(p["identical"] == p["of"] for p in per)
    return {"identical": identical, "requests": per}


def plugin_shim(root: Path, engine: str = "vllm", group: str = "vllm.general_plugins") -> Path | None:
    """A dist-info declaring Foundry's ``group`` entry point (``foundry.integration.<engine>:register``), for a
    foundry that is importable but not pip-installed (the GPU machine runs the checkout); None when the entry
    point is installed."""
    from importlib.metadata import entry_points

    plugin = f"foundry.integration.{engine}"
    if any(ep.value.startswith(plugin) for ep in entry_points(group=group)):
        return None
    info = root / f"foundry_{engine}_plugin-0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: foundry-{engine}-plugin\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(f"[{group}]\nfoundry = {plugin}:register\n")
    return root


class _Runs:
    def __init__(self, cfg: VllmBenchConfig) -> None:
        self.cfg = cfg
        self.out = (cfg.out / cfg.tag()).resolve()  # this configuration's logs and the plugin's reports
        self.out.mkdir(parents=True, exist_ok=True)
        self.model = make_model(cfg.models / cfg.shape, cfg.shape)
        repo = Path(__file__).resolve().parents[3]
        shim = plugin_shim(Path("/tmp/foundry-vllm-entrypoint"))
        self.cwd = repo
        paths = [str(repo), *([str(shim)] if shim else []), os.environ.get("PYTHONPATH", "")]
        self.env = {**os.environ, **ENV, **cfg.extra_env, "PYTHONPATH": ":".join(p for p in paths if p)}
        for name in [n for n in self.env if n.startswith("FOUNDRY_VLLM_")]:
            del self.env[name]
        if cfg.runner == "v1":
            self.env["VLLM_USE_V2_MODEL_RUNNER"] = "0"
        self.port = 8100
        self.started: list[Engine] = []  # every engine started, stopped at the end whatever happened
        self.results: dict[str, dict[str, Any]] = {}
        self.measured: dict[str, Any] = {}

    def start(self, mode: str) -> Engine:
        cfg = self.cfg
        env = dict(self.env)
        prefix: list[str] = []
        if mode in ("save", "load"):
            report = self.out / f"report-{mode}.json"
            report.unlink(missing_ok=True)
            env.update(FOUNDRY_VLLM_MODE=mode, FOUNDRY_VLLM_ARCHIVE=str(cfg.archive), FOUNDRY_VLLM_REPORT=str(report))
            prefix = [sys.executable, "-m", "foundry.cli", "run", "--"]
        log = self.out / f"{mode}.log"
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
            if cfg.cudagraph_mode != "default":
                kwargs["compilation_config"] = {"cudagraph_mode": cfg.cudagraph_mode}
            return OfflineEngine(kwargs, prefix, env, log, self.cwd)
        args = [str(self.model), "--load-format", "dummy", "--skip-tokenizer-init", "--seed", "0"]
        args += ["--max-model-len", str(cfg.max_model_len), "--no-enable-prefix-caching"]
        args += ["--gpu-memory-utilization", str(cfg.gpu_memory_utilization)]
        if cfg.cudagraph_mode != "default":
            args += ["--compilation-config", json.dumps({"cudagraph_mode": cfg.cudagraph_mode})]
        self.port += 1
        return ServerEngine(args, self.port, prefix, env, log, self.cwd)

    def bring_up(self, mode: str) -> tuple[Engine, dict[str, Any]]:
        """Starts ``mode``, waits until it serves, times its first request, and asks it the token requests."""
        print(f"[vllm bench] {mode}: starting ({self.cfg.api}, {self.cfg.shape})", flush=True)
        engine = self.start(mode)
        self.started.append(engine)
        result: dict[str, Any] = {"mode": mode, "started_at": engine.started_at}
        try:
            result.update(engine.ready(self.cfg.timeout))
            _, first = engine.generate(decode_request(1, 16))
            result["first_request_s"] = first
            result["first_answer_wall_s"] = engine.seconds()
            result["tokens"] = [engine.generate(r)[0] for r in token_requests(list(self.cfg.batches),
                                                                             self.cfg.max_tokens)]  # fmt: skip
        except EngineError as exc:
            result["error"] = str(exc)
            print(f"[vllm bench] {mode}: FAILED {str(exc)[:2000]}", flush=True)
        print(f"[vllm bench] {mode}: ready after {result.get('ready_wall_s', float('nan')):.1f} s", flush=True)
        return engine, result

    def finish(self, engine: Engine, result: dict[str, Any]) -> dict[str, Any]:
        result["rc"] = engine.stop()
        text = engine.log_path.read_text(errors="replace")
        result.update(log_numbers(text))
        report = self.out / f"report-{result['mode']}.json"
        if report.is_file():
            result["plugin"] = json.loads(report.read_text())
        elif result["mode"] in ("save", "load") and "error" not in result:
            result["error"] = "the Foundry plugin wrote no report: vLLM ran without it (entry point not found?)"
        return result

    def alternate(self, native: Engine, load: Engine) -> dict[str, Any]:
        """Decode tokens/s per batch size and prefill seconds, asked of both engines in turn."""
        cfg = self.cfg
        out: dict[str, Any] = {"decode": {}, "prefill": {}}
        engines = {"native": native, "load": load}
        for batch in cfg.decode_batches:
            request = decode_request(batch, cfg.decode_steps)
            for engine in engines.values():
                engine.generate(request)  # warm: the first call after start-up is not steady state
            rates: dict[str, list[float]] = {"native": [], "load": []}
            for rep in range(cfg.reps):
                for name in ("native", "load") if rep % 2 == 0 else ("load", "native"):
                    _, seconds = engines[name].generate(request)
                    rates[name].append(batch * cfg.decode_steps / seconds)
            out["decode"][str(batch)] = _summary(rates)
            print(f"[vllm bench] decode batch {batch}: {out['decode'][str(batch)]}", flush=True)
        request = prefill_request(cfg.prefill_tokens)
        times: dict[str, list[float]] = {"native": [], "load": []}
        for engine in engines.values():
            engine.generate(request)
        for rep in range(cfg.reps):
            for name in ("native", "load") if rep % 2 == 0 else ("load", "native"):
                times[name].append(engines[name].generate(request)[1])
        out["prefill"] = {"tokens": cfg.prefill_tokens, **_summary(times)}
        print(f"[vllm bench] prefill {cfg.prefill_tokens} tokens: {out['prefill']}", flush=True)
        return out

    def run(self) -> None:
        cfg = self.cfg
        if "save" in cfg.modes:
            shutil.rmtree(cfg.archive, ignore_errors=True)
        for mode in ("native_cold", "save"):
            if mode in cfg.modes:
                engine, result = self.bring_up(mode)
                self.results[mode] = self.finish(engine, result)
        live: dict[str, tuple[Engine, dict[str, Any]]] = {}
        for mode in ("native", "load"):
            if mode in cfg.modes:
                live[mode] = self.bring_up(mode)
                self.results[mode] = live[mode][1]
        if set(live) == {"native", "load"} and not any("error" in r for _, r in live.values()):
            try:
                self.measured = self.alternate(live["native"][0], live["load"][0])
            except EngineError as exc:
                self.measured = {"error": str(exc)}
        for mode, (engine, result) in live.items():
            self.results[mode] = self.finish(engine, result)

    def document(self) -> dict[str, Any]:
        """What ran so far (all of it, unless the benchmark was stopped) with the tokens compared."""
        results = self.results
        reference = next((results[m]["tokens"] for m in ("native", "native_cold") if "tokens" in results.get(m, {})),
                         None)  # fmt: skip
        compare = {
            mode: compare_tokens(reference, r["tokens"]) if reference is not None and "tokens" in r
            else {"identical": False, "why": r.get("error", "no tokens")}
            for mode, r in results.items() if mode in ("save", "load", "native_cold")
        }  # fmt: skip
        return {
            "machine": _machine(),
            "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self.cfg).items()},
            "model": SHAPES[self.cfg.shape],
            "results": results,
            "compare": compare,
            "measured": self.measured,
        }


def _machine() -> dict[str, str]:
    """The GPU and driver as nvidia-smi names them (empty where there is none)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return {}
    name, _, driver = out.splitlines()[0].partition(",") if out.strip() else ("", "", "")
    return {"gpu": name.strip(), "driver": driver.strip()}


def _summary(values: dict[str, list[float]]) -> dict[str, Any]:
    """Medians, the spread of each side ((max - min) / median, and the interquartile range / median, which
    one stray repetition does not move), and LOAD's median over native's. Repetition i of both sides ran
    back to back, so their ratios are paired too: the median of the paired ratios is the other estimate."""
    med = {k: statistics.median(v) for k, v in values.items() if v}
    spread = {k: (max(v) - min(v)) / statistics.median(v) for k, v in values.items() if v}
    iqr = {k: _iqr(v) / statistics.median(v) for k, v in values.items() if len(v) >= 4}
    ratio = med["load"] / med["native"] if med.get("native") else None
    pairs = [b / a for a, b in zip(values.get("native", []), values.get("load", []), strict=False) if a]
    return {
        "median": med,
        "spread": spread,
        "iqr": iqr,
        "load_over_native": ratio,
        "paired_ratio_median": statistics.median(pairs) if pairs else None,
        "values": values,
    }


def _iqr(values: list[float]) -> float:
    q = statistics.quantiles(values, n=4)
    return q[2] - q[0]


def run_vllm_bench(cfg: VllmBenchConfig) -> dict[str, Any]:
    """Runs the configuration and writes ``OUT/<tag>.json``, the table and the plot; returns the document.

    The engines run in process groups of their own (so that stopping one ends its engine core and workers);
    a SIGTERM to the benchmark stops every engine it started before it exits."""
    from .report import write_report

    if cfg.shape not in SHAPES:
        raise ValueError(f"unknown shape {cfg.shape!r}; choose from {sorted(SHAPES)}")
    cfg.out.mkdir(parents=True, exist_ok=True)
    runs = _Runs(cfg)

    def terminated(signum: int, frame: Any) -> None:
        raise SystemExit(f"foundry bench: signal {signum}; stopping the engines")

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        runs.run()
    except SystemExit as exc:
        runs.measured.setdefault("error", str(exc))
    finally:
        for engine in runs.started:
            engine.stop()
        signal.signal(signal.SIGTERM, previous)
    doc = runs.document()
    write_report(doc, cfg.out / cfg.tag())
    return doc
