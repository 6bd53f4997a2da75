"""The two-GPU run's report (scripts/gpu_multi.sh): the phases' JSON lines joined into one document, and its
summary, a line per rank and phase.

    python3 scripts/multi_summary.py join OUT       OUT/multi-save.json + OUT/multi-load.json (+ OUT/multi-ipc.json,
                                                    the run sharing region memory by IPC handle) -> stdout
    python3 scripts/multi_summary.py show FILE      the summary of a joined document
    python3 scripts/multi_summary.py probe SAVE LOAD the custom all-reduce probe's two phases
                                                    (tests/gpu/custom_ar_probe.py), a line per rank and phase
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _last(path: Path) -> dict[str, Any]:
    """The JSON line a phase printed last, or {} when it printed none (it failed, or ran out of time)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def join(out: Path) -> dict[str, Any]:
    save, load = _last(out / "multi-save.json"), _last(out / "multi-load.json")
    if "skipped" in save:
        return {"skipped": save["skipped"]}
    doc: dict[str, Any] = {"save": save.get("save", []), "load": load.get("load", [])}
    ipc = _last(out / "multi-ipc.json")
    if ipc:
        doc["ipc"] = {"save": ipc.get("save", []), "load": ipc.get("load", [])}
    return doc


def show(doc: dict[str, Any], prefix: str = "") -> list[str]:
    if "skipped" in doc:
        return [f"skipped: {doc['skipped']}"]
    lines = []
    for o in doc.get("save", []):
        what = (
            f"saved peers={o.get('peers')} bytes={o.get('peer_bytes')} types={o.get('handle_types')}"
            if o.get("saved")
            else f"{o.get('error')}: {o.get('message')}"
        )
        lines.append(f"{prefix}save rank {o.get('rank')} {what} exit={o.get('exitcode')}")
    for o in doc.get("load", []):
        failed = f"{o.get('error') or 'DIFFERS'}: {str(o.get('message', ''))[:300]}"
        what = "identical" if o.get("identical") else failed
        eager = o.get("eager_after_load")
        lines.append(f"{prefix}load rank {o.get('rank')} {what} eager_after_load={eager} exit={o.get('exitcode')}")
    if not lines:
        lines.append(f"{prefix}no phase reported: see multi-save.log and multi-load.log (multi-ipc.log)")
    if "ipc" in doc:
        lines += show(doc["ipc"], "region memory by IPC handle: ")
    return lines


def probe(save: dict[str, Any], load: dict[str, Any]) -> list[str]:
    """The custom all-reduce probe: whether SAVE's registration used Foundry's handles, its offsets and slots, the
    peers it recorded and the native replay; whether LOAD, its slots written again, replayed identically or what
    refused it."""
    if "skipped" in save:
        return [f"skipped: {save['skipped']}"]
    lines = []
    for phase, doc in (("save", save), ("load", load)):
        for o in doc.get(phase, []):
            if o.get("error"):
                what = f"{o['error']}: {str(o.get('message', ''))[:300]}"
            elif phase == "save":
                what = (f"saved foundry_handles={o.get('foundry_handles')} offsets={o.get('offsets')} "
                        f"native_ok={o.get('native_ok')} registration={o.get('registration')} "
                        f"peers={o.get('peers')}")  # fmt: skip
            else:
                what = ("identical" if o.get("identical") else "DIFFERS") + f", slots written {o.get('slots')}"
            lines.append(f"{phase} rank {o.get('rank')} {what} exit={o.get('exitcode')}")
    return lines or ["no phase reported: see custom-ar-save.log and custom-ar-load.log"]


def main(argv: list[str]) -> int:
    if not ((len(argv) == 2 and argv[0] in ("join", "show")) or (len(argv) == 3 and argv[0] == "probe")):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "join":
        print(json.dumps(join(Path(argv[1]))))
    elif argv[0] == "probe":
        print("\n".join(probe(_last(Path(argv[1])), _last(Path(argv[2])))))
    else:
        print("\n".join(show(_last(Path(argv[1])))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
