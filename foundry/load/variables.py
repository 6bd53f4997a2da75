"""LOAD: the module variables SAVE carried, written into the archived images before their kernels run.

SAVE carries every module variable (``__constant__``, ``__device__``, ``__managed__``) of an image a
graph uses whose value differed from a fresh load of that image (foundry.save.variables; docs/FORMAT.md,
"Module variables"). LOAD loads a fresh copy of the image, so once the image is in the driver, and before
any graph of it is built (hence before any can replay), the listed variables are written into this
process's copy: their bytes read from the archive's store with their size and SHA-256 proven, the
variable found with cuLibraryGetGlobal on the loaded library and its size checked, then copied in.

A process holds one copy of each image: the first listing written for an image stands, and a graph or
manifest that needs other values of that image's variables raises ``VariableConflictError`` before it can
replay. A listing of None (an archive written before SAVE recorded variables) asks for nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from foundry import kernels
from foundry._state import ProcessState
from foundry.errors import VariableConflictError
from foundry.gate import undefined_variable, variable_of_other_size
from foundry.native.driver import memcpy_htod, module_globals
from foundry.schema import VariableRef
from foundry.storage import read_value

from .source import GraphSource

__all__ = ["write_source_variables", "write_variables"]

Listing = tuple[VariableRef, ...] | None


@dataclass
class _Written:
    """By image SHA-256: the variables written into this process's copy (name -> size and SHA-256 of the
    bytes; empty: none, the image needs its initial values), and which file asked for them."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    values: dict[str, dict[str, tuple[int, str]]] = field(default_factory=dict)
    asked_by: dict[str, str] = field(default_factory=dict)


_STATE = ProcessState("load.variables", _Written)


def write_variables(sha: str, variables: Listing, archive_dir: Path, asked_by: str) -> None:
    """Writes the ``variables`` the archive at ``archive_dir`` lists for loaded image ``sha`` (``asked_by``:
    the file listing them, for messages), once per process; checks a later listing against the first.
    Needs a current CUDA context. ``ArchiveCorruptError``: damaged bytes, or a variable the loaded image
    does not define or defines with another size; ``VariableConflictError``: another listing stands."""
    if variables is None:
        return
    wanted = {v.name: (v.bytes, v.sha256) for v in variables}
    state = _STATE.get()
    with state.lock:  # one writer at a time, so the first listing is the one written and checked against
        done = state.values.get(sha)
        if done is None:
            _write(sha, variables, archive_dir, asked_by)
            state.values[sha], state.asked_by[sha] = wanted, asked_by
            return
        first = state.asked_by[sha]
    if done != wanted:
        name = min(n for n in {*done, *wanted} if done.get(n) != wanted.get(n))
        raise VariableConflictError(
            f"{asked_by} needs module variable {name} of kernel image {sha} to hold "
            f"{_describe(wanted.get(name))}, but this process wrote {_describe(done.get(name))} for {first}. A "
            "process holds one copy of each image, so these graphs cannot replay together as saved: load them in "
            "separate processes, or save them again into one archive.",
            image=sha,
            variable=name,
        )


def _describe(value: tuple[int, str] | None) -> str:
    return f"the {value[0]} bytes with SHA-256 {value[1]}" if value else "its initial value"


def _write(sha: str, variables: tuple[VariableRef, ...], archive_dir: Path, asked_by: str) -> None:
    handle = kernels.loaded_image(sha).handle
    located = module_globals(handle, True, [v.name for v in variables], [True] * len(variables))
    for v, found in zip(variables, located, strict=True):
        data = read_value(archive_dir, v.sha256, v.bytes)
        if found is None:
            raise undefined_variable(asked_by, v.name, v.bytes, sha)
        if found[1] != v.bytes:
            raise variable_of_other_size(asked_by, v.name, v.bytes, sha, str(found[1]))
        memcpy_htod(found[0], data)


def write_source_variables(src: GraphSource) -> None:
    """``write_variables`` for every image of a graph and its template (each loaded already)."""
    for s in (src, src.template):
        if s is not None:
            for ref in s.meta.images:
                write_variables(ref.sha256, ref.variables, s.archive_dir, str(s.json_path))
