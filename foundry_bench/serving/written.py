"""What each warm run wrote into the machine's own caches: the files that are new or changed in the engine's
and its compilers' cache folders between the run's start and its end (or the next run's start: ``WarmWrites``).
A warm run that writes there compiled or tuned something the caches did not hold; under LOAD, that is work a
native warm run may not do, or may do differently (Inductor writes a ``.best_config`` beside a kernel whose
launch configuration it chose by timing: a choice made again in each process that finds none, whose last bits
may differ from another process's).

Only the folders below are read (not the whole home, which may hold models): each is what the run's
environment points at, or the engine's default.
"""

from __future__ import annotations

import getpass
import json
import os
import tempfile
from pathlib import Path

from .fresh import files_below, listed, triton_kernels

__all__ = ["BEST_CONFIG", "WarmWrites", "cache_folders", "changes", "snapshot", "written_lines"]

BEST_CONFIG = ".best_config"  # Inductor's record of a kernel configuration chosen by timing
_NAMES_KEPT = 20  # .best_config files named per run, at most
# Inductor's own bookkeeping in a .best_config, not the choice: two processes that chose alike differ in it.
_NOT_THE_CHOICE = ("time_taken_ms",)
Snapshot = dict[str, dict[str, tuple[int, int]]]  # cache -> relative path -> (size, mtime in ns)


def cache_folders(env: dict[str, str]) -> dict[str, Path]:
    """The machine's cache folders a warm run of either engine may write, by name, as ``env`` points them."""
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    xdg = Path(env.get("XDG_CACHE_HOME") or home / ".cache")
    user = env.get("USER") or getpass.getuser()
    return {
        "vllm": Path(env.get("VLLM_CACHE_ROOT") or xdg / "vllm"),
        "triton": Path(env.get("TRITON_CACHE_DIR") or home / ".triton" / "cache"),
        "inductor": Path(env.get("TORCHINDUCTOR_CACHE_DIR") or Path(tempfile.gettempdir()) / f"torchinductor_{user}"),
        "tvm-ffi": Path(env.get("TVM_FFI_CACHE_DIR") or home / ".cache" / "tvm-ffi"),
        "flashinfer": home / ".cache" / "flashinfer",
        "cuda": Path(env.get("CUDA_CACHE_PATH") or home / ".nv" / "ComputeCache"),
    }


def snapshot(folders: dict[str, Path]) -> Snapshot:
    """Every regular file below each folder, with its size and modification time (absent folders: none)."""
    return {
        name: {"/".join(parts): (st.st_size, st.st_mtime_ns) for parts, st in files_below(folder)}
        for name, folder in folders.items()
    }


def changes(before: Snapshot, after: Snapshot, folders: dict[str, Path] | None = None) -> dict[str, dict[str, object]]:
    """Per cache with any: how many files are new or changed, their bytes, and the ``.best_config`` files among
    them (at most twenty named, sorted); with ``folders``, also what each of those chose (``best_config_choices``:
    two runs that wrote the same file chose alike or not, which the names alone do not tell)."""
    out: dict[str, dict[str, object]] = {}
    for name, files in after.items():
        old = before.get(name, {})
        new = sorted(p for p, stat in files.items() if old.get(p) != stat)
        if not new:
            continue
        tuned = [p for p in new if p.endswith(BEST_CONFIG)]
        entry: dict[str, object] = {"files": len(new), "bytes": sum(files[p][0] for p in new)}
        kernels = triton_kernels(new)  # a Triton kernel compiled here, by name
        if kernels:
            entry["kernels"] = kernels
        if tuned:
            entry["best_configs"] = len(tuned)
            entry["best_config_names"] = tuned[:_NAMES_KEPT]
            if folders is not None and name in folders:
                entry["best_config_choices"] = {p: _choice(folders[name] / p) for p in tuned[:_NAMES_KEPT]}
        out[name] = entry
    return out


def _choice(path: Path) -> object:
    """A ``.best_config``'s choice (its JSON less Inductor's timing note), or why it could not be read."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return f"unreadable: {e}"
    if isinstance(data, dict):
        return {k: v for k, v in sorted(data.items()) if k not in _NOT_THE_CHOICE}
    return data


class WarmWrites:
    """The warm runs' writes: a snapshot as a run starts, the changes as it ends (None for a run not started
    here). Two warm runs may be up together (native and LOAD, for the steady-state figures), and a file tells
    no process: a run's window closes where the next run starts, which is after its start-up and first
    requests, where engines compile and tune (``cut_by``: that run's mode)."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[dict[str, Path], Snapshot]] = {}
        self._closed: dict[str, tuple[dict[str, dict[str, object]], str]] = {}

    def start(self, mode: str, env: dict[str, str]) -> None:
        folders = cache_folders(env)
        now = snapshot(folders)
        for other, (other_folders, before) in list(self._open.items()):
            after = now if other_folders == folders else snapshot(other_folders)
            self._closed[other] = (changes(before, after, other_folders), mode)
            del self._open[other]
        self._open[mode] = (folders, now)

    def finish(self, mode: str) -> tuple[dict[str, dict[str, object]], str | None] | None:
        """The changes of run ``mode``, and the mode of the run whose start closed its window (None: its end)."""
        if mode in self._closed:
            return self._closed.pop(mode)
        started = self._open.pop(mode, None)
        if started is None:
            return None
        folders, before = started
        return changes(before, snapshot(folders), folders), None


def written_lines(results: dict[str, dict[str, object]], labels: dict[str, str]) -> list[str]:
    """The report's lines on what each warm run wrote into the machine's caches (``written_on_node``)."""
    lines = []
    for mode, result in results.items():
        wrote = result.get("written_on_node")
        if not isinstance(wrote, dict):
            continue
        cut = result.get("written_until")
        parts = []
        for name, entry in wrote.items():
            tuned = f", {entry['best_configs']} timed kernel choices" if entry.get("best_configs") else ""
            named = listed(list(entry.get("kernels") or []))
            parts.append(f"{name} {entry['files']} files, {int(entry['bytes']) / 2**20:.1f} MiB{tuned}{named}")
        until = f" (until {labels.get(str(cut), cut)} started)" if cut else ""
        lines.append(f"- {labels.get(mode, mode)}{until}: {'; '.join(parts) or 'nothing'}")
    title = "What the warm runs wrote into the machine's caches (compiled or tuned there):"
    return ["", title, *lines] if lines else []
