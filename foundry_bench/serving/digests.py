"""Where two runs first compute different bits, layer by layer (``--digests``): every engine process fingerprints
each attention layer's query, key, value and output, and each matrix product of the compiled model between them,
its input and output (stacksite/foundry_attention_digests.py); a run keeps, for each number of tokens a step ran,
the last call of each layer and product; two runs are compared at every token count both ran, in the order the
calls came, and the first call that differs is named with what differed in it.

Reading the comparison: a layer whose query differs got other inputs, so the difference arose before it (in the
compiled code since the previous layer's attention, or earlier, where the first layer's query differs); a layer
whose query, key and value agree and whose output does not computed attention differently. The same for a
product: the same input with another output is cuBLAS's doing; another input came from what ran before it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .stacks import site_path
from .stacksite import foundry_attention_digests as recorder

__all__ = ["TENSORS", "alike_groups", "compare", "env", "lines", "read", "start"]

# An attention layer's query, key, value and output; a matrix product's input and output (its ``q``, ``k``, ``v``
# None, an attention's ``in`` None). Documents written before products were recorded hold the first four only.
TENSORS = ("q", "k", "v", "out", "in")
MOST_SIZES = 64  # token counts a run keeps (the largest steps: the compared batches' prefills among them)


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
    """A run's fingerprints: ``{"calls": N, "processes": P, "sizes": {n: [[layer, q, k, v, out], ...]}}``, each
    size's layers in the order they first ran, each the last call of that layer at that size; the ``MOST_SIZES``
    largest sizes. Several recording processes (tensor parallel) are told apart by a ``rank<i>/`` prefix on the
    layer, by process id order. A line that does not parse (a process killed mid-write) is left out."""
    files = sorted(folder.glob("digests-*.jsonl"), key=lambda p: _pid(p.stem))
    sizes: dict[int, dict[str, list[Any]]] = {}
    calls = 0
    recording = 0
    for path in files:
        seen = False
        prefix = "" if len(files) == 1 else f"rank{recording}/"
        for line in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
                n, layer = int(entry["n"]), prefix + str(entry["layer"])
                prints = [entry.get(t) for t in TENSORS]
            except (ValueError, KeyError, TypeError):
                continue
            seen = True
            calls += 1
            sizes.setdefault(n, {})[layer] = prints  # dicts keep first insertion order: the layers' order
        recording += seen
    kept = sorted(sizes)[-MOST_SIZES:]
    return {
        "calls": calls,
        "processes": recording,
        "sizes": {str(n): [[layer, *prints] for layer, prints in sizes[n].items()] for n in kept},
    }


def _pid(stem: str) -> int:
    try:
        return int(stem.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


def _padded(prints: list[Any]) -> list[Any]:
    return [*prints, *[None] * (len(TENSORS) - len(prints))]


def compare(here: dict[str, Any], reference: dict[str, Any]) -> list[dict[str, Any]]:
    """At each token count both runs recorded (ascending): how many calls agree in all their tensors, and the first
    that does not, with the tensors that differ in it (``first``: None where every layer agrees); a layer one run
    has and the other has not counts as differing in every tensor."""
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


def alike_groups(results: dict[str, dict[str, Any]]) -> list[list[str]]:
    """The runs with fingerprints, in groups alike at every layer of every token count both of a pair ran (a run
    joins the first group whose first run it is alike with), in the results' order: which processes compute the
    same bits, whichever of them is the reference."""
    groups: list[list[str]] = []
    for mode, r in results.items():
        if "digests" not in r:
            continue
        for group in groups:
            rows = compare(r["digests"], results[group[0]]["digests"])
            if rows and all(row["first"] is None for row in rows):
                group.append(mode)
                break
        else:
            groups.append([mode])
    return groups


def lines(results: dict[str, dict[str, Any]], reference: str | None, labels: dict[str, str]) -> list[str]:
    """The report's lines: each run's fingerprints against the reference run's, at the token counts both ran."""
    if reference is None or "digests" not in results.get(reference, {}):
        return []
    ref = results[reference]["digests"]
    if not ref.get("sizes"):
        return ["", f"Attention layer by layer (--digests): {labels.get(reference, reference)} recorded no call"]
    out = []
    for mode, r in results.items():
        if mode == reference or "digests" not in r:
            continue
        rows = compare(r["digests"], ref)
        differing = [row for row in rows if row["first"] is not None]
        alike = len(rows) - len(differing)
        head = f"- {labels.get(mode, mode)}: {alike} of {len(rows)} token counts alike in every call"
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
    out.append(f"- alike at every layer and token count: {' '.join(named)}")
    title = (
        f"Attention layer by layer against {labels.get(reference, reference)} (--digests: each layer's query, key, "
        "value and output fingerprinted at each token count both runs ran; a differing query means the difference "
        "arose before that layer's attention, the same inputs with another output, in it; LAYER/mmI (addmmI, "
        "bmmI) is the I-th matrix product of the compiled model after that layer's attention, its input and output):"
    )
    return ["", title, *out]
