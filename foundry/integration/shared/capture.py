"""SAVE's capture: the engine's own capture loop, with its CUDA graphs made by Foundry.

Engines capture through the names ``torch.cuda.CUDAGraph`` and ``torch.cuda.graph`` of the module that
holds their capture loop (vLLM: ``cudagraph_utils`` for the V2 runner, ``cuda_graph`` for V1). For the
duration of the capture the module's ``torch`` is replaced by a view of torch in which those two names
are Foundry's (``foundry.CUDAGraph``, a saveable graph wrapping ``torch.cuda.CUDAGraph(keep_graph=True)``,
and ``foundry.graph``, which enters ``torch.cuda.graph`` itself for each capture, so that torch's preparation
of it, as the engine has patched it at that moment, is the same under SAVE). Everything else the module reads
from torch is torch itself; no other module is affected.

Some capture code reaches ``graph`` through an object's reference to the ``torch.cuda`` module (SGLang's
backends keep ``self._device_module``): ``foundry_device_module`` routes that one reference the same way.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from .backend import FoundryApi
from .engine import Engine
from .errors import PatchTargetError

__all__ = ["foundry_capture", "foundry_device_module"]


class _CudaView:
    def __init__(self, cuda: Any, api: FoundryApi) -> None:
        self._cuda = cuda
        self._api = api

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cuda, name)

    def CUDAGraph(self, *args: Any, **kwargs: Any) -> Any:  # torch's name, not snake_case
        del args, kwargs  # keep_graph: Foundry's graphs always keep theirs
        return self._api.new_graph()

    def graph(
        self, cuda_graph: Any, pool: Any = None, stream: Any = None, capture_error_mode: str = "global"
    ) -> AbstractContextManager[Any]:
        return self._api.graph(cuda_graph, pool=pool, stream=stream, capture_error_mode=capture_error_mode)


class _TorchView:
    def __init__(self, torch: Any, api: FoundryApi) -> None:
        self._torch = torch
        self.cuda = _CudaView(torch.cuda, api)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._torch, name)


@contextmanager
def foundry_capture(module_name: str, api: FoundryApi, engine: Engine) -> Iterator[None]:
    """Within the block, ``module_name`` (a module of ``engine``) captures CUDA graphs with Foundry."""
    module = sys.modules.get(module_name)
    real = getattr(module, "torch", None)
    if module is None or real is None:
        raise PatchTargetError(
            f"{module_name} is not imported or does not use torch: {engine.name}'s capture is not where "
            f"{engine.name} {engine.version} has it. {engine.fallback()}"
        )
    module.torch = _TorchView(real, api)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        module.torch = real  # type: ignore[attr-defined]


@contextmanager
def foundry_device_module(owner: Any, name: str, api: FoundryApi, engine: Engine) -> Iterator[None]:
    """Within the block, ``owner.name`` (a reference to the ``torch.cuda`` module) captures with Foundry."""
    real = getattr(owner, name, None)
    if real is None or not hasattr(real, "graph") or not hasattr(real, "CUDAGraph"):
        raise PatchTargetError(
            f"{type(owner).__name__}.{name} is not a torch.cuda module: {engine.name}'s capture is not where "
            f"{engine.name} {engine.version} has it. {engine.fallback()}"
        )
    setattr(owner, name, _CudaView(real, api))
    try:
        yield
    finally:
        setattr(owner, name, real)
