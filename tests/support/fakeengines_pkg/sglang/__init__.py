"""A stand-in SGLang 0.5.17 for the benchmark's CPU tests (see ../README.md): ``sglang.srt.entrypoints.engine
.Engine`` and ``python -m sglang.launch_server``. Both refuse what the GPU bundle cannot run (an attention
backend other than triton, real weights) and log the lines the benchmark reads. Under FOUNDRY_SGLANG_MODE
they write the plugin's report. For the failure paths: ``FAKE_SGLANG_SLEEP`` (seconds start-up takes),
``FAKE_SGLANG_HANG`` (a mode, or ``native``, whose start-up never ends), ``FAKE_SGLANG_REFUSE`` (a mode whose
start-up fails as Foundry's refusal does)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import _fakeengine
from _fakeengine import next_logprobs, next_tokens

__version__ = "0.5.17-fake"
__all__ = ["answer", "next_tokens", "start_up"]


def log(message: str, rank: int | None = None) -> None:
    """A line as SGLang logs it: with SGLANG_LOG_MS=1 a millisecond timestamp in its format, else a level; a
    rank's line (tensor parallel) names the rank in the prefix, as SGLang's scheduler processes do."""
    where = "" if rank is None else f" TP{rank} EP{rank}"
    if os.environ.get("SGLANG_LOG_MS") == "1":
        now = time.time()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
        print(f"[{stamp}{where}] {message}", flush=True)
    else:
        print(f"INFO{where} {message}", flush=True)


def start_up(settings: dict[str, Any]) -> None:
    """What the fake engine does before it serves: checks the settings as the bundle would, logs SGLang's
    figures, writes the plugin's report; slow, hanging or refused as the FAKE_SGLANG_* variables ask."""
    mode = os.environ.get("FOUNDRY_SGLANG_MODE") or "native"
    if settings.get("attention_backend") != "triton" or settings.get("load_format") != "dummy":
        raise SystemExit("fake SGLang: the bundle runs attention_backend='triton' with load_format='dummy' only")
    if not 0 < float(settings.get("mem_fraction_static", 0.9)) <= 0.45:
        raise SystemExit("fake SGLang: two engines side by side need mem_fraction_static <= 0.45")
    if os.environ.get("FAKE_SGLANG_HANG") == mode:
        print("fake SGLang: start-up hangs", flush=True)  # a test waits for this line, not for a guessed time
        time.sleep(3600)
    if os.environ.get("FAKE_SGLANG_REFUSE") == mode:
        print("ArchiveMismatchError: mem_fraction_static: saved '0.35', here '0.3'", file=sys.stderr, flush=True)
        raise SystemExit(1)
    time.sleep(float(os.environ.get("FAKE_SGLANG_SLEEP", "0")))
    loaded = mode == "load"
    log("Init torch distributed begin.")
    log("Init torch distributed ends. elapsed=0.02 s, mem usage=0.09 GB")
    log("Load weight begin. avail mem=139.13 GB")
    log("Load weight end. elapsed=0.10 s, type=Qwen3ForCausalLM")
    log("Memory pool end. avail mem=90.42 GB")
    tp = int(settings.get("tp_size", 1))
    os.environ["FAKE_ENGINE_TP"] = str(tp)  # the plugin's report, one a rank (_fakeengine.write_report)
    # Every rank logs its own capture, interleaved: rank r's decode graphs take r / 4 s more.
    for rank in range(tp) if tp > 1 else (None,):
        log("Capture target prefill CUDA graph begin. backend=breakable", rank)
        log(f"Capture target prefill CUDA graph end. elapsed={0.05 if loaded else 7.5:.2f} s", rank)
    for rank in range(tp) if tp > 1 else (None,):
        log("Capture target decode CUDA graph begin. backend=full", rank)
        extra = (rank or 0) / 4 if not loaded else 0.0
        log(f"Capture target decode CUDA graph end. elapsed={(0.01 if loaded else 3.25) + extra:.2f} s", rank)
    log("max_total_num_tokens=200000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=2048, context_len=2048, available_gpu_mem=40.00 GB")  # fmt: skip
    log(f"Engine startup timings (s): load_weight=0.10, scheduler_e2e={0.5 if loaded else 11.5:.2f}, "
        f"cuda_graph={{prefill={0.05 if loaded else 7.5:.2f}, decode={0.01 if loaded else 3.25:.2f}}}")  # fmt: skip
    timings = (
        {"load_modules_s": 0.1, "start_graph_builds_s": 0.2, "graphs_ready_s": 0.25}
        if loaded
        else {"prefill_capture_s": 7.5, "decode_capture_s": 3.25, "capture_s": 10.75, "save_s": 9.0}
    )
    phases = ("distributed", "load_model", "memory_pool", "prefill_graphs" if loaded else "prefill_capture")
    _fakeengine.write_report("sglang", phases, timings)


def answer(
    input_ids: list[list[int]], sampling_params: dict[str, Any], return_logprob: bool = False, top_logprobs_num: int = 0
) -> list[dict[str, Any]]:
    """Greedy, ignore_eos: exactly max_new_tokens tokens a prompt; with ``return_logprob``, SGLang's
    ``output_top_logprobs`` (per position, (logprob, token_id, text) triples)."""
    assert sampling_params["temperature"] == 0.0 and sampling_params["ignore_eos"] is True, sampling_params
    count = sampling_params["max_new_tokens"]
    time.sleep(1e-5 * count * len(input_ids))
    outs = []
    for p in input_ids:
        meta: dict[str, Any] = {}
        if return_logprob and top_logprobs_num:
            top = next_logprobs(p, count, top_logprobs_num)
            meta["output_top_logprobs"] = [[(lp, t, None) for t, lp in pos] for pos in top]
        outs.append({"output_ids": next_tokens(p, count), "meta_info": meta})
    return outs
