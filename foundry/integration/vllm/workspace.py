"""vLLM's workspace (``vllm/v1/worker/workspace.py``): one scratch buffer per micro-batch slot that kernels
(the fused-MoE modular kernel, some attention backends) take views of, grown on demand during memory profiling
and warm-up, and locked against growth once the V1 runner has captured its graphs.

Captured graphs hold the workspace's address, and native vLLM keeps using that same buffer eagerly afterwards
(the sampler warm-up, every forward that runs outside a graph). LOAD skips the runs that grow it, so without
help the first eager forward would find it empty, and locked where the V1 runner locks it. SAVE therefore
records each slot's address and size and whether the workspace was locked; LOAD puts SAVE's buffers back
(``restored_tensor``: memory it mapped from the archive) right after the KV cache, before any eager forward,
and locks it where native vLLM would. The engine then computes with exactly native's buffers, at native's
addresses, and never grows the workspace when native would not.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from ..shared.errors import ArchiveMetadataError, PatchTargetError, UnsupportedConfigError
from .config import VLLM

__all__ = ["MODULE", "Workspace", "install", "lock", "saved"]

MODULE = "vllm.v1.worker.workspace"


@dataclass(frozen=True)
class Workspace:
    """The workspace at the end of SAVE's capture: (address, bytes) per slot (0, 0 where a slot was never
    allocated), and whether vLLM had locked it."""

    slots: tuple[tuple[int, int], ...] = ()
    locked: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"slots": [list(s) for s in self.slots], "locked": self.locked}

    @classmethod
    def from_json(cls, doc: Any) -> Workspace:
        if doc is None:  # a model runner that never made a workspace manager
            return cls()
        slots = doc.get("slots") if isinstance(doc, dict) else None
        locked = doc.get("locked") if isinstance(doc, dict) else None
        if (
            not isinstance(slots, list)
            or type(locked) is not bool
            or not all(isinstance(s, list) and len(s) == 2 and all(type(v) is int and v >= 0 for v in s) for s in slots)
        ):
            raise ArchiveMetadataError(f"the saved vLLM workspace {doc!r} is not one SAVE writes; run SAVE again")
        return cls(tuple((a, n) for a, n in slots), locked)


def _manager() -> Any | None:
    """vLLM's workspace manager, or None where this process has none (vLLM made none, or its module is not
    imported: no model code asked for it)."""
    module = sys.modules.get(MODULE)
    if module is None or not module.is_workspace_manager_initialized():
        return None
    manager = module.current_workspace_manager()
    if not isinstance(getattr(manager, "_current_workspaces", None), list):
        raise PatchTargetError(
            f"vLLM's workspace manager keeps no _current_workspaces list: this is not vLLM {VLLM.version}'s. "
            f"{VLLM.fallback()}"
        )
    return manager


def saved(region: tuple[int, int]) -> Workspace:
    """SAVE, once vLLM has captured: the workspace as LOAD must restore it. Every buffer must lie in the
    region (``(base, end)``), where LOAD maps SAVE's memory back."""
    manager = _manager()
    if manager is None:
        return Workspace()
    slots = []
    for ws in manager._current_workspaces:
        if ws is None:
            slots.append((0, 0))
            continue
        address, nbytes = int(ws.data_ptr()), int(ws.numel()) * int(ws.element_size())
        if not region[0] <= address < address + nbytes <= region[1]:
            raise UnsupportedConfigError(
                f"vLLM's workspace ({nbytes} bytes at {address:#x}) lies outside Foundry's region "
                f"[{region[0]:#x}, {region[1]:#x}): it was allocated before the region was set, so LOAD could not "
                f"give it back. Report this with the vLLM settings, or use {VLLM.var('MODE')}=off."
            )
        slots.append((address, nbytes))
    return Workspace(tuple(slots), bool(manager.is_locked()))


def install(saved_workspace: Workspace, restored_tensor: Any) -> None:
    """LOAD, once SAVE's memory is mapped and before any eager forward: SAVE's buffers in vLLM's workspace
    manager, in place of whatever this process allocated for it (a compile warm-up may have). ``restored_tensor``
    is ``FoundryApi.restored_tensor``, which refuses an address LOAD did not map."""
    manager = _manager()
    if manager is None:
        if any(n for _, n in saved_workspace.slots):
            raise ArchiveMetadataError(
                "the archive restores a vLLM workspace but this vLLM made no workspace manager: SAVE ran another "
                "vLLM or model runner. Start with SAVE's settings, or run SAVE again."
            )
        return
    slots = manager._current_workspaces
    if len(slots) != len(saved_workspace.slots):
        raise ArchiveMetadataError(
            f"vLLM's workspace has {len(slots)} micro-batch slots here and {len(saved_workspace.slots)} in SAVE: the "
            "micro-batching settings differ. Start with SAVE's settings, or run SAVE again."
        )
    for i, (address, nbytes) in enumerate(saved_workspace.slots):
        slots[i] = restored_tensor(address, nbytes) if nbytes else None


def lock(saved_workspace: Workspace) -> None:
    """LOAD, where native vLLM's capture ends: locked as SAVE's was (the V1 runner locks it, V2 does not)."""
    manager = _manager()
    if manager is not None and saved_workspace.locked:
        manager.lock()
