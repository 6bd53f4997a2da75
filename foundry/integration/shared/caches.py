"""One artifact for a fresh node: the engine's compile and JIT caches packed into the archive at SAVE, and
handed back to the engine at LOAD (docs/FORMAT.md and docs/TRUST.md, "Engine caches").

SAVE (``FOUNDRY_<E>_PACK_CACHES=1``): from the start of the engine's start-up, Triton's cache entries the
engine opens are noted (tritoncache.py); after capture, the plugin packs them and its engine's own caches for
this configuration (``CachePlan.files``), stored as they are, with what they were made with (torch, Triton,
the engine, CUDA, the GPU and the engine's own compile settings). The engine goes on compiling after capture:
vLLM's kernel warm-up after its graphs, both engines' first requests (sampling, log-probabilities, eager
kernels at new shapes). A fresh node would compile those again, so SAVE keeps packing (``Keeper``): where the
engine's start-up ends (``flush``, where the plugin can tell), and otherwise once the engine's compilers have
been quiet for a second after a compile, the caches are packed again into the finished archive and its
manifest lists them (signed again). The caches are code, and LOAD uses them only from a signed archive: SAVE
refuses to pack them without a signing key in force.

LOAD: before the engine compiles anything, the caches are copied out of the archive, every byte checked against
the signed listing, into a new directory of this process (removed when it exits), and the engine is pointed at
it through its own switches (``CachePlan.point``: Triton's entries through Foundry's cache manager, which reads
an entry from the copy where the copy holds it and from Triton's own cache otherwise; VLLM_CACHE_ROOT). Caches
that may not be used
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
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import foundry

from . import tritoncache
from .errors import PluginConfigError
from .metadata import Fingerprint

__all__ = [
    "TRITON",
    "CachePlan",
    "Keeper",
    "identity",
    "keep",
    "pack",
    "point_triton",
    "prepare_save",
    "stop_keeping",
    "sweep_stale_copies",
    "triton_files",
    "use",
]

TRITON = "triton"
Point = Callable[[Path], dict[str, str]]  # a cache's directory -> the environment that points the engine at it


def point_triton(directory: Path) -> dict[str, str]:
    # Not TRITON_CACHE_DIR: the machine's own cache stays Triton's, the copy is read first where it holds an entry.
    return {tritoncache.COPY_ENV: str(directory), tritoncache.MANAGER_ENV: tritoncache.MANAGER}


@dataclass(frozen=True)
class CachePlan:
    """What an engine's plugin packs and how it points the engine at the copies: ``point`` maps each cache name
    the plugin knows to the switches that point the engine at a directory (an archive naming another cache is
    refused: its names choose only from this table); ``files`` lists each cache's files at SAVE (path in the
    cache directory -> file); ``settings`` are the engine's own values the caches depend on, compared at LOAD
    with the versions; ``check_save`` refuses, before start-up, settings whose caches cannot be packed;
    ``copied`` notes, at LOAD, what the copies hold that the plugin checks later (the engine keys some of them
    by settings the versions do not cover). Each takes the process's session, but ``activity``, which takes
    nothing and changes whenever the engine built or opened something the caches would pack."""

    point: Mapping[str, Point] = field(default_factory=lambda: {TRITON: point_triton})
    files: Callable[[Any], dict[str, dict[str, Path]]] = lambda s: {TRITON: triton_files()}
    settings: Callable[[Any], dict[str, str]] = lambda s: {}
    check_save: Callable[[Any], None] = lambda s: None
    copied: Callable[[Any, Mapping[str, Path]], None] = lambda s, dirs: None
    # SAVE: a value that changes whenever the engine built or opened something the caches would pack (Keeper)
    activity: Callable[[], object] = tritoncache.activity
    # SAVE: whether a change of ``activity`` from the first value to the second is whole as seen, so that the
    # keeper packs at once rather than after a quiet second: a JIT module is loaded only once it is built, while
    # a Triton compile writes its files one by one. An engine may be stopped seconds after the request that
    # built a module (SGLang builds some only at its first request, for seconds of nvcc).
    whole: Callable[[object, object], bool] = lambda before, now: False


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


def pack(s: Any, plan: CachePlan, update_manifest: bool = False) -> list[str]:
    """SAVE, after capture: the caches into the archive; the documents for the manifest to list. Again into the
    finished archive with ``update_manifest`` (the manifest then lists them itself)."""
    if not s.config.pack_caches:
        return []
    t0 = time.perf_counter()
    trees = {name: files for name, files in plan.files(s).items() if files}
    made_with = identity(s.fingerprint, s.config.engine.key, plan.settings(s))
    document = s.api.pack_caches(s.archive, made_with, trees, update_manifest=update_manifest)
    packed = {name: len(files) for name, files in trees.items()}
    if update_manifest:
        s.timings["repack_caches_s"] = s.timings.get("repack_caches_s", 0.0) + time.perf_counter() - t0
        s.timings.setdefault("caches", {})["packed_last"] = packed
    else:
        s.timings["pack_caches_s"] = time.perf_counter() - t0
        s.timings["caches"] = {"packed": packed}
    # The Triton kernels the archive now holds, by name: a fresh node that still compiles one names it too (the
    # benchmark's compiled_on_node), and the two lists tell a kernel SAVE never saw from one it did not find.
    s.timings["caches"]["triton_kernels"] = tritoncache.kernel_names(list(trees.get(TRITON, {})))
    return [document]


class Keeper:
    """SAVE, once the archive is written with its caches: packs them again whenever the engine compiled or
    opened kernels since (the plan's ``activity``: Triton's entries, and the JIT modules the engine loaded where
    the plan packs them), so that a fresh node finds those too.

    ``flush`` packs at once (the plugin calls it where the engine's start-up ends, and it runs when the process
    exits); a daemon thread does so on its own once the activity has stayed the same for ``quiet_s`` after a
    change, so that a compile's files are all written and a burst of compiles is packed once, or at the change
    where the plan says it is whole (``CachePlan.whole``: a JIT module loaded). A failure is
    logged by name and ends the keeping: the archive keeps the caches packed before, and serves as it is."""

    def __init__(
        self,
        s: Any,
        plan: CachePlan,
        on_packed: Callable[[], None] = lambda: None,
        quiet_s: float = 1.0,
        poll_s: float = 0.25,
    ) -> None:
        self._s, self._plan, self._on_packed, self._quiet_s, self._poll_s = s, plan, on_packed, quiet_s, poll_s
        self._lock = threading.Lock()
        self._packed = plan.activity()  # what the archive's caches hold
        self._seen, self._changed_at = self._packed, time.monotonic()
        self._stop = threading.Event()  # ends the thread
        self._halted = False  # a pack was refused: the archive keeps what it holds
        self._log = logging.getLogger(s.config.engine.logger or s.config.engine.key)
        self.repacks = 0

    def start(self) -> None:
        with _KEEPING_LOCK:
            if not _KEEPING:
                atexit.register(_flush_all)
            _KEEPING.append(self)
        threading.Thread(target=self._run, name="foundry-caches", daemon=True).start()

    def flush(self) -> bool:
        """Packs the caches again if the plan's activity changed since the last pack; whether it did."""
        with self._lock:
            now = self._plan.activity()
            if self._halted or now == self._packed:
                return False
            try:
                pack(self._s, self._plan, update_manifest=True)
            except Exception as exc:
                self._halted = True
                self._stop.set()
                self._log.warning(
                    "Foundry save: the kernels the engine compiled after the archive was written are not added to its "
                    "caches: %s. The archive keeps the caches packed before.", exc,
                )  # fmt: skip
                return False
            self._packed = now
            self.repacks += 1
            packed = self._s.timings["caches"]["packed_last"]
            self._log.info("Foundry save: engine caches packed again (%s files), with what the engine compiled since",
                           ", ".join(f"{name} {n}" for name, n in packed.items()))  # fmt: skip
            self._on_packed()
            return True

    def poll(self, now: float) -> bool:
        """One look at the activity at time ``now`` (monotonic seconds): packs once it has been quiet long enough
        after a change; whether it packed."""
        seen = self._plan.activity()
        if seen != self._seen:
            before, self._seen, self._changed_at = self._seen, seen, now
            return self._plan.whole(before, seen) and self.flush()
        if seen != self._packed and now - self._changed_at >= self._quiet_s:
            return self.flush()
        return False

    def stop(self) -> None:
        """Ends the thread; ``flush`` still packs when called."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            self.poll(time.monotonic())


_KEEPING: list[Keeper] = []  # this process's keepers, flushed when it exits
_KEEPING_LOCK = threading.Lock()


def _flush_all() -> None:
    with _KEEPING_LOCK:
        keepers = list(_KEEPING)
    for keeper in keepers:
        keeper.flush()


def stop_keeping() -> None:
    """Stops every keeper of this process, without a last pack (an engine stopped in the middle of a compile,
    or tests that end the fake engines' sessions)."""
    with _KEEPING_LOCK:
        keepers = list(_KEEPING)
        _KEEPING.clear()
    for keeper in keepers:
        keeper.stop()


def keep(s: Any, plan: CachePlan, on_packed: Callable[[], None] = lambda: None) -> Keeper | None:
    """SAVE, the archive just written: starts keeping its caches (``Keeper``; ``on_packed`` after each pack);
    None when SAVE packs none."""
    if not s.config.pack_caches:
        return None
    keeper = Keeper(s, plan, on_packed)
    keeper.start()
    return keeper


_SCRATCH_PREFIX = "foundry-caches-"  # then the LOAD process's PID, a dash and a random tag


def sweep_stale_copies(folder: Path, log: logging.Logger) -> int:
    """Removes the cache copies in ``folder`` left by LOAD processes that are gone; how many. A copy is removed
    when its process exits (atexit), but an engine that ends its workers with SIGKILL (SGLang's
    ``kill_process_tree``) runs no exit handler, so without this every such start would leave one behind.
    Only this user's directories, named as ``use`` names them, of a PID that no longer runs."""
    removed = 0
    try:
        entries = list(folder.iterdir())
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(_SCRATCH_PREFIX):
            continue
        pid_text = entry.name[len(_SCRATCH_PREFIX) :].split("-", 1)[0]
        if not pid_text.isdigit():
            continue
        try:
            if entry.is_symlink() or not entry.is_dir() or entry.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        if _running(int(pid_text)):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed += 1
    if removed:
        log.info(
            "Foundry load: removed %d engine-cache copies of LOAD processes that ended without removing them", removed
        )
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process: not this user's copy to judge
    return True


def use(s: Any, plan: CachePlan) -> None:
    """LOAD, before the engine compiles anything: the archive's caches copied out and the engine pointed at them,
    or refused by name (the log and the report say why) and LOAD goes on without them."""
    log = logging.getLogger(s.config.engine.logger or s.config.engine.key)
    t0 = time.perf_counter()
    # Made by open_caches only where the archive carries caches (0700, refused if it exists): nothing to remove else.
    scratch = Path(tempfile.gettempdir()) / f"{_SCRATCH_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
    sweep_stale_copies(scratch.parent, log)
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
