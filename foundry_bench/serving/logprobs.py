"""Log-probabilities, compared bit for bit between processes: at every generated position, the sampled token's
log-probability and the top-k log-probabilities as each engine reports them.

Greedy tokens hide a last-bit difference until it changes an argmax; the log-probabilities show it at once. An
engine's logprob is a float32 from the GPU turned into a Python float, which JSON carries exactly (Python writes
the shortest text that reads back as the same double), so equal here means equal in every bit.

What is compared is the values, not which token IDs hold them: where two tokens have exactly the same
log-probability at the edge of the top k (soft-capped logits make such ties common), an engine's top-k may list
either, and vLLM does so differently from one process to the next. Per position the comparison takes the sampled
token's logprob and the top-k values in descending order; two runs are identical when every one is equal. How
many sequences also list the same token IDs is reported beside it.

Canonical form of an engine's answer, per prompt: a list per generated position of ``[token_id, logprob]`` pairs,
most likely first (ties by token ID). The benchmark keeps the lists in memory only and writes a digest of each
sequence's values with the comparison's figures, so that a committed result stays small.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["Top", "canonical", "compare_logprobs", "digests", "repeated", "values"]

Top = list[list[list[Any]]]  # one prompt's positions, each a list of [token_id, logprob]
Values = list[list[Any]]  # one prompt's positions, each [sampled token's logprob or None, [top-k values]]


def canonical(pairs: Iterable[tuple[int, float]]) -> list[list[Any]]:
    """One position's ``(token_id, logprob)`` pairs in the canonical order."""
    return [[int(t), float(lp)] for t, lp in sorted(pairs, key=lambda p: (-float(p[1]), int(p[0])))]


def values(tops: Sequence[Sequence[Top]], tokens: Sequence[Sequence[Sequence[int]]]) -> list[list[Values]]:
    """Per request, per sequence, per position: the sampled token's logprob (None where the engine's list does
    not hold it) and the top-k values, most likely first."""
    out = []
    for request_tops, request_tokens in zip(tops, tokens, strict=False):
        seqs = []
        for seq, sampled in zip(request_tops, request_tokens, strict=False):
            positions = []
            for pos, token in zip(seq, sampled, strict=False):
                by_id = {t: lp for t, lp in pos}
                positions.append([by_id.get(token), [lp for _, lp in pos]])
            seqs.append(positions)
        out.append(seqs)
    return out


def digests(requests: Sequence[Sequence[Any]]) -> list[list[str]]:
    """Per request, per sequence: the SHA-256 (first 16 hex digits) of the sequence as JSON (its tokens, or its
    values)."""
    return [[hashlib.sha256(json.dumps(seq).encode()).hexdigest()[:16] for seq in request] for request in requests]


def compare_logprobs(
    reference: Sequence[Sequence[Values]] | None,
    other: Sequence[Sequence[Values]] | None,
    reference_digests: Sequence[Sequence[str]] | None = None,
    other_digests: Sequence[Sequence[str]] | None = None,
    reference_tops: Sequence[Sequence[Top]] | None = None,
    other_tops: Sequence[Sequence[Top]] | None = None,
) -> dict[str, Any]:
    """Per request: how many sequences' values are bit-identical, the first that is not, and where both runs'
    lists are in hand the earliest generated position at which any sequence differs (0: the prefill's token; a
    later one: a decode step) and the largest difference between values at the same place (None where the
    positions or the list lengths differ), and how many sequences list the same token IDs too. Without the
    lists (a document rendered again), the digests decide identity alone."""
    if reference is not None and other is not None:
        per = []
        for i, (ref, got) in enumerate(zip(reference, other, strict=False)):
            same = [a == b for a, b in zip(ref, got, strict=False)]
            row: dict[str, Any] = {
                "batch": len(ref),
                "identical": sum(same),
                "of": len(ref),
                "first_diff": next((k for k, s in enumerate(same) if not s), None),
                "max_abs_diff": _max_diff(ref, got),
                "first_position": _first_position(ref, got),
            }
            if reference_tops is not None and other_tops is not None:
                row["ids_identical"] = sum(a == b for a, b in zip(reference_tops[i], other_tops[i], strict=False))
            per.append(row)
        identical = len(reference) == len(other) and all(p["identical"] == p["of"] for p in per)
        return {"identical": identical, "requests": per}
    if reference_digests is None or other_digests is None:
        return {"identical": False, "why": "no logprobs to compare"}
    per = []
    for ref_d, got_d in zip(reference_digests, other_digests, strict=False):
        same = [a == b for a, b in zip(ref_d, got_d, strict=False)]
        per.append({"batch": len(ref_d), "identical": sum(same), "of": len(ref_d),
                    "first_diff": next((k for k, s in enumerate(same) if not s), None)})  # fmt: skip
    identical = len(reference_digests) == len(other_digests) and all(p["identical"] == p["of"] for p in per)
    return {"identical": identical, "requests": per}


def _max_diff(ref: Sequence[Values], got: Sequence[Values]) -> float | None:
    worst = 0.0
    for a_seq, b_seq in zip(ref, got, strict=False):
        if len(a_seq) != len(b_seq):
            return None
        for (a_lp, a_top), (b_lp, b_top) in zip(a_seq, b_seq, strict=True):
            if (a_lp is None) != (b_lp is None) or len(a_top) != len(b_top):
                return None
            pairs = [*zip(a_top, b_top, strict=True), *([(a_lp, b_lp)] if a_lp is not None else [])]
            worst = max([worst, *(abs(x - y) for x, y in pairs)])
    return worst


def _first_position(ref: Sequence[Values], got: Sequence[Values]) -> int | None:
    """The earliest generated position at which any sequence's values differ, None where none does. Where it
    lies tells which step first computed differently: the prefill (position 0) or a decode step, each of which
    an engine runs with or without a graph depending on its size."""
    firsts = [next((k for k, (a, b) in enumerate(zip(a_seq, b_seq, strict=False)) if a != b),
                   None if len(a_seq) == len(b_seq) else min(len(a_seq), len(b_seq)))
              for a_seq, b_seq in zip(ref, got, strict=False)]  # fmt: skip
    found = [f for f in firsts if f is not None]
    return min(found) if found else None


def repeated(first: Sequence[Any], again: Sequence[Any], batches: Sequence[int]) -> list[dict[str, int]]:
    """One process's two answers to the same requests, compared batch by batch: how many sequences agree in
    their tokens, and in tokens and log-probabilities both (``Answer``-like: ``tokens``, ``top``)."""
    out = []
    for batch, a, b in zip(batches, first, again, strict=False):
        tokens = sum(x == y for x, y in zip(a.tokens, b.tokens, strict=False))
        va = values([a.top or []], [a.tokens])[0] if a.top else [None] * len(a.tokens)
        vb = values([b.top or []], [b.tokens])[0] if b.top else [None] * len(b.tokens)
        both = sum(x == y and p == q for x, y, p, q in zip(a.tokens, b.tokens, va, vb, strict=False))
        out.append({"batch": batch, "of": len(a.tokens), "tokens": tokens, "identical": both})
    return out
