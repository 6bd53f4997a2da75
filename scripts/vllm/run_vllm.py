#!/usr/bin/env python3
"""vLLM 0.26 with and without Foundry, on the GPU machine: native, SAVE and LOAD, each in a fresh process,
the same greedy generations in each, token IDs compared.

    python3 scripts/vllm/run_vllm.py [--out DIR] [--runner v2|v1] [--modes native,save,load]
                                     [--batches 1,8,64] [--max-tokens 32] [--timeout 420]

Each mode runs ``LLM(model, load_format="dummy", skip_tokenizer_init=True, seed=0,
compilation_config={"cudagraph_mode": "FULL_DECODE_ONLY"}, ...)`` on a weightless Qwen3-0.6B-shaped model
folder (config.json only; vLLM fills seeded random weights), then generates greedily for token-ID prompts of
mixed lengths at each batch size. SAVE and LOAD run under ``python -m foundry.cli run --`` (libfoundry
preloaded, inherited by vLLM's engine-core process) with FOUNDRY_VLLM_MODE=save|load; the plugin is found
through the ``vllm.general_plugins`` entry point (a shim dist-info on PYTHONPATH when foundry is not
pip-installed). Writes DIR/vllm-foundry.json, DIR/<mode>.log, DIR/report-<mode>.json (the plugin's phases),
and prints a summary. Exit status 0 only if every mode ran and all token IDs match native. Each mode's result
is also kept in --state (default /tmp/foundry-vllm-state), so that modes can run in separate calls (native in
one, save,load in the next) and still be compared with the native run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

# Qwen3-0.6B's architecture (the published config.json's shape), weightless.
QWEN3_06B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000,
    "rope_scaling": None,
    "rms_norm_eps": 1e-06,
    "hidden_act": "silu",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "tie_word_embeddings": True,
    "use_sliding_window": False,
    "sliding_window": None,
    "max_window_layers": 28,
    "initializer_range": 0.02,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "use_cache": True,
    "torch_dtype": "bfloat16",
}

ENV = {
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
    "VLLM_LOGGING_LEVEL": "INFO",
    "VLLM_USE_FLASHINFER_SAMPLER": "0",  # FlashInfer is not in the offline bundle
}

# vLLM's and the plugin's log lines worth keeping, and numbers read from them
LOG_NUMBERS = {
    "model_load_s": r"Model loading took [\d.]+ GiB and ([\d.]+) seconds",
    "compile_s": r"torch\.compile (?:took|takes) ([\d.]+) s",
    "capture_s": r"Graph capturing finished in ([\d.]+) secs",
    "init_engine_s": r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s",
}
NOTE = re.compile(
    r"torch\.compile|Graph capturing|Capturing CUDA graphs.*100%|init engine|Model loading took|KV cache|"
    r"Foundry|Using \S+ backend|Model Runner|Traceback|Error|error"
)


def make_model(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(QWEN3_06B, indent=2) + "\n")
    return path


def prompts(batch: int, seed: int) -> list[list[int]]:
    """``batch`` token-ID prompts of lengths 4..199, deterministic per (batch, seed)."""
    import random

    rng = random.Random(seed * 1000 + batch)
    return [[rng.randrange(100, 150000) for _ in range(4 + (i * 37 + batch) % 196)] for i in range(batch)]


# ------------------------------------------------------------------------------------------------ child
def child(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    import torch

    t_torch = time.perf_counter() - t0
    import vllm
    from vllm import LLM, SamplingParams

    t_import = time.perf_counter() - t0
    kwargs: dict[str, Any] = {
        "model": str(args.model),
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "seed": 0,
        "max_model_len": 2048,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "enable_prefix_caching": False,
    }
    if args.cudagraph_mode != "default":
        kwargs["compilation_config"] = {"cudagraph_mode": args.cudagraph_mode}
    print(f"RUN {args.child}: vllm {vllm.__version__} torch {torch.__version__}; LLM(**{kwargs})", flush=True)
    t1 = time.perf_counter()
    llm = LLM(**kwargs)
    t_llm = time.perf_counter() - t1
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
    batches = []
    for batch in args.batch_list:
        ps = [{"prompt_token_ids": p} for p in prompts(batch, seed=0)]
        t2 = time.perf_counter()
        outs = llm.generate(ps, params, use_tqdm=False)
        dt = time.perf_counter() - t2
        tokens = [list(o.outputs[0].token_ids) for o in outs]
        batches.append({"batch": batch, "generate_s": dt, "tokens": tokens})
    t3 = time.perf_counter()
    llm.generate([{"prompt_token_ids": p} for p in prompts(8, seed=0)], params, use_tqdm=False)
    again = time.perf_counter() - t3
    result = {
        "mode": args.child,
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
        "import_torch_s": t_torch,
        "import_s": t_import,
        "llm_init_s": t_llm,
        "generate_again_8_s": again,
        "batches": batches,
    }
    print("RESULT " + json.dumps(result), flush=True)
    return 0


# ----------------------------------------------------------------------------------------------- parent
def plugin_path_shim(root: Path) -> Path | None:
    """A dist-info declaring Foundry's vllm.general_plugins entry point, for a foundry that is on PYTHONPATH but
    not pip-installed (the GPU tier's set-up); None when the entry point is installed already."""
    from importlib.metadata import entry_points

    if any(ep.value.startswith("foundry.integration.vllm") for ep in entry_points(group="vllm.general_plugins")):
        return None
    info = root / "foundry_vllm_plugin-0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: foundry-vllm-plugin\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[vllm.general_plugins]\nfoundry = foundry.integration.vllm:register\n")
    return root


