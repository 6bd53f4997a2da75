"""One artifact for a fresh node: the engine's compile and JIT caches packed into the archive at SAVE, and
handed back to the engine at LOAD (docs/FORMAT.md and docs/TRUST.md, "Engine caches").

SAVE (``FOUNDRY_<E>_PACK_CACHES=1``): from the start of the engine's start-up, Triton's cache entries the
engine opens are noted (tritoncache.py); after capture, the plugin packs them and its engine's own caches for
this configuration (``CachePlan.files``), stored as they are, with what they were made with (torch, Triton,
the engine, CUDA, the GPU and the engine's own compile settings). The caches are code, and LOAD uses them only
from a signed archive: SAVE refuses to pack them without a signing key in force.

LOAD: before the engine compiles anything, the caches are copied out of the archive, every byte checked against
the signed listing, into a new directory of this process (removed when it exits), and the engine is pointed at
it through its own switches (``CachePlan.point``: TRITON_CACHE_DIR, VLLM_CACHE_ROOT). Caches that may not be used
(no key in force, another version, damaged) are refused by name in the engine's log and the report, and LOAD
goes on without them: they only spare the engine's compilers work it then does itself, as on any fresh machine,
while the archive's graphs are checked and loaded as always. Failing the start instead would turn a cache that
cannot be used into an engine that does not start.
"""

from __future__ import annotations

import atexit
import importlib.metadata
import logging
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import foundry

from . import tritoncache
from .errors import PluginConfigError
from .metadata import Fingerprint

__all__ = ["TRITON", "CachePlan", "identity", "pack", "point_triton", "prepare_save", "triton_files", "use"]

TRITON = "triton"
Point = Callable[[Path], dict[str, str]]  # a cache's directory -> the environment that points the engine at it


def point_triton(directory: Path) -> dict[str, str]:
    return {"TRITON_CACHE_DIR": str(directory), tritoncache.MANAGER_ENV: tritoncache.MANAGER}


@dataclass(frozen=True)
class CachePlan:
    """What an engine's plugin packs and how it points the engine at the copies: ``point`` maps each cache name
    the plugin knows to the switches that point the engine at a directory (an archive naming another cache is
    refused: its names choose only from this table); ``files`` lists each cache's files at SAVE (path in the
    cache directory -> file); ``settings`` are the engine's own values the caches depend on, compared at LOAD
    with the versions; ``check_save`` refuses, before start-up, settings whose caches cannot be packed;
    ``copied`` notes, at LOAD, what the copies hold that the plugin checks later (the engine keys some of them
    by settings the versions do not cover). Each takes the process's session."""

    point: Mapping[str, Point] = field(default_factory=lambda: {TRITON: point_triton})
    files: Callable[[Any], dict[str, dict[str, Path]]] = lambda s: {TRITON: triton_files()}
    settings: Callable[[Any], dict[str, str]] = lambda s: {}
    check_save: Callable[[Any], None] = lambda s: None
    copied: Callable[[Any, Mapping[str, Path]], None] = lambda s, dirs: None


def identity(fingerprint: Fingerprint | None, engine_key: str, settings: Mapping[str, str]) -> dict[str, str]:
    """What the caches are made with, as SAVE records it and LOAD compares it: the engine's, torch's and CUDA's
    versions and the GPU (from the fingerprint), Triton's version, and the engine's ``settings``."""
    values = fingerprint.as_dict() if fingerprint is not None else {}
    out = {name: values.get(name, "?") for name in (engine_key, "torch", "cuda", "gpu")}
    out["triton"] = _triton_version()
    return {**out, **settings}


