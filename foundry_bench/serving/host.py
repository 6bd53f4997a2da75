"""The machine and checkout a serving benchmark runs on, as its document records them: the commit, the GPU and
driver, and how many GPUs there are (a data-parallel replica needs more than one engine's)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["commit", "machine", "visible_gpus"]


def commit(checkout: Path) -> str:
    """The commit the benchmark ran: ``$FOUNDRY_COMMIT`` (a copied tree has no .git), else git's, else "-"."""
    named = os.environ.get("FOUNDRY_COMMIT", "").strip()
    if named:
        return named
    try:
        return subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip() or "-"  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "-"


def machine() -> dict[str, str]:
    """The GPU and driver as nvidia-smi names them (empty where there is none)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return {}
    name, _, driver = out.splitlines()[0].partition(",") if out.strip() else ("", "", "")
    return {"gpu": name.strip(), "driver": driver.strip()}


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them (a benchmark in a lane of
    scripts/gpu_lanes.sh sees its lane's), else every GPU nvidia-smi lists, by index (none where there is none)."""
    named = os.environ.get("CUDA_VISIBLE_DEVICES")
    if named is not None:
        return [g.strip() for g in named.split(",") if g.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i in range(sum(1 for line in out.splitlines() if line.startswith("GPU ")))]
