"""Log-probabilities, compared bit for bit between processes: the top-k tokens and their log-probabilities at
every generated position, as each engine reports them, in one canonical form.

Greedy tokens hide a last-bit difference until it changes an argmax; the log-probabilities show it at once. An
engine's logprob is a float32 from the GPU turned into a Python float, which JSON carries exactly (Python writes
the shortest text that reads back as the same double), so equal here means equal in every bit.

Canonical form, per prompt: a list per generated position of ``[token_id, logprob]`` pairs, most likely first
(ties by token ID), as JSON lists. The benchmark keeps the full lists in memory only and writes a digest per
sequence with the comparison's figures, so that a committed result stays small.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["Top", "canonical", "compare_logprobs", "digests"]

Top = list[list[list[Any]]]  # one prompt's positions, each a list of [token_id, logprob]


def canonical(pairs: Iterable[tuple[int, float]]) -> list[list[Any]]:
    """One position's ``(token_id, logprob)`` pairs in the canonical order."""
    return [[int(t), float(lp)] for t, lp in sorted(pairs, key=lambda p: (-float(p[1]), int(p[0])))]


def digests(tops: Sequence[Sequence[Top]]) -> list[list[str]]:
    """Per request, per sequence: the SHA-256 (first 16 hex digits) of its canonical JSON."""
    return [[hashlib.sha256(json.dumps(seq).encode()).hexdigest()[:16] for seq in request] for request in tops]


def compare_logprobs(
    reference: Sequence[Sequence[Top]] | None,
    other: Sequence[Sequence[Top]] | None,
    reference_digests: Sequence[Sequence[str]] | None = None,
    other_digests: Sequence[Sequence[str]] | None = None,
) -> dict[str, Any]:
    """Per request: how many sequences' top-k lists are bit-identical, the first that is not, and where both
    runs' lists are in hand the largest difference of the same token's logprob at the same position (tokens in
    one list only: None, "the tokens differ"). Without the lists (a document rendered again), the
    digests decide identity alone."""
    if reference is not None and other is not None:
        per = []
        for ref, got in zip(reference, other, strict=False):
            same = [a == b for a, b in zip(ref, got, strict=False)]
            first = next((i for i, s in enumerate(same) if not s), None)
            per.append({"batch": len(ref), "identical": sum(same), "of": len(ref), "first_diff": first,
                        "max_abs_diff": _max_diff(ref, got)})  # fmt: skip
        identical = len(reference) == len(other) and all(p["identical"] == p["of"] for p in per)
        return {"identical": identical, "requests": per}
    if reference_digests is None or other_digests is None:
        return {"identical": False, "why": "no logprobs to compare"}
    per = []
    for ref_d, got_d in zip(reference_digests, other_digests, strict=False):
        same = [a == b for a, b in zip(ref_d, got_d, strict=False)]
        per.append({"batch": len(ref_d), "identical": sum(same), "of": len(ref_d),
                    "first_diff": next((i for i, s in enumerate(same) if not s), None)})  # fmt: skip
    identical = len(reference_digests) == len(other_digests) and all(p["identical"] == p["of"] for p in per)
    return {"identical": identical, "requests": per}


def _max_diff(ref: Sequence[Top], got: Sequence[Top]) -> float | None:
    worst = 0.0
    for a_seq, b_seq in zip(ref, got, strict=False):
        if len(a_seq) != len(b_seq):
            return None
        for a_pos, b_pos in zip(a_seq, b_seq, strict=True):
            a, b = {t: lp for t, lp in a_pos}, {t: lp for t, lp in b_pos}
            if a.keys() != b.keys():
                return None
            worst = max([worst, *(abs(a[t] - b[t]) for t in a)])
    return worst