def run_mode(mode: str, args: argparse.Namespace, out: Path, shim: Path | None) -> dict[str, Any]:
    env = {**os.environ, **ENV}
    paths = [str(REPO), *([str(shim)] if shim else []), env.get("PYTHONPATH", "")]
    if args.stacks:
        paths.insert(0, str(REPO / "scripts" / "vllm" / "stacks"))
        env.update(FOUNDRY_STACKS_DIR=f"/tmp/foundry-stacks/{mode}", FOUNDRY_STACKS_EVERY=str(args.stacks))
        subprocess.run(["rm", "-rf", f"/tmp/foundry-stacks/{mode}"], check=True)
    env["PYTHONPATH"] = ":".join(p for p in paths if p)
    env.pop("FOUNDRY_VLLM_MODE", None)
    if args.runner == "v1":
        env["VLLM_USE_V2_MODEL_RUNNER"] = "0"
    cmd = [sys.executable, __file__, "--child", mode, "--model", str(args.model), "--batches", args.batches]
    cmd += ["--max-tokens", str(args.max_tokens), "--gpu-memory-utilization", str(args.gpu_memory_utilization)]
    cmd += ["--cudagraph-mode", args.cudagraph_mode]
    report = out / f"report-{mode}.json"
    report.unlink(missing_ok=True)
    if mode in ("save", "load"):
        env.update(FOUNDRY_VLLM_MODE=mode, FOUNDRY_VLLM_ARCHIVE=str(args.archive), FOUNDRY_VLLM_REPORT=str(report))
        cmd = [sys.executable, "-m", "foundry.cli", "run", "--", *cmd]
    log_path = out / f"{mode}.log"
    t0 = time.perf_counter()
    with log_path.open("w") as log:
        try:
            proc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout, cwd=REPO)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = 124
    wall = time.perf_counter() - t0
    if args.stacks:
        collect_stacks(Path(f"/tmp/foundry-stacks/{mode}"), out / f"stacks-{mode}.txt")
    text = log_path.read_text(errors="replace")
    found = re.findall(r"^RESULT (.*)$", text, re.M)
    result: dict[str, Any] = json.loads(found[-1]) if found else {"mode": mode}
    result.update(rc=rc, process_wall_s=wall)
    for name, pattern in LOG_NUMBERS.items():
        values = [float(v) for v in re.findall(pattern, text)]
        if values:
            result[name] = values[-1] if name != "compile_s" else sum(values)
    if report.is_file():
        result["plugin"] = json.loads(report.read_text())
    elif mode in ("save", "load") and rc == 0:
        # vLLM ran, but not under the plugin (entry point not found, or FOUNDRY_VLLM_MODE lost on the way)
        result["rc"] = rc = 2
        result["error"] = f"the Foundry plugin wrote no report: {mode} ran as plain vLLM"
        print(f"    {result['error']}", flush=True)
    notes = [line for line in text.splitlines() if NOTE.search(line)]
    result["log_notes"] = notes[-40:]
    print(f"--- {mode}: rc={rc} wall {wall:.1f} s; LLM() {result.get('llm_init_s', float('nan')):.1f} s", flush=True)
    for line in notes[-15:]:
        print(f"    {line[:220]}", flush=True)
    if rc != 0:
        print("    last lines:\n" + "\n".join("    " + ln[:220] for ln in text.splitlines()[-25:]), flush=True)
    return result


def collect_stacks(folder: Path, dest: Path) -> None:
    """The stack dumps of every process of one mode, in one file, each under its process's id; the most
    frequent innermost frames of the busiest process first (where the time went)."""
    dumps = {p.stem: p.read_text(errors="replace") for p in sorted(folder.glob("*.txt"))}
    lines = []
    for pid, text in sorted(dumps.items(), key=lambda kv: -len(kv[1])):
        tops = re.findall(r"^Thread 0x[0-9a-f]+ .*\n\s+(File .*)$", text, re.M)
        lines.append(f"== process {pid}: {text.count('Dump')} dumps")
        for frame, n in collections.Counter(tops).most_common(12):
            lines.append(f"   {n:5d}  {frame.strip()}")
    for pid, text in dumps.items():
        lines += [f"==================== process {pid}", text[-400_000:]]
    dest.write_text("\n".join(lines))


