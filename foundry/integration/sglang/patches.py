"""The hook points in SGLang 0.5.17, each routed to lifecycle.py, registered through SGLang's own plugin hook
registry (``sglang.srt.plugins.hook_registry.HookRegistry``, AROUND hooks) and applied by it.

SGLang calls ``load_plugins()`` in the Engine's (or HTTP server's) process and at the start of each scheduler
process, and ``HookRegistry.apply_hooks()`` resolves every registered target by importing its module. So
``register()`` puts one hook on a class every process has imported already, ``Scheduler.init_model_worker``;
that hook runs only in the scheduler process, where the model is built, and registers and applies the model
runner's hooks there (ENTRY, then MODEL_HOOKS). The Engine's process never imports the model runner for us.

sglang/srt/managers/scheduler.py
  Scheduler.init_model_worker               refuse unsupported settings; install MODEL_HOOKS
sglang/srt/model_executor/model_runner.py
  ModelRunner.init_torch_distributed        archive check, kernel images, region; phase "distributed"
  ModelRunner.load_model                    phase "load_model"; LOAD starts the graph builds
  ModelRunner.alloc_memory_pool             phase "memory_pool"; LOAD checks the pool's size
  ModelRunner.init_attention_backends       phase "attention_backends"
  ModelRunner.init_cuda_graphs              SAVE: capture with Foundry, write the archive; LOAD: final checks
sglang/srt/mem_cache/kv_cache_configurator.py
  KVCacheConfigurator._profile_available_bytes   SAVE keeps it; LOAD answers SAVE's
sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py
  should_skip_auto_prefill_cuda_graph_for_memory  LOAD answers SAVE's
sglang/srt/model_executor/runner/prefill_cuda_graph_runner.py
  PrefillCudaGraphRunner.capture            SAVE: capture; LOAD: install the breakable graphs
sglang/srt/model_executor/runner/decode_cuda_graph_runner.py
  DecodeCudaGraphRunner.__init__            the isolated phase of the runner's buffers
  DecodeCudaGraphRunner.capture             SAVE: capture; LOAD: install the full graphs
"""

from __future__ import annotations

import pkgutil
import weakref
from collections.abc import Callable
from typing import Any

from ..shared.errors import PatchTargetError
from . import lifecycle
from .config import SGLANG

__all__ = ["ENTRY", "MODEL_HOOKS", "install_model_hooks", "register_entry"]

Hook = Callable[..., Any]

ENTRY = "sglang.srt.managers.scheduler.Scheduler.init_model_worker"
_RUNNER = "sglang.srt.model_executor.model_runner.ModelRunner"
_DECODE = "sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner"
_SETUP = "sglang.srt.model_executor.model_runner_components.cuda_graph_setup"
MODEL_HOOKS: dict[str, Hook] = {
    f"{_RUNNER}.init_torch_distributed": lifecycle.init_torch_distributed,
    f"{_RUNNER}.load_model": lifecycle.load_model,
    f"{_RUNNER}.alloc_memory_pool": lifecycle.alloc_memory_pool,
    f"{_RUNNER}.init_attention_backends": lifecycle.init_attention_backends,
    f"{_RUNNER}.init_cuda_graphs": lifecycle.init_cuda_graphs,
    "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator._profile_available_bytes": (
        lifecycle.profile_available_bytes
    ),
    f"{_SETUP}.should_skip_auto_prefill_cuda_graph_for_memory": lifecycle.prefill_memory_gate,
    "sglang.srt.model_executor.runner.prefill_cuda_graph_runner.PrefillCudaGraphRunner.capture": (
        lifecycle.capture_prefill
    ),
    f"{_DECODE}.__init__": lifecycle.decode_runner_init,
    f"{_DECODE}.capture": lifecycle.capture_decode,
}

# The registries (one per process; tests make more) that hold our hooks, by what was registered: each target
# gets its hook once, however often SGLang loads the plugin.
_DONE: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def _registry() -> tuple[Any, Any]:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    return HookRegistry, HookType


def _current(target: str) -> Any:
    owner_path, attribute = target.rsplit(".", 1)
    try:
        owner = pkgutil.resolve_name(owner_path)
    except (ImportError, AttributeError, ValueError):
        owner = None
    if owner is None or not hasattr(owner, attribute):
        raise PatchTargetError(
            f"SGLang has no {target}, which the Foundry adapter hooks: this is not the SGLang it was written for "
            f"({SGLANG.version}). {SGLANG.fallback()}"
        )
    return getattr(owner, attribute)


def _register(hooks: dict[str, Hook], apply: bool) -> None:
    """Registers each hook once in SGLang's registry; with ``apply``, applies them now and checks each landed
    (SGLang's registry logs a target it cannot patch and goes on; a missing hook must stop the start-up)."""
    registry, hook_type = _registry()
    done = _DONE.setdefault(registry, set())
    todo = {t: h for t, h in hooks.items() if t not in done}
    before = {t: _current(t) for t in todo} if apply else {}
    for target, hook in todo.items():
        registry.register(target, hook, hook_type.AROUND)
        done.add(target)
    if apply:
        registry.apply_hooks()
        missed = [t for t, original in before.items() if _current(t) is original]
        if missed:
            raise PatchTargetError(
                f"SGLang's hook registry did not patch {missed} (see its log): the Foundry adapter cannot run without "
                f"them. {SGLANG.fallback()}"
            )


def register_entry(error: Exception | None = None) -> None:
    """The one hook ``register()`` puts in every process. With ``error`` (malformed FOUNDRY_SGLANG_*), the hook
    raises it where the model would be built, so the scheduler stops with the message instead of starting
    without the plugin."""
    if error is None:
        _register({ENTRY: lifecycle.init_model_worker}, apply=False)
        return

    def refuse(original: Any, *args: Any, **kwargs: Any) -> Any:
        raise error

    _register({ENTRY: refuse}, apply=False)


def install_model_hooks() -> None:
    """In the scheduler process: the model runner's hooks, registered, applied and checked."""
    _register(MODEL_HOOKS, apply=True)
