"""The fake vLLM's ``vllm.v1.worker.workspace`` (tests/support/fakevllm.py builds it): one scratch buffer, grown
on demand from the fake allocator and locked by the V1 runner's ``capture_model``, as vLLM 0.26's workspace
manager is; each request is traced with the buffer's address."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any


class WorkspaceManager:
    def __init__(self, allocate: Callable[[int], Any], trace: Callable[[str], None]) -> None:
        self._allocate = allocate
        self._trace = trace
        self._current_workspaces: list[Any] = [None]
        self._locked = False

    def lock(self) -> None:
        self._locked = True

    def is_locked(self) -> bool:
        return self._locked

    def get(self, nbytes: int) -> Any:
        current = self._current_workspaces[0]
        size = 0 if current is None else current.nbytes
        if size < nbytes:
            if self._locked:
                raise AssertionError(
                    f"Workspace is locked but allocation requires {nbytes} bytes, current size is {size}. "
                    "Workspace growth is not allowed after locking."
                )
            self._current_workspaces[0] = self._allocate(nbytes)
        self._trace(f"workspace:{self._current_workspaces[0].data_ptr():#x}")
        return self._current_workspaces[0]


def workspace_module(allocate: Callable[[int], Any], trace: Callable[[str], None]) -> ModuleType:
    """A fresh ``vllm.v1.worker.workspace`` whose managers allocate with ``allocate``."""
    managers: list[WorkspaceManager] = []
    module = ModuleType("vllm.v1.worker.workspace")
    module.__dict__.update(
        WorkspaceManager=WorkspaceManager,
        is_workspace_manager_initialized=lambda: bool(managers),
        current_workspace_manager=lambda: managers[-1],
        init_workspace_manager=lambda: managers.append(WorkspaceManager(allocate, trace)),
    )
    return module
