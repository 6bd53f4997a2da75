"""The caches a vLLM archive can carry for a fresh node (shared/caches.py): Triton's kernels, and vLLM's
torch.compile cache for the saved configuration.

vLLM 0.26 with torch 2.10 or newer compiles the model ahead of time (``VLLM_USE_AOT_COMPILE``, on by default)
and keeps the result under ``$VLLM_CACHE_ROOT/torch_compile_cache/torch_aot_compile/<hash>/``
(vllm/compilation/decorators.py), the hash made of vLLM's compile-relevant settings and environment, the model
configuration and Inductor's own factors. Two of those settings are paths vLLM derives from the home and XDG
folders unless set (``VLLM_CONFIG_ROOT``, ``VLLM_XLA_CACHE_PATH``; ``VLLM_CACHE_ROOT`` is left out of the hash): a
node whose home lies elsewhere computes another hash and compiles, so a fresh node keeps SAVE's paths or sets
those two to SAVE's values. With ``VLLM_USE_MEGA_AOT_ARTIFACT=1`` that folder
holds the whole compiled model in one artifact (``rank_<r>_<dp>/model``) beside Inductor's cache: it can move
to another machine. Without it, the artifact leaves the compiled pieces in
``torch_compile_cache/<hash>/rank_*/`` and names them by absolute path (vllm/compilation/backends.py,
``vllm_compile_cache.py``): moved, they would be looked for where SAVE's machine had them. So SAVE packs vLLM's
cache only as the mega artifact, and refuses ``FOUNDRY_VLLM_PACK_CACHES=1`` for a compiled model without it.

vLLM also keeps, below ``VLLM_CACHE_ROOT``, what it learned of each model class (``modelinfos/<module>-<class>.json``,
vllm/model_executor/models/registry.py): a few flags, with the hash of the model's source file, which vLLM checks.
Its front end (the API server) reads it before anything else, to resolve the model's class, and on a miss inspects
the class in a subprocess that imports vLLM and the model again: 20-23 s on a fresh node (H200, 83b94d9). SAVE packs
the files of the model's classes with the compiled model; LOAD puts them where the front end looks
(``seed_model_info``, as the plugin is registered there, before vLLM resolves the model), where none is: the
machine's own model-info cache, as vLLM's inspection would have. The engine process gets them in the copy too.

SAVE finds the folder where vLLM points Inductor for it (``TORCHINDUCTOR_CACHE_DIR`` =
``<folder>/inductor_cache``, set process-wide when vLLM compiles or loads the model) and packs it under its
path below ``VLLM_CACHE_ROOT``; LOAD sets ``VLLM_CACHE_ROOT`` to the copy, and vLLM, computing the same hash,
loads the artifact from there (another hash: it compiles, as it would anyway, and LOAD says so, naming the two
paths: ``check_found``).
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import foundry

from ..shared.caches import TRITON, CachePlan, point_triton, triton_files
from ..shared.config import EngineConfig
from ..shared.errors import UnsupportedConfigError
from ..shared.ranks import first_rank_dir
from .config import VLLM

__all__ = [
    "AOT_DIR",
    "MODEL_INFO_DIR",
    "PLAN",
    "SEEDED_ENV",
    "VLLM_CACHE",
    "aot_folder",
    "check_found",
    "seed_model_info",
]

MODEL_INFO_DIR = "modelinfos"  # below VLLM_CACHE_ROOT: vLLM's model-info cache, a file per model class

VLLM_CACHE = "vllm"
AOT_DIR = ("torch_compile_cache", "torch_aot_compile")  # below VLLM_CACHE_ROOT: vLLM's AOT artifacts by hash
_NEEDED = (
    "vLLM's torch.compile cache moves to another machine only as its mega AOT artifact: set "
    "VLLM_USE_MEGA_AOT_ARTIFACT=1 (with VLLM_USE_AOT_COMPILE and VLLM_USE_STANDALONE_COMPILE on, vLLM's defaults "
    "with torch 2.10 and newer) in SAVE and every LOAD, or unset " + VLLM.var("PACK_CACHES")
)


def _envs() -> Any:
    import vllm.envs as envs

    return envs


def settings(s: Any) -> dict[str, str]:
    """vLLM's switches the compile cache depends on: they must be SAVE's at LOAD for the copy to be used."""
    del s
    envs = _envs()
    return {
        "vllm_aot_compile": str(bool(envs.VLLM_USE_AOT_COMPILE)),
        "vllm_mega_aot_artifact": str(bool(envs.VLLM_USE_MEGA_AOT_ARTIFACT)),
    }


def check_save(s: Any) -> None:
    """Refuses, before start-up, to pack a compiled model's cache vLLM would not find on another machine."""
    if not s.state.compiles:
        return
    envs = _envs()
    if not (envs.VLLM_USE_AOT_COMPILE and envs.VLLM_USE_MEGA_AOT_ARTIFACT and envs.VLLM_USE_STANDALONE_COMPILE):
        raise UnsupportedConfigError(f"{VLLM.var('PACK_CACHES')}=1: {_NEEDED}")


