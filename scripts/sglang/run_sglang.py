#!/usr/bin/env python3
"""SGLang 0.5.17 with and without Foundry, on the GPU machine, in one call: native, SAVE and LOAD, each a fresh
process, for ``sglang.Engine`` and then for ``python -m sglang.launch_server``; greedy token IDs compared.

    python3 scripts/sglang/run_sglang.py [--out DIR] [--modes native,save,load] [--serve-modes load,native]
        [--batches 1,8,64] [--max-tokens 32] [--decode-batches 1,32,256] [--decode-steps 64]
        [--engine-args JSON] [--budget 520]

Every engine is ``sglang.Engine(model_path, attention_backend="triton", load_format="dummy",
skip_tokenizer_init=True, random_seed=0, mem_fraction_static=0.5, context_length=2048)`` (the server: the
same flags) plus ``--engine-args`` (default ``{"cuda_graph_max_bs_prefill": 1024}``: 38 prefill graphs up to
1024 tokens instead of SGLang's 58 up to 8192, so that the call fits its 10 minutes; ``'{}'`` for SGLang's
defaults), on a weightless Qwen3-0.6B-shaped model folder. SAVE and LOAD run under ``python -m foundry.cli run
--`` (libfoundry preloaded, inherited by SGLang's scheduler process) with FOUNDRY_SGLANG_MODE=save|load; the
plugin is found through the ``sglang.srt.plugins`` entry point (a shim dist-info on PYTHONPATH when foundry
is not pip-installed). Each process is asked: its first request (1 prompt, 1 token; the first token), the
token requests (prompts of 4..199 tokens at each batch size, ``--max-tokens`` greedy tokens), then decode
tokens/s per batch size (``--decode-steps`` tokens less one, timed as the difference of two requests). The
server's LOAD uses the Engine's archive when the settings agree (the plugin refuses it by name otherwise) and
runs before the native server, whose tokens, when it fits, are the server's reference (the native Engine's
otherwise); ``--serve-modes save,load,native`` saves one of its own.

Writes DIR/sglang-foundry.json, DIR/logs/<mode>.log and the plugin's report-<mode>.json, and prints a summary
last. A mode is skipped, and said so, when less of ``--budget`` seconds is left than it needs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from foundry.bench.vllm.engines import Engine, EngineError, OfflineEngine, ServerEngine  # noqa: E402
from foundry.bench.vllm.runs import compare_tokens, plugin_shim  # noqa: E402
from foundry.bench.vllm.shapes import make_model  # noqa: E402
from foundry.bench.vllm.workload import Request, decode_request, token_requests  # noqa: E402

CHILD = Path(__file__).resolve().parent / "engine_child.py"
BASE = {
    "attention_backend": "triton",  # the bundle has no FlashAttention-3, SGLang's Hopper default
    "load_format": "dummy",
    "skip_tokenizer_init": True,
    "random_seed": 0,
    "mem_fraction_static": 0.5,
    "context_length": 2048,
    "log_level": "info",
}
ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
    "SGLANG_IS_FLASHINFER_AVAILABLE": "false",
}
# What SGLang logs, by name: the last value of each.
LOG_NUMBERS = {
    "distributed_s": r"Init torch distributed ends\. elapsed=([\d.]+) s",
    "weights_s": r"Load weight end\. elapsed=([\d.]+) s",
    "prefill_graphs_s": r"Capture target prefill CUDA graph end\. elapsed=([\d.]+) s",
    "decode_graphs_s": r"Capture target decode CUDA graph end\. elapsed=([\d.]+) s",
}
# Seconds a run needs at least (import ~27 s cold; native's Engine() 110 s cold with SGLang's 58 prefill sizes).
NEEDS = {("engine", "native"): 170, ("engine", "save"): 200, ("engine", "load"): 100, ("serve", "native"): 120,
         ("serve", "load"): 100, ("serve", "save"): 200}  # fmt: skip


class SglangEngine(OfflineEngine):
    """``sglang.Engine(**kwargs)`` in a child (engine_child.py), driven like foundry bench's offline engine."""

    def __init__(self, kwargs: dict[str, Any], prefix: list[str], env: dict[str, str], log: Path, cwd: Path) -> None:
        Engine.__init__(self, [*prefix, sys.executable, str(CHILD), json.dumps(kwargs)], env, log, cwd)


