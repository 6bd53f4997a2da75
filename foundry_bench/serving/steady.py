"""The steady-state phase of a serving benchmark: with the warm native engine and the LOAD engine both up, decode
tokens/s per batch size (a long generation of ``decode_steps`` tokens a prompt, ignore_eos) and prefill seconds,
asked of both in turn (stats.alternate); what is left of the budget is shared out equally between the
measurements."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .process import Engine
from .stats import alternate, summary
from .workload import Request, decode_request, prefill_request

__all__ = ["decode_asker", "measure", "prefill_asker"]


def measure(
    engines: dict[str, Engine],
    cfg: Any,
    vocab: int,
    wait: Callable[[], float],
    deadline: Callable[[], float | None],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """``{"decode": {batch: summary}, "prefill": {...}, "short_prefill": {...}}`` of ``engines`` (by side:
    native, load), under the benchmark's configuration ``cfg``; ``wait`` is how long one request may take,
    ``deadline`` when the budget ends (None: never)."""
    out: dict[str, Any] = {"decode": {}, "prefill": {}}
    measurements: list[tuple[str, Any]] = [("decode", b) for b in cfg.decode_batches]
    measurements.append(("prefill", cfg.prefill_tokens))
    if cfg.short_prefill_tokens:
        measurements.append(("short_prefill", cfg.short_prefill_tokens))
    for i, (what, size) in enumerate(measurements):
        end = deadline()
        if end is not None:
            end = time.perf_counter() + (end - time.perf_counter()) / (len(measurements) - i)
        if what == "decode":
            request = decode_request(size, cfg.decode_steps, vocab)
            ask = {n: decode_asker(e, request, wait) for n, e in engines.items()}
        else:  # a new prompt each time (the k-th of both sides the same), so that no prefix cache answers it
            ask = {n: prefill_asker(e, size, vocab, wait) for n, e in engines.items()}
        result = summary(alternate(ask, cfg.reps, end))
        if what == "decode":
            out["decode"][str(size)] = result
        else:
            out[what] = {"tokens": size, **result}
        say(f"{what} {size}: {_brief(result)}")
    return out


def decode_asker(engine: Engine, request: Request, wait: Callable[[], float]) -> Callable[[], float]:
    """Tokens/s of ``engine`` over the whole ``request``, one measurement a call."""

    def ask() -> float:
        return request.batch * request.max_tokens / engine.generate(request, wait())[1]

    return ask


def prefill_asker(engine: Engine, tokens: int, vocab: int, wait: Callable[[], float]) -> Callable[[], float]:
    """Seconds of one prefill of ``tokens`` by ``engine``, each call on the next prompt."""
    asked = [0]

    def ask() -> float:
        asked[0] += 1
        return engine.generate(prefill_request(tokens, vocab, asked[0]), wait())[1]

    return ask


def _brief(m: dict[str, Any]) -> str:
    med = m["median"]
    return (f"native {med.get('native', float('nan')):.4g}, LOAD {med.get('load', float('nan')):.4g}, "
            f"paired ratio {m.get('paired_ratio_median') or float('nan'):.4f}, {m['reps']} reps")  # fmt: skip