def _triton_version() -> str:
    """The version of the Triton the engine imported (both engines import it before start-up), else of the one
    installed, else "none"."""
    version = getattr(sys.modules.get("triton"), "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def prepare_save(s: Any, plan: CachePlan) -> None:
    """SAVE with FOUNDRY_<E>_PACK_CACHES, before the engine compiles anything: refuses what cannot be packed
    (no signing key, another Triton cache manager, the engine's own settings) and starts noting Triton's
    entries."""
    engine = s.config.engine
    flag = f"{engine.var('PACK_CACHES')}=1"
    if s.api.signing_key_id() is None:
        raise PluginConfigError(
            f"{flag} packs compiled code, which LOAD hands to the engine only from a signed archive, and no signing "
            "key is configured: set FOUNDRY_SIGNING_KEY to a key file (docs/TRUST.md) in SAVE and every LOAD, or "
            f"unset {engine.var('PACK_CACHES')}"
        )
    manager = os.environ.get(tritoncache.MANAGER_ENV, "")
    if manager not in ("", tritoncache.MANAGER):
        raise PluginConfigError(
            f"{flag}: {tritoncache.MANAGER_ENV}={manager!r} replaces Triton's cache manager, and Foundry notes the "
            f"kernels to pack through its own: unset {tritoncache.MANAGER_ENV}, or {engine.var('PACK_CACHES')}"
        )
    plan.check_save(s)
    os.environ[tritoncache.MANAGER_ENV] = tritoncache.MANAGER


def triton_files() -> dict[str, Path]:
    """Every file of the Triton cache entries this process opened, by ``<entry>/<name>`` (Triton's layout below
    its cache directory); temporary directories of writes in progress are left out."""
    out: dict[str, Path] = {}
    for entry in tritoncache.used_dirs():
        try:
            names = sorted(os.listdir(entry))
        except OSError:
            continue  # an entry removed since: Triton compiles it again where it is needed
        for name in names:
            path = entry / name
            if path.is_file() and not path.is_symlink():
                out[f"{entry.name}/{name}"] = path
    return out


def pack(s: Any, plan: CachePlan) -> list[str]:
    """SAVE, after capture: the caches into the archive; the documents for the manifest to list."""
    if not s.config.pack_caches:
        return []
    t0 = time.perf_counter()
    trees = {name: files for name, files in plan.files(s).items() if files}
    made_with = identity(s.fingerprint, s.config.engine.key, plan.settings(s))
    document = s.api.pack_caches(s.archive, made_with, trees)
    s.timings["pack_caches_s"] = time.perf_counter() - t0
    s.timings["caches"] = {"packed": {name: len(files) for name, files in trees.items()}}
    return [document]


def use(s: Any, plan: CachePlan) -> None:
    """LOAD, before the engine compiles anything: the archive's caches copied out and the engine pointed at them,
    or refused by name (the log and the report say why) and LOAD goes on without them."""
    log = logging.getLogger(s.config.engine.logger or s.config.engine.key)
    t0 = time.perf_counter()
    # Made by open_caches only where the archive carries caches (0700, refused if it exists): nothing to remove else.
    scratch = Path(tempfile.gettempdir()) / f"foundry-caches-{os.getpid()}-{secrets.token_hex(6)}"
    here = identity(s.fingerprint, s.config.engine.key, plan.settings(s))
    try:
        dirs = s.api.open_caches(s.archive, here, scratch)
        unknown = sorted(set(dirs or {}) - set(plan.point))
        if unknown:
            raise foundry.CachesRefusedError(
                f"the archive carries caches {unknown} that this {s.config.engine.name} plugin does not use: it was "
                "saved by another Foundry. Run SAVE again with this one."
            )
    except foundry.CachesRefusedError as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        s.timings["caches"] = {"refused": str(exc)}
        log.warning("Foundry load: the archive's engine caches are not used: %s LOAD goes on without them: the "
                    "engine compiles what it needs, as on a machine that never ran it.", exc)  # fmt: skip
        return
    if dirs is None:
        return
    atexit.register(shutil.rmtree, scratch, True)
    for name, directory in dirs.items():
        os.environ.update(plan.point[name](directory))
    s.timings["caches_s"] = time.perf_counter() - t0
    s.timings["caches"] = {"used": sorted(dirs), "directory": str(scratch)}
    plan.copied(s, dirs)
    log.info("Foundry load: engine caches %s copied from the archive in %.2f s", sorted(dirs), s.timings["caches_s"])
