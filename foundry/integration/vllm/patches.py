"""The hook points in vLLM 0.26.0, each routed to lifecycle.py. One function per vLLM module; each runs
when that module is imported (hooks.when_imported) and replaces attributes of it, once.

vllm/v1/worker/gpu_worker.py
  Worker.init_device                         start: refuse unsupported settings; end: phase "init_device"
  init_worker_distributed_environment        (module global, called by init_device after the device is set,
                                             before NCCL): archive check, kernel images, allocation region;
                                             after it, before vLLM's memory snapshot: the small-allocation granule
  Worker.load_model                          end: phase "load_model"; LOAD starts the graph builds
  Worker.determine_available_memory          SAVE keeps the answer; LOAD answers from the archive
  Worker.initialize_from_config              the KV-cache phase (see lifecycle.initialize_from_config)
  kernel_warmup                              (module global, called by compile_or_warm_up_model) LOAD skips it
  Worker.compile_or_warm_up_model            end: the engine's start-up is over (SAVE packs what its warm-up
                                             compiled after capture into the archive's caches)
vllm/v1/worker/gpu/model_runner.py           (V2 runner)
  GPUModelRunner.capture_model               SAVE: capture with Foundry, save; LOAD: install loaded graphs
vllm/v1/worker/gpu_model_runner.py           (V1 runner, VLLM_USE_V2_MODEL_RUNNER=0)
  GPUModelRunner.capture_model               the same, for CUDAGraphWrapper's graphs
vllm/compilation/cuda_graph.py
  CUDAGraphWrapper.__init__                  end: LOAD gives a piece compiled after capture_model its graphs
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..shared import hooks
from . import lifecycle
from .config import VLLM

__all__ = ["TARGETS", "install_gpu_worker", "install_graph_wrapper", "install_runner_v1", "install_runner_v2"]

Fn = Callable[..., Any]


def wrap(owner: Any, name: str, make: Callable[[Fn], Fn]) -> bool:
    return hooks.wrap(owner, name, make, VLLM)


def _around_init_device(original: Fn) -> Fn:
    def init_device(self: Any, *args: Any, **kwargs: Any) -> Any:
        lifecycle.init_device_start(self)
        result = original(self, *args, **kwargs)
        lifecycle.init_device_end(self)
        return result

    return init_device


def _before_distributed(original: Fn) -> Fn:
    def init_worker_distributed_environment(vllm_config: Any, *args: Any, **kwargs: Any) -> Any:
        rank = args[0] if args else kwargs.get("rank", 0)
        lifecycle.before_distributed(vllm_config, int(rank))
        result = original(vllm_config, *args, **kwargs)
        lifecycle.after_distributed()
        return result

    return init_worker_distributed_environment


def _after_load_model(original: Fn) -> Fn:
    def load_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        lifecycle.load_model_end(self)
        return result

    return load_model


def _instead_of_memory_profile(original: Fn) -> Fn:
    def determine_available_memory(self: Any) -> int:
        return lifecycle.determine_available_memory(self, original)

    return determine_available_memory


def _around_kv_cache(original: Fn) -> Fn:
    def initialize_from_config(self: Any, kv_cache_config: Any) -> Any:
        return lifecycle.initialize_from_config(self, original, kv_cache_config)

    return initialize_from_config


def _instead_of_kernel_warmup(original: Fn) -> Fn:
    def kernel_warmup(worker: Any) -> Any:
        return lifecycle.kernel_warmup(original, worker)

    return kernel_warmup


def _after_warm_up(original: Fn) -> Fn:
    def compile_or_warm_up_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        lifecycle.warmed_up()
        return result

    return compile_or_warm_up_model


def _instead_of_capture(original: Fn) -> Fn:
    def capture_model(self: Any) -> Any:
        return lifecycle.capture_model(self, original)

    return capture_model


def _after_wrapper_init(original: Fn) -> Fn:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        lifecycle.wrapper_created(self)

    return __init__


def install_gpu_worker(module: ModuleType) -> None:
    worker = module.Worker
    wrap(worker, "init_device", _around_init_device)
    wrap(module, "init_worker_distributed_environment", _before_distributed)
    wrap(worker, "load_model", _after_load_model)
    wrap(worker, "determine_available_memory", _instead_of_memory_profile)
    wrap(worker, "initialize_from_config", _around_kv_cache)
    wrap(module, "kernel_warmup", _instead_of_kernel_warmup)
    wrap(worker, "compile_or_warm_up_model", _after_warm_up)


def install_runner_v2(module: ModuleType) -> None:
    wrap(module.GPUModelRunner, "capture_model", _instead_of_capture)


def install_runner_v1(module: ModuleType) -> None:
    wrap(module.GPUModelRunner, "capture_model", _instead_of_capture)


def install_graph_wrapper(module: ModuleType) -> None:
    wrap(module.CUDAGraphWrapper, "__init__", _after_wrapper_init)


# module -> what to patch in it when it is imported
TARGETS: dict[str, Callable[[ModuleType], None]] = {
    "vllm.v1.worker.gpu_worker": install_gpu_worker,
    "vllm.v1.worker.gpu.model_runner": install_runner_v2,
    "vllm.v1.worker.gpu_model_runner": install_runner_v1,
    "vllm.compilation.cuda_graph": install_graph_wrapper,
}
