"""SGLang's start-up step by step, from its own log: with ``SGLANG_LOG_MS=1`` (which the benchmark sets) every
line carries a millisecond timestamp, and the seconds between the lines SGLang logs at each step's start and end
are the same measure for a native run and for LOAD, Foundry's hooks or not. LOAD's report says what Foundry did
inside those steps; this says what each step cost against native's."""

from __future__ import annotations

import re
from datetime import datetime

__all__ = ["STEPS", "log_steps"]

# The lines, by the words SGLang 0.5.17 starts them with (its scheduler process, and the Engine's for the last).
MARKERS = {
    "dist_begin": "Init torch distributed begin.",
    "dist_end": "Init torch distributed ends.",
    "weights_begin": "Load weight begin.",
    "weights_end": "Load weight end.",
    "pool_end": "Memory pool end.",
    "prefill_begin": "Capture target prefill CUDA graph begin.",
    "prefill_end": "Capture target prefill CUDA graph end.",
    "decode_begin": "Capture target decode CUDA graph begin.",
    "decode_end": "Capture target decode CUDA graph end.",
    "ready": "Engine startup timings (s):",
}
# (key, from, to, what the step does)
STEPS = (
    ("distributed", "dist_begin", "dist_end", "torch.distributed"),
    ("to_weights", "dist_end", "weights_begin", "to the weights (the model's class and modules)"),
    ("weights", "weights_begin", "weights_end", "weights"),
    ("kv_pool", "weights_end", "pool_end", "KV cache pool (memory profile, allocation)"),
    ("to_graphs", "pool_end", "prefill_begin", "attention backends, runners' buffers"),
    ("prefill_graphs", "prefill_begin", "prefill_end", "prefill graphs (capture, or LOAD's hand-over)"),
    ("between_graphs", "prefill_end", "decode_begin", "between the two graph sets"),
    ("decode_graphs", "decode_begin", "decode_end", "decode graphs (capture, or LOAD's hand-over)"),
    ("to_ready", "decode_end", "ready", "to ready (warm-up included)"),
)
# "[2026-11-28 18:43:29.123 TP0] message": SGLang's format with SGLANG_LOG_MS=1 (the prefix names the rank)
LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})[^\]]*\] (.*)$")


def log_steps(text: str) -> dict[str, float]:
    """``{"step_<key>_s": seconds}`` for every step whose two lines the log holds, each line's first occurrence;
    empty for a log without millisecond timestamps (one-second ones would measure nothing here)."""
    seen: dict[str, datetime] = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if m is None:
            continue
        for key, words in MARKERS.items():
            if key not in seen and m.group(2).startswith(words):
                try:
                    seen[key] = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f")
                except ValueError:  # digits that are no date (a line some other program wrote): not a step's
                    continue
    return {
        f"step_{key}_s": round((seen[end] - seen[start]).total_seconds(), 3)
        for key, start, end, _ in STEPS
        if start in seen and end in seen
    }
