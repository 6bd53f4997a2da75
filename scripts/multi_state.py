"""What the two-GPU run's processes held where the NCCL kernel reads (scripts/gpu_multi.sh): for each rank,
SAVE's process against LOAD's before CUDAGraph.load, and LOAD's before against after it, word by word over the
communicator's device structure, and the region's allocation logs side by side.

    python3 scripts/multi_state.py WORK_DIR

Reads the state_<phase>_<rank>.json files tests/gpu/multi_rank.py writes (allocation-log kinds by name, as
foundry.allocation_events names them); no GPU.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

WORD = 8


def _load(work: Path, name: str) -> dict[str, Any] | None:
    try:
        doc = json.loads((work / f"state_{name}.json").read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _words(a: str, b: str, limit: int = 40) -> list[str]:
    ba, bb = bytes.fromhex(a), bytes.fromhex(b)
    out = []
    for at in range(0, min(len(ba), len(bb)), WORD):
        wa, wb = ba[at : at + WORD], bb[at : at + WORD]
        if wa != wb:
            out.append(f"  +{at:#06x}: {int.from_bytes(wa, 'little'):#x} -> {int.from_bytes(wb, 'little'):#x}")
    if len(out) > limit:
        out = [*out[:limit], f"  ... {len(out) - limit} more words differ"]
    return out


def _events(a: list[list[int]], b: list[list[int]]) -> list[str]:
    count = lambda ev: dict(Counter(e[0] for e in ev))  # noqa: E731
    lines = [f"  events {len(a)} vs {len(b)}; kinds {count(a)} vs {count(b)}"]
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if first is not None:
        lines.append(f"  first difference at event {first}:")
        for i in range(max(first - 2, 0), min(first + 6, max(len(a), len(b)))):
            ea = a[i] if i < len(a) else None
            eb = b[i] if i < len(b) else None
            show = lambda e: "-" if e is None else f"{e[0]} {e[1]:#x} size={e[2]:#x}"  # noqa: E731
            lines.append(f"   [{i}] {show(ea)} | {show(eb)}")
    maps = lambda ev: {(e[1], e[2]) for e in ev if e[0] == "vmm_map"}  # noqa: E731
    only_a, only_b = sorted(maps(a) - maps(b)), sorted(maps(b) - maps(a))
    lines.append(f"  maps only in the first: {[(hex(o), hex(n)) for o, n in only_a[:12]]}")
    lines.append(f"  maps only in the second: {[(hex(o), hex(n)) for o, n in only_b[:12]]}")
    return lines


def compare(work: Path, first: str, second: str) -> list[str]:
    a, b = _load(work, first), _load(work, second)
    if a is None or b is None:
        return [f"{first} vs {second}: missing ({'first' if a is None else 'second'})"]
    lines = [f"{first} vs {second}:"]
    for doc in (a, b):
        if "error" in doc:
            lines.append(f"  {doc['name']} error: {doc['error']}")
    lines.append(f"  comm pointer {a.get('comm', 0):#x} vs {b.get('comm', 0):#x}")
    if "comm_bytes" in a and "comm_bytes" in b:
        zero = bytes.fromhex(b["comm_bytes"]).count(0) == len(bytes.fromhex(b["comm_bytes"]))
        lines.append(f"  second's structure all zero: {zero}")
        lines.extend(_words(a["comm_bytes"], b["comm_bytes"]) or ["  structure identical"])
    lines.extend(_events(a.get("events", []), b.get("events", [])))
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    work = Path(argv[0])
    for rank in (0, 1):
        for first, second in ((f"save_{rank}", f"load_before_{rank}"), (f"load_before_{rank}", f"load_after_{rank}")):
            print("\n".join(compare(work, first, second)))
    print("\n".join(compare(work, "save_0", "save.again_0")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
