"""Where two runs first compute different bits, call by call (``--digests``): every engine process fingerprints
each attention layer's query, key, value and output, and each matrix product of the compiled model between them,
its input and output (stacksite/foundry_attention_digests.py). A run keeps its calls in the order they ran (the
first ``MOST_CALLS`` of each process), and two runs are compared call by call: the first call that differs is
named, with what differed in it, and every call anywhere whose inputs agree and whose output does not is counted.
Documents written before the order was kept hold, per number of tokens a step ran, the last call of each layer and
product (``sizes``): those are still compared at every token count both ran.

Reading the comparison: a call whose input already differs got it from what ran since the call before (the
compiled model's own kernels, between two recorded calls), or earlier; a call whose inputs agree and whose output
does not computed differently itself (an attention kernel, or cuBLAS for a product). No call of that second kind
anywhere, with outputs that part, says the difference arises in the code no call records: Inductor's kernels."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .compare import group_alike
from .stacks import site_path
from .stacksite import foundry_attention_digests as recorder

__all__ = ["TENSORS", "alike_groups", "compare", "compare_calls", "env", "lines", "read", "start"]

# An attention layer's query, key, value and output; a matrix product's input and output (its ``q``, ``k``, ``v``
# None, an attention's ``in`` None). Documents written before products were recorded hold the first four only.
TENSORS = ("q", "k", "v", "out", "in")
# Calls a run keeps in order, per process: the compared batches' prefills of a small shape take a few hundred
# (decode steps replay full graphs, which record nothing), and a document stays well under a megabyte.
MOST_CALLS = 2000


def env(folder: Path, path: str) -> dict[str, str]:
    """The variables that make every process of an engine record into ``folder``: the site folder first on
    ``path`` (the engine's ``PYTHONPATH``), once."""
    return {recorder.ENV: str(folder), "PYTHONPATH": site_path(path)}


def start(folder: Path) -> None:
    """Has the engine's processes record from now on (they record nothing during start-up, whose memory layout
    SAVE writes and LOAD checks: stacksite/foundry_attention_digests.py, ``START_FILE``)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / recorder.START_FILE).touch()


def read(folder: Path) -> dict[str, Any]:
    """A run's fingerprints: ``{"calls": N, "processes": P, "sequence": [[n, layer, q, k, v, out, in], ...]}``, each
    process's first ``MOST_CALLS`` calls in the order they ran, process after process, each fingerprint shortened
    (``_short``). Several recording processes (tensor parallel) are told apart by a ``rank<i>/`` prefix on the
    layer, by process id order. A line that does not parse (a process killed mid-write) is left out."""
    files = sorted(folder.glob("digests-*.jsonl"), key=lambda p: _pid(p.stem))
    sequence: list[list[Any]] = []
    calls = 0
    recording = 0
    for path in files:
        kept = 0
        prefix = "" if len(files) == 1 else f"rank{recording}/"
        for line in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
                n, layer = int(entry["n"]), prefix + str(entry["layer"])
                prints = [_short(entry.get(t)) for t in TENSORS]
            except (ValueError, KeyError, TypeError):
                continue
            calls += 1
            if kept < MOST_CALLS:
                sequence.append([n, layer, *prints])
            kept += 1
        recording += kept > 0
    return {"calls": calls, "processes": recording, "sequence": sequence}


def _short(fingerprint: Any) -> str | None:
    """A fingerprint in 12 hex digits, for the calls' order (equal fingerprints, equal strings; a document of a few
    hundred calls per run stays small)."""
    if fingerprint is None:
        return None
    return hashlib.sha256(json.dumps(fingerprint).encode()).hexdigest()[:12]


def _pid(stem: str) -> int:
    try:
        return int(stem.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


def _padded(prints: list[Any]) -> list[Any]:
    return [*prints, *[None] * (len(TENSORS) - len(prints))]


def compare(here: dict[str, Any], reference: dict[str, Any]) -> list[dict[str, Any]]:
    """Documents written before the calls' order was kept (``sizes``: per token count, the last call of each layer
    in the order the layers first ran): at each token count both runs recorded (ascending), how many calls agree in
    all their tensors, and the first that does not, with the tensors that differ in it (``first``: None where every
    layer agrees); a layer one run has and the other has not counts as differing in every tensor."""
    out = []
    mine, theirs = here.get("sizes", {}), reference.get("sizes", {})
    for size in sorted(set(mine) & set(theirs), key=int):
        a = {row[0]: _padded(row[1:]) for row in mine[size]}
        b = {row[0]: _padded(row[1:]) for row in theirs[size]}
        order = [row[0] for row in theirs[size]] + [row[0] for row in mine[size] if row[0] not in b]
        first = None
        same = 0
        for layer in order:
            x, y = a.get(layer), b.get(layer)
            if x is None or y is None:  # what the row one run has holds, else an attention's four
                held = x if x is not None else y
                differ = [t for t, p in zip(TENSORS, held or [], strict=False) if p is not None] or list(TENSORS[:4])
            else:
                differ = [t for t, p, q in zip(TENSORS, x, y, strict=True) if p != q]
            if differ:
                first = first or {"layer": layer, "index": order.index(layer), "differ": differ}
            else:
                same += 1
        out.append({"n": int(size), "layers": len(order), "same": same, "first": first})
    return out


_INPUTS = {"q", "k", "v", "in"}  # what a call was given; "out" is what it computed


def compare_calls(here: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any] | None:
    """Both runs' calls in the order they ran, each process (tensor-parallel rank) against the same rank's (None
    where either document kept no order): how many were compared (those both ran: a run that ran more, its timing
    steps after the compared batches, is compared as far as the other ran), the first that differs (``first``: its
    index among its rank's calls, tokens, layer and the tensors that differ, None where all agree; ``"order"`` among
    them where the two runs ran another layer or token count there, after which that rank is compared no further),
    and ``own``: how many of the calls compared had inputs that agree and an output that does not, with the first."""
    mine, theirs = here.get("sequence"), reference.get("sequence")
    if mine is None or theirs is None:
        return None
    first = None
    own: list[dict[str, Any]] = []
    compared = 0
    ours = _by_rank(mine)
    for rank, calls in _by_rank(theirs).items():
        for i, (a, b) in enumerate(zip(ours.get(rank, []), calls, strict=False)):
            if a[:2] != b[:2]:
                first = first or {"index": i, "n": b[0], "layer": b[1], "differ": ["order"], "here": a[:2]}
                break
            compared += 1
            x, y = _padded(a[2:]), _padded(b[2:])
            differ = [t for t, p, q in zip(TENSORS, x, y, strict=True) if p != q]
            if differ and first is None:
                first = {"index": i, "n": a[0], "layer": a[1], "differ": differ}
            if differ and not _INPUTS & set(differ):
                own.append({"index": i, "n": a[0], "layer": a[1]})
    return {"calls": compared, "first": first, "own": len(own), "first_own": own[0] if own else None}


def _by_rank(sequence: list[list[Any]]) -> dict[str, list[list[Any]]]:
    """A run's calls per recording process, by the ``rank<i>/`` prefix ``read`` gives their layers ("" for one)."""
    ranks: dict[str, list[list[Any]]] = {}
    for call in sequence:
        layer = str(call[1])
        rank = layer.split("/", 1)[0] if layer.startswith("rank") and "/" in layer else ""
        ranks.setdefault(rank, []).append(call)
    return ranks