class SglangServer(ServerEngine):
    """``python -m sglang.launch_server`` on 127.0.0.1:port; /health, then /generate with input_ids."""

    def __init__(self, args: list[str], port: int, prefix: list[str], env: dict[str, str], log: Path,
                 cwd: Path) -> None:  # fmt: skip
        self.base = f"http://127.0.0.1:{port}"
        cmd = [*prefix, sys.executable, "-m", "sglang.launch_server", *args]
        Engine.__init__(self, [*cmd, "--host", "127.0.0.1", "--port", str(port)], env, log, cwd)

    def generate(self, request: Request, timeout: float = 600) -> tuple[list[list[int]], float]:
        body = {
            "input_ids": [list(p) for p in request.prompts],
            "sampling_params": {"temperature": 0.0, "max_new_tokens": request.max_tokens, "ignore_eos": True},
        }
        t = time.perf_counter()
        status, doc = self._http("/generate", body, timeout)
        seconds = time.perf_counter() - t
        if status != 200 or not isinstance(doc, list | dict):
            raise self.fail(f"/generate answered {status}: {str(doc)[:400]}")
        outs = doc if isinstance(doc, list) else [doc]
        return [list(o["output_ids"]) for o in outs], seconds


def cli_flags(kwargs: dict[str, Any]) -> list[str]:
    """Engine keyword arguments as launch_server flags."""
    flags: list[str] = []
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif isinstance(value, list | tuple):
            flags += [flag, *map(str, value)]
        elif isinstance(value, dict):
            flags += [flag, json.dumps(value)]
        elif value is not False and value is not None:
            flags += [flag, str(value)]
    return flags