def compare(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    ref = results.get("native")
    verdict: dict[str, Any] = {}
    if not ref or "batches" not in ref:
        return {"error": "no native result to compare with"}
    for mode, res in results.items():
        if mode == "native":
            continue
        if "batches" not in res:
            verdict[mode] = {"identical": False, "why": f"{mode} produced no result (rc={res.get('rc')})"}
            continue
        per_batch = {}
        for a, b in zip(ref["batches"], res["batches"], strict=False):
            same = sum(x == y for x, y in zip(a["tokens"], b["tokens"], strict=False))
            first = next((i for i, (x, y) in enumerate(zip(a["tokens"], b["tokens"], strict=False)) if x != y), None)
            per_batch[str(a["batch"])] = {"sequences_identical": same, "of": len(a["tokens"]), "first_diff": first}
        identical = all(v["sequences_identical"] == v["of"] for v in per_batch.values()) and len(per_batch) == len(
            ref["batches"]
        )
        verdict[mode] = {"identical": identical, "batches": per_batch}
    return verdict


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    parser.add_argument("--model", type=Path, default=Path("/tmp/foundry-qwen3-0.6b"))
    parser.add_argument("--archive", type=Path, default=Path("/tmp/foundry-vllm-archive"))
    parser.add_argument("--runner", choices=["v2", "v1"], default="v2")
    parser.add_argument(
        "--cudagraph-mode",
        default="default",
        help="vLLM's compilation_config cudagraph_mode (default: vLLM's own, FULL_AND_PIECEWISE)",
    )
    parser.add_argument("--modes", default="native,save,load")
    parser.add_argument("--batches", default="1,8,64")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    parser.add_argument("--timeout", type=int, default=420, help="seconds per mode")
    parser.add_argument("--stacks", type=float, default=0, help="dump every process's stacks every N seconds")
    parser.add_argument("--state", type=Path, default=Path("/tmp/foundry-vllm-state"))
    args = parser.parse_args()
    args.batch_list = [int(b) for b in args.batches.split(",") if b]
    if args.child:
        return child(args)

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    make_model(args.model)
    modes = [m for m in args.modes.split(",") if m]
    if "save" in modes:
        subprocess.run(["rm", "-rf", str(args.archive)], check=True)
    shim = plugin_path_shim(Path("/tmp/foundry-vllm-entrypoint"))
    results: dict[str, dict[str, Any]] = {}
    args.state.mkdir(parents=True, exist_ok=True)
    for mode in modes:
        results[mode] = run_mode(mode, args, out, shim)
        (args.state / f"{mode}.json").write_text(json.dumps(results[mode]))
        if mode == "save" and results[mode]["rc"] != 0:
            print("SAVE failed: LOAD would have no archive; stopping", flush=True)
            break
    earlier = args.state / "native.json"
    if "native" not in results and earlier.is_file():  # the reference from an earlier call on this machine
        results = {"native": json.loads(earlier.read_text()), **results}
        print(f"native result from {earlier} (an earlier call)", flush=True)
    verdict = compare(results)
    doc = {
        "runner": args.runner,
        "batches": args.batch_list,
        "max_tokens": args.max_tokens,
        "results": {m: {k: v for k, v in r.items() if k != "batches"} for m, r in results.items()},
        "tokens": {m: r.get("batches") for m, r in results.items()},
        "compare": verdict,
    }
    (out / "vllm-foundry.json").write_text(json.dumps(doc, indent=1) + "\n")
    print("================ summary")
    for mode, r in results.items():
        keys = ("rc", "import_s", "llm_init_s", "compile_s", "capture_s", "init_engine_s", "process_wall_s")
        line = ", ".join(f"{k}={r[k]:.2f}" if isinstance(r.get(k), float) else f"{k}={r.get(k)}" for k in keys)
        gen = ", ".join(f"bs{b['batch']}={b['generate_s']:.3f}s" for b in r.get("batches", []))
        print(f"{mode}: {line}; generate {gen}")
        plugin = r.get("plugin")
        if plugin:
            print(f"  plugin: timings {plugin.get('timings')}; phases {[p['name'] for p in plugin.get('phases', [])]}")
    for mode, v in verdict.items():
        print(f"{mode} vs native: {'IDENTICAL' if v.get('identical') else 'DIFFERENT'} {v.get('batches', v)}")
    ok = all(r.get("rc") == 0 for r in results.values()) and all(v.get("identical") for v in verdict.values())
    return 0 if ok and all(m in results for m in modes) else 1


if __name__ == "__main__":
    sys.exit(main())
