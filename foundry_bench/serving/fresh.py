"""The fresh-node runs of a serving benchmark: a process started as on a machine that never ran the engine,
every cache folder the engine, torch, Triton and CUDA read empty, and the archive shipped as one artifact
(SAVE packs the engine's caches, signed, and LOAD copies them out: foundry/integration/shared/caches.py).

Each fresh run gets a new temporary folder holding its home and every cache folder, which the benchmark
removes after the run; the warm caches of the other runs are never touched.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from foundry.integration.shared import kernel_names

__all__ = [
    "FRESH_MODES",
    "FRESH_VARIABLES",
    "FreshRoots",
    "compiled_on_node",
    "files_below",
    "fresh_env",
    "fresh_lines",
    "fresh_root",
    "listed",
    "signing_key",
    "triton_kernels",
]

FRESH_MODES = ("native_fresh", "load_fresh")
_KERNELS_NAMED = 20
_FEW_NAMED = 3  # a cache of this many files or fewer has them named: one stray file tells what wrote it
# Where the engines and their compilers keep what they build once per machine, each pointed into the new folder:
# the home (~/.cache, ~/.triton, ~/.nv: CUDA's PTX cache), XDG's cache home, vLLM's cache root (its torch.compile
# artifacts), Triton's kernels, Inductor's cache (by default in /tmp, outside the home), CUDA's JIT cache and
# tvm-ffi's JIT modules (SGLang's). A LOAD points tvm-ffi at the archive's copy, where a module it builds stays
# (foundry/integration/shared/tvmcache.py): its seconds show, its files are not counted here.
FRESH_VARIABLES = {
    "HOME": "home",
    "XDG_CACHE_HOME": "cache",
    "VLLM_CACHE_ROOT": "cache/vllm",
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "CUDA_CACHE_PATH": "nv",
    "TVM_FFI_CACHE_DIR": "cache/tvm-ffi",
}


def fresh_root(mode: str) -> Path:
    """A new, empty folder for one fresh run."""
    return Path(tempfile.mkdtemp(prefix=f"foundry-bench-{mode}-"))


def fresh_env(root: Path) -> dict[str, str]:
    """The variables that point every cache folder into ``root`` (only the home is made: the engines make the
    rest as they would on a new machine)."""
    (root / FRESH_VARIABLES["HOME"]).mkdir(exist_ok=True)
    return {name: str(root / sub) for name, sub in FRESH_VARIABLES.items()}


class FreshRoots:
    """The fresh runs' folders: one made as a run starts, counted (``compiled_on_node``) and removed as it ends,
    and any a stopped benchmark leaves removed by ``clear``; the warm caches of the other runs are never touched."""

    def __init__(self) -> None:
        self._roots: dict[str, Path] = {}

    def env(self, mode: str) -> dict[str, str]:
        """A new folder for run ``mode``, and the variables that point every cache folder into it."""
        self._roots[mode] = fresh_root(mode)
        return fresh_env(self._roots[mode])

    def finish(self, mode: str) -> dict[str, dict[str, Any]] | None:
        """What run ``mode`` compiled into its folder, which is then removed; None where it had none."""
        root = self._roots.pop(mode, None)
        if root is None:
            return None
        left = compiled_on_node(root)
        shutil.rmtree(root, ignore_errors=True)
        return left

    def clear(self) -> None:
        for root in self._roots.values():
            shutil.rmtree(root, ignore_errors=True)
        self._roots.clear()


def signing_key(out: Path) -> Path:
    """The key the benchmark signs its archive with when SAVE packs caches (LOAD uses them only signed): made
    once in the benchmark's folder, readable by its owner only."""
    path = out / "foundry-bench.key"
    if not path.is_file():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
    return path


# Folders of a fresh root whose children are each a cache of their own (the home, its ~/.cache, XDG's cache home,
# vLLM's cache root: its model-info cache beside its compiled models): files are counted by that child, the rest
# by their folder below the root. The deepest prefix first.
_SHARED = (("home", ".cache", "vllm"), ("home", ".cache"), ("home",), ("cache", "vllm"), ("cache",))


def files_below(root: Path) -> Iterator[tuple[tuple[str, ...], os.stat_result]]:
    """Every file below ``root`` (links not followed), as its path's parts relative to ``root`` and its
    ``lstat``; a file gone while walking is left out, an absent ``root`` has none."""
    for top, _dirs, names in os.walk(root):
        rel = Path(top).relative_to(root).parts
        for name in names:
            try:
                st = (Path(top) / name).lstat()
            except OSError:
                continue
            yield (*rel, name), st