class Runs:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.perf_counter()
        self.logs = args.out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.model = make_model(Path("/tmp/foundry-sglang-models/qwen3-0.6b"), "qwen3-0.6b")
        shim = plugin_shim(Path("/tmp/foundry-sglang-entrypoint"), "sglang", "sglang.srt.plugins")
        paths = [str(REPO), *([str(shim)] if shim else []), os.environ.get("PYTHONPATH", "")]
        self.env = {**os.environ, **ENV, "PYTHONPATH": ":".join(p for p in paths if p)}
        for name in [n for n in self.env if n.startswith("FOUNDRY_SGLANG_")]:
            del self.env[name]
        self.kwargs = {"model_path": str(self.model), **BASE, **json.loads(args.engine_args)}
        self.port = 30100
        self.results: dict[str, dict[str, Any]] = {}

    def left(self) -> float:
        return self.args.budget - (time.perf_counter() - self.t0)

    def start(self, api: str, mode: str, archive: Path) -> Engine:
        env = dict(self.env)
        prefix: list[str] = []
        name = f"{api}-{mode}"
        if mode in ("save", "load"):
            report = self.logs / f"report-{name}.json"
            report.unlink(missing_ok=True)
            env.update(FOUNDRY_SGLANG_MODE=mode, FOUNDRY_SGLANG_ARCHIVE=str(archive), FOUNDRY_SGLANG_REPORT=str(report))
            prefix = [sys.executable, "-m", "foundry.cli", "run", "--"]
        log = self.logs / f"{name}.log"
        if api == "engine":
            return SglangEngine(self.kwargs, prefix, env, log, REPO)
        self.port += 1
        flags = cli_flags({k: v for k, v in self.kwargs.items() if k != "model_path"})
        args = ["--model-path", str(self.model), *flags]
        return SglangServer(args, self.port, prefix, env, log, REPO)

    def run(self, api: str, mode: str, archive: Path) -> dict[str, Any]:
        name = f"{api}-{mode}"
        need = NEEDS[(api, mode)]
        if self.left() < need:
            print(f"[sglang] {name}: skipped, {self.left():.0f} s left of the budget (needs ~{need} s)", flush=True)
            return {"mode": mode, "api": api, "skipped": f"{self.left():.0f} s left"}
        if mode == "save":
            shutil.rmtree(archive, ignore_errors=True)
        print(f"[sglang] {name}: starting", flush=True)
        engine = self.start(api, mode, archive)
        result: dict[str, Any] = {"mode": mode, "api": api}
        try:
            result.update(engine.ready(max(self.left() - 40, 30)))
            _, result["first_request_s"] = engine.generate(decode_request(1, 1))
            result["first_answer_wall_s"] = engine.seconds()
            requests = token_requests(self.args.batch_list, self.args.max_tokens)
            result["tokens"] = [engine.generate(r)[0] for r in requests]
            result["decode_tokens_per_s"] = self.decode(engine)
        except EngineError as exc:
            result["error"] = str(exc)[-3000:]
            print(f"[sglang] {name}: FAILED {result['error'][-1500:]}", flush=True)
        result["rc"] = engine.stop()
        result["process_wall_s"] = engine.seconds()
        text = engine.log_path.read_text(errors="replace")
        for key, pattern in LOG_NUMBERS.items():
            values = re.findall(pattern, text)
            if values:
                result[key] = float(values[-1])
        report = self.logs / f"report-{name}.json"
        if report.is_file():
            result["plugin"] = json.loads(report.read_text())
        elif mode in ("save", "load") and "error" not in result:
            result["error"] = "the Foundry plugin wrote no report: SGLang ran without it (entry point not found?)"
        print(f"[sglang] {name}: done, rc={result['rc']}, ready after {result.get('ready_wall_s', float('nan')):.1f} s",
              flush=True)  # fmt: skip
        return result

    def decode(self, engine: Engine) -> dict[str, float]:
        """Tokens/s of decode alone at each batch size: (steps) tokens per prompt between two requests of the same
        prompts, one asking 1 token and one asking 1 + steps."""
        out = {}
        steps = self.args.decode_steps
        for batch in self.args.decode_batch_list:
            engine.generate(decode_request(batch, 1 + steps))  # warm: the first call at a size is not steady
            _, one = engine.generate(decode_request(batch, 1))
            _, many = engine.generate(decode_request(batch, 1 + steps))
            out[str(batch)] = batch * steps / max(many - one, 1e-9)
        return out


def summary(doc: dict[str, Any]) -> list[str]:
    lines = ["================ summary (SGLang 0.5.17, Foundry)"]
    for name, r in doc["results"].items():
        if "skipped" in r:
            lines.append(f"{name}: skipped ({r['skipped']})")
            continue
        keys = ("rc", "import_s", "engine_init_s", "health_s", "first_request_s", "prefill_graphs_s", "decode_graphs_s")
        parts = [f"{k}={r[k]:.2f}" if isinstance(r.get(k), float) else f"{k}={r[k]}" for k in keys if k in r]
        rates = r.get("decode_tokens_per_s", {})
        parts.append("decode tok/s " + ", ".join(f"bs{b}={v:.0f}" for b, v in rates.items()))
        lines.append(f"{name}: " + "; ".join(parts))
        plugin = r.get("plugin") or {}
        if plugin:
            timings = {k: round(v, 3) for k, v in plugin.get("timings", {}).items() if isinstance(v, float)}
            lines.append(f"  plugin: graphs={plugin.get('graphs')} timings={timings}")
        if "error" in r:
            lines.append("  ERROR " + r["error"][-600:].replace("\n", "\n    "))
    for name, verdict in doc["compare"].items():
        tag = "IDENTICAL" if verdict.get("identical") else "DIFFERENT"
        per = verdict.get("requests")
        detail = ", ".join(f"bs{q['batch']} {q['identical']}/{q['of']}" for q in per) if per else verdict.get("why")
        lines.append(f"{name} vs {verdict.get('reference', 'native')}: {tag} {detail}")
    return lines


