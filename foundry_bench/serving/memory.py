"""A run's memory profile against its reference run's, for the reports and the architecture matrix: what the
engine sized from the free memory it found (vLLM's KV cache tokens and capture memory, SGLang's token pool).
SAVE's region may place memory otherwise than the driver would, and a KV cache a granule smaller changes no
answer, so the identity column cannot show it; these lines do."""

from __future__ import annotations

from typing import Any

__all__ = ["memory_profile", "memory_profile_lines"]


def memory_profile(doc: dict[str, Any], mode: str) -> str:
    """Whether ``mode``'s memory profile (what the engine sized from free memory: vLLM's KV cache tokens and
    capture memory, SGLang's token pool) is its reference run's: "-" where either run did not log it."""
    c = doc.get("compare", {}).get(mode) or {}
    if "memory_profile" not in c:
        return "-"
    if c.get("same_memory_profile"):
        return f"as {c.get('against', 'native')}'s"
    return "; ".join(f"{k} {_num(v['here'])} vs {_num(v['reference'])}" for k, v in c["memory_profile"].items()
                     if v["here"] != v["reference"])  # fmt: skip


def _num(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def memory_profile_lines(doc: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """The report's line per compared run on its memory profile against the reference's: a KV cache sized
    otherwise holds another number of tokens without changing an answer, so the identity column cannot show it."""
    lines = [
        f"- {labels.get(mode, mode)}: {memory_profile(doc, mode)}"
        for mode in doc.get("compare", {})
        if memory_profile(doc, mode) != "-"
    ]
    return ["", "Memory profile against the reference run (KV cache, capture memory, as each engine logged them):",
            *lines] if lines else []  # fmt: skip
