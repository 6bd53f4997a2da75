"""Triton's cache as Foundry packs and unpacks it, through Triton's own switch for it: ``TRITON_CACHE_MANAGER``
names the class Triton asks for each cache entry (``module:Class``, read by triton.knobs whenever Triton opens
one). Foundry's class is Triton's own ``FileCacheManager`` (Triton 3.6: triton/runtime/cache.py), files laid out
as Triton lays them out, with two differences:

- it notes every entry directory this process opens (a kernel compiled or found, a launcher built or found), so
  that SAVE packs the kernels this engine uses and none of the other programs that share the cache directory
  (``used_dirs``);
- it reads a kernel's group file (``__grp__<name>.json``, the list of the kernel's files) relative to its own
  directory. Triton writes each file's absolute path there, which names the SAVE machine's cache directory:
  read as Triton reads it, an unpacked copy would miss every kernel on a fresh node, and on a machine where
  SAVE's directory is still there, load the files from it rather than from the copy. Every file of a group
  lies in the group's own entry directory (FileCacheManager.put writes nowhere else), so its name is enough.

- at LOAD, with the archive's caches copied out (``COPY_ENV`` names the copy's Triton directory), an entry the
  copy holds is read from the copy, every other one from Triton's own cache directory, where Triton also writes
  what it compiles: a warm machine keeps finding its own kernels (a LOAD is never colder than native there), a
  fresh one finds the archive's, and what it compiles besides stays for the next start, as natively.

SAVE counts what goes through the manager (``activity``: entries opened, files written), so that kernels the
engine compiles after the archive was written can be added to it (caches.py, ``Keeper``).

Triton is imported when Triton asks for the class (``__getattr__``), never when this module is: the engine
plugins import it without Triton.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

__all__ = ["COPY_ENV", "MANAGER", "MANAGER_ENV", "activity", "kernel_names", "used_dirs"]

MANAGER_ENV = "TRITON_CACHE_MANAGER"
MANAGER = f"{__name__}:FoundryCacheManager"
COPY_ENV = "FOUNDRY_TRITON_CACHE_COPY"  # LOAD: the archive's Triton entries, copied out (caches.py)
_CLASS_NAME = "FoundryCacheManager"

_GROUP_PREFIX = "__grp__"  # a kernel's group file, the list of its files: <entry>/__grp__<kernel>.json
_LOCK = threading.Lock()
_USED: set[str] = set()
_WRITES = [0]  # files this process wrote through the manager


def used_dirs() -> list[Path]:
    """The Triton cache entry directories this process opened through Foundry's manager, sorted."""
    with _LOCK:
        return sorted(Path(d) for d in _USED)


def activity() -> tuple[int, int]:
    """(entries opened, files written) through Foundry's manager in this process so far: it changes whenever
    the engine compiles a kernel or opens one it had not opened before."""
    with _LOCK:
        return len(_USED), _WRITES[0]


def kernel_names(paths: list[str], most: int = 400) -> list[str]:
    """The Triton kernels among cache files (paths or names; Triton writes ``__grp__<kernel>.json`` for each
    kernel it compiles), by name, sorted, at most ``most``: what a cache holds, said in a report."""
    names = {p.rsplit("/", 1)[-1] for p in paths}
    groups = (n for n in names if n.startswith(_GROUP_PREFIX) and n.endswith(".json"))
    return sorted({n[len(_GROUP_PREFIX) : -len(".json")] for n in groups})[:most]


def from_copy(copy_entry: str, own_entry: str) -> bool:
    """Whether an entry is read from the archive's copy (``copy_entry``) rather than from Triton's own cache
    (``own_entry``): where the copy holds it, unless the copy's entry has no group file (a kernel's list of files,
    written last) and the machine's own has one."""
    try:
        copied = os.listdir(copy_entry)
    except OSError:
        return False
    if not copied:
        return False
    if any(name.startswith(_GROUP_PREFIX) for name in copied):
        return True
    try:
        return not any(name.startswith(_GROUP_PREFIX) for name in os.listdir(own_entry))
    except OSError:
        return True


def _build() -> type:
    from triton.runtime.cache import FileCacheManager

    class FoundryCacheManager(FileCacheManager):
        cache_dir: Any  # Triton's: the entry's directory (a str), where every get and put of the entry goes

        def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
            super().__init__(key, override=override, dump=dump)
            if override or dump or not self.cache_dir:
                return
            copy = os.environ.get(COPY_ENV)
            if copy:
                entry = os.path.join(copy, key)
                if from_copy(entry, str(self.cache_dir)):
                    self.cache_dir = entry
                    if getattr(self, "lock_path", None):
                        self.lock_path = os.path.join(entry, "lock")
            with _LOCK:
                _USED.add(str(self.cache_dir))

        def get_group(self, filename: str) -> dict[str, str] | None:
            return relocated_group(str(self.cache_dir), filename)

        def put(self, data: Any, filename: str, binary: bool = True) -> str:
            path: str = super().put(data, filename, binary=binary)
            with _LOCK:
                _WRITES[0] += 1
            return path

    FoundryCacheManager.__qualname__ = _CLASS_NAME
    return FoundryCacheManager


def relocated_group(entry_dir: str, filename: str) -> dict[str, str] | None:
    """Triton's ``get_group`` read relative to ``entry_dir``: each file the group names that is there, by its
    name in ``entry_dir``; None where there is no group or it is not one Triton writes (Triton then compiles the
    kernel again)."""
    path = os.path.join(entry_dir, f"{_GROUP_PREFIX}{filename}")
    try:
        with open(path, encoding="utf-8") as f:
            doc: Any = json.load(f)
    except (OSError, ValueError):
        return None
    children = doc.get("child_paths") if isinstance(doc, dict) else None
    if not isinstance(children, dict):
        return None
    out = {}
    for child, written in children.items():
        if not isinstance(child, str) or not isinstance(written, str):
            return None
        local = os.path.join(entry_dir, os.path.basename(written))
        if os.path.isfile(local):
            out[child] = local
    return out


def __getattr__(name: str) -> Any:
    """The manager class, built on Triton's first request and kept as a module global (Triton asks for it each
    time it opens an entry; later requests find the global and do not come here)."""
    if name != _CLASS_NAME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _LOCK:
        if _CLASS_NAME not in globals():
            globals()[_CLASS_NAME] = _build()
        return globals()[_CLASS_NAME]