def compare_all(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Every run's tokens against native's of the same API (the Engine's where the server has none), and the
    native server's against the native Engine's."""
    out: dict[str, Any] = {}
    engine_ref = results.get("engine-native", {}).get("tokens")
    for api in ("engine", "serve"):
        own = results.get(f"{api}-native", {}).get("tokens")
        ref, ref_name = (own, f"{api}-native") if own else (engine_ref, "engine-native")
        for name, r in results.items():
            if not name.startswith(api + "-") or name == f"{api}-native" or "skipped" in r:
                continue
            if ref and "tokens" in r:
                out[name] = {**compare_tokens(ref, r["tokens"]), "reference": ref_name}
            else:
                out[name] = {"identical": False, "why": r.get("error", "no tokens"), "reference": ref_name}
    serve_native = results.get("serve-native", {}).get("tokens")
    if serve_native and engine_ref:
        out["serve-native"] = {**compare_tokens(engine_ref, serve_native), "reference": "engine-native"}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    parser.add_argument("--modes", default="native,save,load", help="sglang.Engine runs, in order")
    parser.add_argument("--serve-modes", default="load,native", help="launch_server runs, in order")
    parser.add_argument("--batches", default="1,8,64")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--decode-batches", default="1,32,256")
    parser.add_argument("--decode-steps", type=int, default=64)
    parser.add_argument("--engine-args", default='{"cuda_graph_max_bs_prefill": 1024}', help="JSON Engine kwargs")
    parser.add_argument("--archive", type=Path, default=Path("/tmp/foundry-sglang-archive"))
    parser.add_argument("--budget", type=float, default=520, help="seconds for everything")
    args = parser.parse_args()
    args.batch_list = [int(b) for b in args.batches.split(",") if b]
    args.decode_batch_list = [int(b) for b in args.decode_batches.split(",") if b]
    args.out = args.out.resolve()
    runs = Runs(args)
    serve_archive = args.archive.with_name(args.archive.name + "-serve")
    for mode in [m for m in args.modes.split(",") if m]:
        runs.results[f"engine-{mode}"] = runs.run("engine", mode, args.archive)
        if mode == "save" and "error" in runs.results["engine-save"]:
            print("[sglang] SAVE failed: LOAD would have no archive", flush=True)
    serve_modes = [m for m in args.serve_modes.split(",") if m]
    for mode in serve_modes:
        archive = serve_archive if "save" in serve_modes else args.archive
        runs.results[f"serve-{mode}"] = runs.run("serve", mode, archive)
    compare = compare_all(runs.results)
    doc = {
        "config": {
            "engine_kwargs": runs.kwargs,
            "batches": args.batch_list,
            "max_tokens": args.max_tokens,
            "decode_batches": args.decode_batch_list,
            "decode_steps": args.decode_steps,
        },
        "results": {n: {k: v for k, v in r.items() if k != "tokens"} for n, r in runs.results.items()},
        "tokens": {n: r.get("tokens") for n, r in runs.results.items()},
        "compare": compare,
        "wall_s": time.perf_counter() - runs.t0,
    }
    (args.out / "sglang-foundry.json").write_text(json.dumps(doc, indent=1) + "\n")
    text = "\n".join(summary(doc))
    (args.out / "summary.txt").write_text(text + "\n")
    print(text, flush=True)
    ok = all("error" not in r for r in runs.results.values() if "skipped" not in r)  # a server stops on SIGTERM
    return 0 if ok and all(v.get("identical") for v in compare.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