def _alike(here: dict[str, Any], reference: dict[str, Any]) -> bool:
    calls = compare_calls(here, reference)
    if calls is not None:
        return calls["first"] is None
    rows = compare(here, reference)
    return bool(rows) and all(row["first"] is None for row in rows)


def alike_groups(results: dict[str, dict[str, Any]]) -> list[list[str]]:
    """The runs with fingerprints, in groups alike in every call both of a pair ran (by token count in documents
    that kept no order; a run joins the first group whose first run it is alike with), in the results' order:
    which processes compute the same bits, whichever of them is the reference."""
    with_prints = [mode for mode, r in results.items() if "digests" in r]
    return group_alike(with_prints, lambda a, b: _alike(results[a]["digests"], results[b]["digests"]))


def _call_lines(label: str, calls: dict[str, Any]) -> list[str]:
    first = calls["first"]
    if first is None:
        return [f"- {label}: alike in all {calls['calls']} calls both ran"]
    if "order" in first["differ"]:
        said = (
            f"- {label}: alike in the {calls['calls']} calls before; call {first['index'] + 1} was "
            f"{first['here'][1]} at {first['here'][0]} tokens here, {first['layer']} at {first['n']} in the reference"
        )
    else:
        why = (
            "its input already differs: the kernels since the call before computed it differently"
            if _INPUTS & set(first["differ"])
            else "same input, another output: this call computed differently itself"
        )
        at = f"call {first['index'] + 1} of {calls['calls']}, {first['layer']} at {first['n']} tokens"
        said = f"- {label}: first differs at {at}, in {', '.join(first['differ'])} ({why})"
    own = calls["first_own"]
    tail = (
        "no call had the same input and another output"
        if own is None
        else f"{calls['own']} calls had the same input and another output, the first {own['layer']} at {own['n']} "
        "tokens"
    )
    return [said, f"  {tail}"]


def lines(results: dict[str, dict[str, Any]], reference: str | None, labels: dict[str, str]) -> list[str]:
    """The report's lines: each run's fingerprints against the reference run's, call by call (by token count for
    documents that kept no order)."""
    if reference is None or "digests" not in results.get(reference, {}):
        return []
    ref = results[reference]["digests"]
    if not ref.get("sequence") and not ref.get("sizes"):
        return ["", f"Attention layer by layer (--digests): {labels.get(reference, reference)} recorded no call"]
    out = []
    for mode, r in results.items():
        if mode == reference or "digests" not in r:
            continue
        label = labels.get(mode, mode)
        calls = compare_calls(r["digests"], ref)
        if calls is not None:
            out += _call_lines(label, calls)
            continue
        rows = compare(r["digests"], ref)
        differing = [row for row in rows if row["first"] is not None]
        alike = len(rows) - len(differing)
        head = f"- {label}: {alike} of {len(rows)} token counts alike in every call"
        out.append(head + (":" if differing else ""))
        for row in differing:
            first = row["first"]
            out.append(
                f"  {row['n']} tokens: first differs at {first['layer']} (call {first['index']} of the step), in "
                f"{', '.join(first['differ'])}; {row['same']} of {row['layers']} calls alike"
            )
    if not out:
        return []
    groups = alike_groups(results)
    named = ["{" + ", ".join(labels.get(m, m) for m in g) + "}" for g in groups]
    out.append(f"- alike in every call: {' '.join(named)}")
    title = (
        f"Attention and matrix products call by call against {labels.get(reference, reference)} (--digests: each "
        "layer's query, key, value and output, and each matrix product the compiled model runs outside graphs, its "
        "input and output, fingerprinted in the order they ran; LAYER/mmI (addmmI, bmmI) is the I-th product after "
        "that layer's attention):"
    )
    return ["", title, *out]