def aot_folder(cache_root: Path, inductor_dir: str | None) -> Path | None:
    """The AOT artifact folder vLLM pointed Inductor into (``<root>/torch_compile_cache/torch_aot_compile/<hash>``,
    holding ``inductor_cache``), or None when Inductor's cache lies anywhere else."""
    if not inductor_dir:
        return None
    inductor = Path(inductor_dir)
    folder = inductor.parent
    if inductor.name != "inductor_cache" or folder.parent != cache_root.joinpath(*AOT_DIR):
        return None
    return folder


def model_info_files(root: Path, architectures: tuple[str, ...]) -> dict[str, Path]:
    """vLLM's model-info files of the model's classes below ``root`` (its cache root), by their path there."""
    folder = root / MODEL_INFO_DIR
    out = {}
    for arch in architectures:
        for path in sorted(folder.glob(f"*-{arch}.json")):
            if path.is_file() and not path.is_symlink():
                out[f"{MODEL_INFO_DIR}/{path.name}"] = path
    return out


def _is_model_info(path: str) -> bool:
    head, _, name = path.partition("/")
    return head == MODEL_INFO_DIR and name.endswith(".json") and "/" not in name


# Set by the process that seeded vLLM's model-info cache (the front end) to the folder it seeded: the processes it
# starts (engine core, workers) inherit it and do not read the archive again for the same folder.
SEEDED_ENV = "FOUNDRY_VLLM_MODEL_INFO_SEEDED"


def seed_model_info(config: EngineConfig) -> list[str]:
    """LOAD, as the plugin is registered (in every vLLM process, the front end first, before it resolves the model's
    class): the archive's model-info files written into vLLM's own model-info cache where it has none of that name,
    so that the front end finds the class without inspecting it in a subprocess; the names written. Anything that
    keeps them from being read is logged by name and LOAD goes on: vLLM then inspects the class, as on any machine.
    Done once per cache folder: the front end's children find ``SEEDED_ENV`` naming it and skip it."""
    log = logging.getLogger(VLLM.logger)
    folder = first_rank_dir(config.require_archive())  # every rank's folder carries the same caches
    if foundry.signing_key_id() is None or not folder.is_dir():
        return []  # the caches are used only signed: LOAD says so where it opens them
    written: list[str] = []
    try:
        root = Path(_envs().VLLM_CACHE_ROOT) / MODEL_INFO_DIR
        if os.environ.get(SEEDED_ENV) == str(root):
            return []
        os.environ[SEEDED_ENV] = str(root)  # whatever follows: a child would only repeat it
        found = foundry.read_engine_cache_files(folder, VLLM_CACHE, _is_model_info)
        for path, data in sorted(found.items()):
            target = root / path.partition("/")[2]
            if target.exists():
                continue  # this machine's own, which vLLM checks against its model file as it would the archive's
            root.mkdir(parents=True, exist_ok=True)
            tmp = root / f".{target.name}.{secrets.token_hex(4)}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, target)
            written.append(target.name)
    except (foundry.FoundryError, OSError, ImportError, AttributeError) as exc:  # another vLLM: its own lookup
        log.warning("Foundry load: vLLM's model-info cache is not seeded from the archive: %s. vLLM inspects the "
                    "model's class itself, as on a machine without it.", exc)  # fmt: skip
        return written
    if written:
        log.info("Foundry load: vLLM's model-info cache seeded from the archive (%s)", ", ".join(written))
    return written