def compiled_on_node(root: Path) -> dict[str, dict[str, Any]]:
    """What a fresh run left in its folders (what the engine and its compilers wrote because no cache held it):
    files and bytes by cache (``triton``, ``cache/flashinfer``, ``home/.nv``, ...), largest first, with the Triton
    kernels among them by name (``kernels``, from Triton's group files) and, in a cache of a few files, the files
    (``named``). Read before the folder is removed: it tells which cache a fresh node still fills, and with what,
    beside what the archive carried."""
    out: dict[str, dict[str, Any]] = {}
    paths: dict[str, list[str]] = {}
    times: dict[str, list[float]] = {}
    for parts, st in files_below(root):
        rel, name = parts[:-1], parts[-1]
        depth = next((len(s) + 1 for s in _SHARED if rel[: len(s)] == s and len(rel) > len(s)), 1)
        key = "/".join(rel[:depth]) or "."
        entry = out.setdefault(key, {"files": 0, "bytes": 0})
        entry["files"] += 1
        entry["bytes"] += st.st_size
        paths.setdefault(key, []).append("/".join((*rel[depth:], name)))
        times.setdefault(key, []).append(st.st_mtime)
    for key, entry in out.items():
        # when the cache was written, in the clock of the run's own times (started_at): before or after ready
        entry["written_at"] = [round(min(times[key]), 2), round(max(times[key]), 2)]
        kernels = triton_kernels(paths[key])
        if kernels:
            entry["kernels"] = kernels
        if entry["files"] <= _FEW_NAMED:
            entry["named"] = sorted(paths[key])
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["bytes"]))


def triton_kernels(paths: list[str]) -> list[str]:
    """The Triton kernels among a cache's files, by name, sorted, at most twenty."""
    return kernel_names(paths, _KERNELS_NAMED)


def fresh_lines(results: dict[str, dict[str, object]], labels: dict[str, str]) -> list[str]:
    """The report's lines on what each fresh run compiled (``compiled_on_node``), one a run, five caches at most."""
    lines = []
    for mode in FRESH_MODES:
        left = (results.get(mode) or {}).get("compiled_on_node")
        if isinstance(left, dict):
            r = results.get(mode) or {}
            ready = _ready_at(r)
            parts = [_cache_part(k, v, ready) for k, v in list(left.items())[:5]]
            lines.append(f"- {labels.get(mode, mode)}: {'; '.join(parts) or 'nothing'}")
            if mode == "load_fresh":
                lines += _against_archive(left, results.get("save") or {})
    title = "What the fresh runs wrote into their empty caches (compiled there, not carried):"
    return ["", title, *lines] if lines else []


def _against_archive(left: dict[str, Any], save: dict[str, object]) -> list[str]:
    """LOAD fresh: which of the Triton kernels it compiled the archive held (SAVE's report names them): one held
    was compiled again under another key; one not held was never compiled in SAVE's engine process."""
    compiled = (left.get("triton") or {}).get("kernels") or []
    plugin = save.get("plugin")
    caches = ((plugin.get("timings") or {}).get("caches") or {}) if isinstance(plugin, dict) else {}
    held = caches.get("triton_kernels")
    if not compiled or not isinstance(held, list):
        return []
    inside = [k for k in compiled if k in held]
    outside = [k for k in compiled if k not in held]
    return [f"  its Triton kernels the archive held too: {', '.join(inside) or 'none'}; "
            f"that it did not hold: {', '.join(outside) or 'none'}"]  # fmt: skip


def _ready_at(r: dict[str, object]) -> float | None:
    started, ready = r.get("started_at"), r.get("ready_wall_s")
    if isinstance(started, int | float) and isinstance(ready, int | float):
        return float(started) + float(ready)
    return None


def _cache_part(name: str, entry: dict[str, Any], ready: float | None = None) -> str:
    named = listed(entry.get("kernels") or entry.get("named") or [])
    when = entry.get("written_at")
    at = ""
    if ready is not None and isinstance(when, list) and len(when) == 2:
        first, last = (t - ready for t in when)
        at = f", written {first:+.1f} to {last:+.1f} s from ready"
    return f"{name} {entry['files']} files, {entry['bytes'] / 2**20:.1f} MiB{named}{at}"


def listed(names: list[str], shown: int = 6) -> str:
    """`` (a, b, ...)`` for a report line: the first ``shown`` names; nothing for none."""
    if not names:
        return ""
    return f" ({', '.join(names[:shown])}{', ...' if len(names) > shown else ''})"
