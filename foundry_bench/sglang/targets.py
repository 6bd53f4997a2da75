"""The SGLang benchmark's verdicts on the targets it exists for, from its document: capture (prefill + decode
graphs) replaced by a restore at least 50x faster; ``Engine()`` (or time to ``/health``) under LOAD at most
0.2x native's with warm caches, and at most native warm's less native's capture (LOAD replaces the capture and
must add nothing else); the first request after LOAD at most 1.1x native warm's; decode tokens/s within 1% of
native's; tokens identical."""

from __future__ import annotations

from typing import Any

from foundry_bench.serving.report import foundry_seconds, start_up_checks
from foundry_bench.serving.starts import start_figures, starts_of

__all__ = ["TARGETS", "capture_seconds", "startup_seconds", "targets"]

TARGETS = {"restore_speedup": 50.0, "startup_ratio": 0.2, "decode_parity": 0.01}


def capture_seconds(r: dict[str, Any]) -> float | None:
    """The prefill and decode graphs' seconds as SGLang logs them (capture natively; Foundry's hand-over at LOAD)."""
    parts = [r.get("prefill_graphs_s"), r.get("decode_graphs_s")]
    return sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None


def startup_seconds(r: dict[str, Any]) -> float | None:
    """``Engine()``'s seconds, or the server's time to /health."""
    value = r.get("engine_init_s", r.get("health_s"))
    return float(value) if isinstance(value, int | float) else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def targets(doc: dict[str, Any]) -> dict[str, Any]:
    """Each target's figures and whether it is met (None where the runs it needs are missing)."""
    results = doc["results"]
    native, load = start_figures(doc, "native"), start_figures(doc, "load")  # medians where --starts asked for more
    restore = foundry_seconds(load)
    cold, warm = capture_seconds(results.get("native_cold", {})), capture_seconds(native)
    # The capture figure is a cold machine's; warm caches are shown beside it.
    reference = cold if cold is not None else warm
    speedup = _ratio(reference, restore)
    native_start, load_start = startup_seconds(native), startup_seconds(load)
    startup = _ratio(load_start, native_start)
    decode = (doc.get("measured") or {}).get("decode") or {}
    ratios = {b: m.get("paired_ratio_median") for b, m in decode.items() if m.get("paired_ratio_median")}
    worst = max(ratios.items(), key=lambda kv: abs(kv[1] - 1.0)) if ratios else None
    compare = doc.get("compare") or {}
    init_key = "engine_init_s" if "engine_init_s" in native else "health_s"
    return {
        "restore": {
            "native_cold_capture_s": cold,
            "native_capture_s": warm,
            "load_foundry_s": restore,
            "load_graphs_logged_s": capture_seconds(load),
            "speedup": speedup,
            "speedup_warm": _ratio(warm, restore),
            "against": "native_cold" if cold is not None else "native",
            "target": TARGETS["restore_speedup"],
            "met": None if speedup is None else speedup >= TARGETS["restore_speedup"],
        },
        "startup": {
            "native_s": native_start,
            "load_s": load_start,
            "ratio": startup,
            "target": TARGETS["startup_ratio"],
            "met": None if startup is None else startup <= TARGETS["startup_ratio"],
        },
        **start_up_checks(native, load, init_key, capture_seconds(native)),
        "decode": {
            "worst_batch": worst[0] if worst else None,
            "worst_paired_ratio": worst[1] if worst else None,
            "target": TARGETS["decode_parity"],
            "met": None if worst is None else abs(worst[1] - 1.0) <= TARGETS["decode_parity"],
        },
        "tokens": _tokens(compare),
        "starts": starts_of(native, load),
    }


def _tokens(compare: dict[str, Any]) -> dict[str, Any]:
    """Whether every compared run agrees with the reference run (compare.py: native warm where it ran, else
    native cold, else SAVE): the reference itself is no verdict, so a document without native warm is judged
    on the runs it has, and says against which."""
    judged = {m: c for m, c in compare.items() if not c.get("reference")}
    against = next((m for m, c in compare.items() if c.get("reference")), None)
    return {
        "identical": {m: bool(c.get("identical")) for m, c in judged.items()},
        "against": against or "native",
        "met": all(c.get("identical") for c in judged.values()) if judged else None,
    }