def files(s: Any) -> dict[str, dict[str, Path]]:
    """SAVE, after capture: Triton's entries, vLLM's model-info files of the model and the AOT artifact folder of
    this configuration."""
    root = Path(_envs().VLLM_CACHE_ROOT)
    out = {TRITON: triton_files(), VLLM_CACHE: model_info_files(root, s.state.architectures)}
    if not s.state.compiles:
        return out
    folder = aot_folder(root, os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
    if folder is None or not any(folder.glob("rank_*/model")):
        raise UnsupportedConfigError(
            f"{VLLM.var('PACK_CACHES')}=1: vLLM compiled the model without leaving its AOT artifact below "
            f"{root.joinpath(*AOT_DIR)} (Inductor's cache is {os.environ.get('TORCHINDUCTOR_CACHE_DIR')!r}). {_NEEDED}"
        )
    tree = out[VLLM_CACHE]
    for top, _dirs, names in os.walk(folder):
        for name in names:
            path = Path(top) / name
            tree[path.relative_to(root).as_posix()] = path  # a link among them: pack refuses it by name
    return out


def copied(s: Any, dirs: Mapping[str, Path]) -> None:
    """LOAD, the caches copied: the keys of the compiled models the copy holds (their folders' names), which
    ``check_found`` compares with the one vLLM computes here."""
    directory = dirs.get(VLLM_CACHE)
    if directory is not None:
        aot = directory.joinpath(*AOT_DIR)
        s.timings["caches"]["compiled_model_keys"] = sorted(p.name for p in aot.iterdir()) if aot.is_dir() else []


def check_found(s: Any) -> str | None:
    """LOAD, after vLLM compiled or loaded the model: when the archive carried a compiled model and vLLM keyed
    this one otherwise (it then compiled again, as on a machine without it), the warning that says which of
    vLLM's settings can differ unseen, also in the report; else None. vLLM's key holds its environment settings
    (``vllm.envs.compile_factors()``), two of them paths it derives from the home and XDG folders unless set."""
    caches = s.timings.get("caches") or {}
    keys = caches.get("compiled_model_keys")
    if not keys or not s.state.compiles:
        return None
    folder = aot_folder(Path(_envs().VLLM_CACHE_ROOT), os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
    if folder is None or folder.name in keys:
        return None
    caches["compiled_again"] = folder.name
    paths = ", ".join(f"{name}={getattr(_envs(), name, '?')!r}" for name in _PATH_FACTORS)
    carried = ", ".join(k[:12] + "..." for k in keys)
    return (
        f"vLLM keyed the compiled model {folder.name[:12]}..., and the archive carries {carried}: "
        "vLLM compiled it again, as on a machine without it. vLLM's key holds its settings and environment; the "
        f"versions and switches are SAVE's here, so look first at the two paths it derives from the home and XDG "
        f"folders ({paths} here): start LOAD with SAVE's values of both, or SAVE's home."
    )


# vLLM's compile factors that are paths derived from the home and XDG folders (vllm/envs.py)
_PATH_FACTORS = ("VLLM_CONFIG_ROOT", "VLLM_XLA_CACHE_PATH")


def _point_vllm(directory: Path) -> dict[str, str]:
    return {"VLLM_CACHE_ROOT": str(directory)}


PLAN = CachePlan(
    point={TRITON: point_triton, VLLM_CACHE: _point_vllm},
    files=files,
    settings=settings,
    check_save=check_save,
    copied=copied,
)
