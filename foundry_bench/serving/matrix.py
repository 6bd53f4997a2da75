"""The architecture matrix (`foundry bench --engine vllm|sglang --matrix`): one row per architecture, from the
benchmark documents of its runs in one folder, so that a matrix run over several calls of a GPU machine (each
a few shapes) still ends in one table. Each row says whether SAVE's and LOAD's tokens and top log-probabilities
are bit-identical to native's, and how the engine's start-up compares."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from foundry.probe import table

from .memory import memory_profile
from .report import fmt
from .shapes import MATRIX, SHAPES

__all__ = ["HEADER", "matrix_rows", "write_matrix"]

HEADER = ["shape", "architecture", "run as", "SAVE identical", "LOAD identical", "native vs native",
          "SAVE's memory profile", "init native warm s", "init LOAD s", "capture s", "GPU", "commit",
          "problem"]  # fmt: skip


def _verdict(doc: dict[str, Any], mode: str) -> str:
    c = doc.get("compare", {}).get(mode)
    r = doc.get("results", {}).get(mode, {})
    if c is None:
        return "not run" if not r else f"no: {r.get('error', r.get('skipped', '?'))[:60]}"
    if c.get("reference"):
        return "reference"
    if c.get("identical"):
        return "yes (tokens, logprobs)" if "logprobs" in c else "yes (tokens)"
    verdict = "NO: logprobs differ" if c.get("tokens_identical") else "NO"
    return f"{verdict} ({_counts(c)})" if c.get("requests") else verdict


def _counts(c: dict[str, Any]) -> str:
    """How many sequences were identical at each batch: tokens, then (where compared) log-probabilities, and the
    largest log-probability difference, e.g. ``tokens 1/1, 8/8, 62/64; logprobs 0/1, 0/8, 2/64, max 0.0039``."""

    def per_batch(requests: list[dict[str, Any]]) -> str:
        return ", ".join(f"{r['identical']}/{r['of']}" for r in requests)

    text = f"tokens {per_batch(c['requests'])}"
    logprobs = (c.get("logprobs") or {}).get("requests")
    if logprobs:
        worst = max((r.get("max_abs_diff") or 0.0) for r in logprobs)
        text += f"; logprobs {per_batch(logprobs)}, max {worst:.2g}"
    return text


def _init_s(r: dict[str, Any]) -> Any:
    return r.get("init_engine_s", r.get("engine_init_s"))


def matrix_rows(docs: list[dict[str, Any]]) -> list[list[str]]:
    """One row per document, in the matrix's order (other shapes after it)."""
    order = {s: i for i, s in enumerate(MATRIX)}
    rows = []
    for doc in sorted(docs, key=lambda d: (order.get(d["config"]["shape"], len(order)), d["config"]["shape"])):
        cfg, results = doc["config"], doc.get("results", {})
        shape = cfg["shape"]
        run_as = "/".join(str(cfg[k]) for k in ("api", "runner", "cudagraph_mode") if k in cfg)
        # the environment every run had (--env, or a numerics switch inherited): the reference the row was held to
        run_as += "".join(f" {k}={v}" for k, v in sorted((cfg.get("extra_env") or {}).items()))
        problems = [f"{m}: {r['error'][:80]}" for m, r in results.items() if "error" in r]
        native, load = results.get("native", {}), results.get("load", {})
        capture = native.get("capture_s", (native.get("plugin") or {}).get("timings", {}).get("capture_s"))
        if capture is None and "decode_graphs_s" in native:  # SGLang logs its two captures apart
            capture = native["decode_graphs_s"] + native.get("prefill_graphs_s", 0.0)
        rows.append([
            shape, (SHAPES.get(shape) or doc.get("model") or {}).get("architectures", ["?"])[0], run_as,
            _verdict(doc, "save"), _verdict(doc, "load"), _verdict(doc, "native_cold"), memory_profile(doc, "save"),
            fmt(_init_s(native)), fmt(_init_s(load)), fmt(capture),
            (doc.get("machine") or {}).get("gpu", "-"), str(doc.get("commit", "-")), "; ".join(problems) or "-",
        ])  # fmt: skip
    return rows


def write_matrix(out: Path, engine: str) -> str:
    """``OUT/<engine>-matrix.txt`` and ``.json`` from every ``OUT/<engine>-*.json`` benchmark document; returns
    the table."""
    docs = []
    for path in sorted(out.glob(f"{engine}-*.json")):
        if path.name.startswith(f"{engine}-matrix"):
            continue
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("config"), dict) and "shape" in doc["config"]:
            docs.append(doc)
    rows = matrix_rows(docs)
    text = (
        f"{engine} architecture matrix: tokens and top log-probabilities of SAVE and LOAD against native's, "
        "bit for bit, each run in a fresh process\n\n" + table(HEADER, rows) + "\n"
    )
    (out / f"{engine}-matrix.txt").write_text(text)
    (out / f"{engine}-matrix.json").write_text(json.dumps({"header": HEADER, "rows": rows}, indent=1) + "\n")
    return text
