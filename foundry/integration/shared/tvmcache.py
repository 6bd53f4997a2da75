"""The JIT modules an engine builds through tvm-ffi (SGLang's ``sglang.kernels.jit``: norms, rotary embedding,
KV-cache stores and more, compiled with nvcc the first time a shape or dtype asks for one), as Foundry packs
and unpacks them, through tvm-ffi's own switch: ``TVM_FFI_CACHE_DIR`` (default ``~/.cache/tvm-ffi``).

SGLang builds each module into ``<cache>/<module>__arch_<arch>__tvmffi_<version>/`` (its name hashes the
module's sources and carries the GPU architecture and tvm-ffi's version) and, where that folder already holds
``<module>.so``, loads it without building (sglang/kernels/jit/utils/compile.py, ``load_jit``). A fresh node
builds each one again, seconds of nvcc apiece, and some only at the first request: SGLang's Qwen3-0.6B on an
H200 built 4 on a fresh node under LOAD (16 files, 4.3 MiB) and took 11.8 s of start-up past its graphs
against native's 2.1 s (results/sglang-qwen3-0.6b-engine-fresh-h200-13cbdd4.txt).

SAVE packs the modules this process has loaded: the shared objects in the dynamic linker's list
(``dl_iterate_phdr``, walked by libfoundry; ``/proc/self/maps`` where libfoundry cannot be loaded) that lie in
the cache directory, each as ``<module folder>/<file>``, so that the modules of other programs sharing the cache
are left out. Their names are the ``activity`` that tells the keeper (caches.py) to pack again, four times a
second. Not the process map for that: an engine's process maps tens of thousands of regions, and reading its
map under load took 2 s (SGLang's scheduler serving, H200, 6fc9062), so a module built by a request was not seen
before the engine stopped; the linker's list is a few hundred names, read without the kernel and without the
GIL (foundry/native/loaded.py says why both matter).

LOAD points ``TVM_FFI_CACHE_DIR`` at the copy and links into it each module folder of the machine's own cache
that the copy does not hold, so that a machine that built a module keeps using it. A module neither holds is
built in the copy, and lives as long as the process: the next start builds it again, as a node without
Foundry's archive would. The modules are code: caches.py hands them over only from a signed archive.
"""

from __future__ import annotations

import os
from pathlib import Path

import foundry

__all__ = ["CACHE_ENV", "TVM_FFI", "activity", "cache_dir", "files", "point"]

TVM_FFI = "tvm_ffi"  # the cache's name in the archive
CACHE_ENV = "TVM_FFI_CACHE_DIR"
_DEFAULT = "~/.cache/tvm-ffi"
_MAPS = Path("/proc/self/maps")


def cache_dir(env: dict[str, str] | None = None) -> Path:
    """The directory tvm-ffi builds into, as tvm-ffi and SGLang resolve it."""
    value = (env if env is not None else os.environ).get(CACHE_ENV) or _DEFAULT
    return Path(value).expanduser()


def _mapped(maps: Path, below: tuple[str, ...]) -> set[Path]:
    """The files below one of ``below`` mapped into the process whose map ``maps`` is (an empty set where there
    is none); lines are picked by their text before any becomes a path."""
    try:
        text = maps.read_text()
    except OSError:
        return set()
    out = set()
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith(below):
            out.add(Path(fields[5]))
    return out


def _linked(below: tuple[str, ...]) -> set[Path] | None:
    """The shared objects in this process's dynamic linker list whose name starts with one of ``below``; None
    where the C library cannot say."""
    names = foundry.loaded_shared_objects(below)
    return None if names is None else {Path(n) for n in names}


_RESOLVED: dict[str, str] = {}  # a cache directory as given -> as resolved, once it exists


def _prefixes(root: Path) -> tuple[str, ...]:
    """The names a module below ``root`` can be loaded by: the directory as given, or resolved (tvm-ffi loads a
    module it built by the resolved path). Resolved once the directory exists, then remembered: the keeper asks
    four times a second, and each file-system call made while the engine's main thread holds the GIL waits out
    a switch interval."""
    given = str(root)
    resolved = _RESOLVED.get(given)
    if resolved is None:
        resolved = str(root.resolve())
        if root.is_dir():
            _RESOLVED[given] = resolved
    return tuple(dict.fromkeys((f"{given}/", f"{resolved}/")))


def loaded(root: Path, maps: Path | None = None) -> set[Path]:
    """The shared objects loaded into this process below the directory ``root``, named as they were loaded (the
    directory as given or resolved); from the process map ``maps`` where one is given."""
    below = _prefixes(root)
    if maps is None:
        found = _linked(below)
        if found is not None:
            return found
        maps = _MAPS
    return _mapped(maps, below)


def files(directory: Path | None = None, maps: Path | None = None) -> dict[str, Path]:
    """Each loaded module's shared object in the cache ``directory`` (default ``cache_dir()``), by
    ``<module folder>/<file>``: one folder level, as SGLang lays them out; anything deeper, a file that is gone, or
    a link to one elsewhere, is left out. ``maps``: read that process map instead of the linker's list."""
    given = directory or cache_dir()
    root = given.resolve()
    out: dict[str, Path] = {}
    for path in loaded(given, maps):
        if path.suffix != ".so" or path.is_symlink() or not path.is_file():
            continue
        real = path.resolve()
        if real.parent.parent != root:
            continue
        out[f"{real.parent.name}/{real.name}"] = real
    return dict(sorted(out.items()))


def activity(maps: Path | None = None) -> tuple[str, ...]:
    """The shared objects this process has loaded below the cache directory, by name: it changes when the engine
    builds or loads a module. Names only, with no file-system call (``files`` checks each file when packing)."""
    return tuple(sorted(str(p) for p in loaded(cache_dir(), maps)))


def point(directory: Path, machine: Path | None = None) -> dict[str, str]:
    """LOAD: links each module folder of the ``machine``'s cache (default ``cache_dir()``) that ``directory``
    (the archive's copy) does not hold into it, and returns the switch that points tvm-ffi at the copy."""
    own = machine or cache_dir()
    try:
        entries = sorted(own.iterdir())
    except OSError:
        entries = []  # no cache on this machine yet: the copy is all there is
    for entry in entries:
        link = directory / entry.name
        if entry.is_dir() and not link.exists() and not link.is_symlink():
            link.symlink_to(entry.resolve(), target_is_directory=True)
    return {CACHE_ENV: str(directory)}
