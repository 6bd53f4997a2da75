"""What the benchmark's runs are compared by: each run's tokens, log-probabilities and memory profile against a
reference run's (the warm native run's where there is one)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .fresh import FRESH_MODES
from .logprobs import Top, Values, compare_logprobs
from .stats import compare_tokens

__all__ = ["answer_groups", "compare_runs", "group_alike", "reference_run"]


def reference_run(results: dict[str, dict[str, Any]]) -> str | None:
    """The run the others are compared with: the warm native run, else the cold one, else SAVE (whose graphs are
    captured natively in its own process); the first of them that answered."""
    return next((m for m in ("native", "native_cold", "save") if "tokens" in results.get(m, {})), None)


def compare_runs(
    results: dict[str, dict[str, Any]],
    vals: dict[str, list[list[Values]]] | None = None,
    tops: dict[str, list[list[Top]]] | None = None,
    profile_keys: tuple[str, ...] = (),
) -> dict[str, dict[str, Any]]:
    """Each run's tokens and log-probabilities against the reference's: the warm native run's, else the cold
    one's, else (no native run asked for) SAVE's, whose graphs are captured natively in its own process. The
    reference itself is marked so; a run without tokens, or with no reference to compare with, is not
    identical, and says why. ``identical`` needs the tokens and, where the runs wrote them, the log-probabilities
    (``tops`` in full where the runs are in hand, else their digests) to be equal."""
    vals, tops = vals or {}, tops or {}
    reference = reference_run(results)
    out: dict[str, dict[str, Any]] = {}
    for mode, r in results.items():
        if mode not in ("save", "load", "native_cold", "load_replica", "load_again", *FRESH_MODES):
            continue
        if mode == reference:
            out[mode] = {"identical": None, "reference": True}
        elif "tokens" not in r:
            out[mode] = {"identical": False, "why": r.get("error", r.get("skipped", "no tokens"))}
        elif reference is None:
            out[mode] = {"identical": False, "why": "no run to compare with"}
        else:
            tokens = compare_tokens(results[reference]["tokens"], r["tokens"])
            out[mode] = {**tokens, "against": reference}
            ref = results[reference]
            profile = {k: {"here": r[k], "reference": ref[k]} for k in profile_keys if k in r and k in ref}
            if profile:
                out[mode]["memory_profile"] = profile
                out[mode]["same_memory_profile"] = all(v["here"] == v["reference"] for v in profile.values())
            if "logprob_digests" in r or "logprob_digests" in ref:
                logprobs = compare_logprobs(
                    vals.get(reference), vals.get(mode), ref.get("logprob_digests"), r.get("logprob_digests"),
                    tops.get(reference), tops.get(mode),
                )  # fmt: skip
                out[mode].update(
                    identical=tokens["identical"] and logprobs["identical"],
                    tokens_identical=tokens["identical"],
                    logprobs=logprobs,
                )
    again, load = results.get("load_again", {}), results.get("load", {})
    if "load_again" in out and "tokens" in again and "tokens" in load:
        # Two LOAD processes: do they answer alike, whatever native answers?
        out["load_again"]["same_as_load"] = again["tokens"] == load["tokens"] and again.get(
            "logprob_digests"
        ) == load.get("logprob_digests")
    return out


def group_alike(modes: Iterable[str], alike: Callable[[str, str], bool]) -> list[list[str]]:
    """``modes`` in groups, in their order: each joins the first group whose first member it is ``alike`` with,
    else starts its own."""
    groups: list[list[str]] = []
    for mode in modes:
        for group in groups:
            if alike(mode, group[0]):
                group.append(mode)
                break
        else:
            groups.append([mode])
    return groups


def answer_groups(results: dict[str, dict[str, Any]]) -> list[list[str]]:
    """The runs that answered, in groups that gave the same tokens and log-probabilities at every compared batch
    (by the digests each run keeps), in the results' order: which processes computed the same bits, whichever of
    them is the reference. Where the reference run is alone in its group while others agree with each other, the
    difference is that process's, not Foundry's; the comparison with the reference cannot say so by itself."""

    def answers(mode: str) -> tuple[Any, Any]:
        return results[mode]["tokens"], results[mode].get("logprob_digests")

    return group_alike([m for m, r in results.items() if "tokens" in r], lambda a, b: answers(a) == answers(b))
