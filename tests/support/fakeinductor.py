"""Inductor's runtime autotuner (``torch._inductor.runtime.triton_heuristics``) as far as Foundry sees it: a kernel
holds one launcher per launch configuration, times them all at its first run (``benchmark_all_configs``) and keeps
the fastest (``autotune_to_one_config``). The timings come from a clock the test gives, so that two "processes"
can time the same kernel differently, as timing noise does on a GPU. Inductor's local autotune cache
(``torch._inductor.runtime.autotune_cache``) is a dictionary the test fills: a kernel that finds its choice there is
made with that configuration alone, as ``cached_autotune`` makes it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

MODULE = "torch._inductor.runtime.triton_heuristics"
CACHE_MODULE = "torch._inductor.runtime.autotune_cache"

Clock = Callable[[str, dict[str, int]], float]  # (kernel name, block sizes) -> seconds


class Config:
    """A Triton configuration: block sizes as keyword arguments, warps and stages."""

    def __init__(self, num_warps: int = 4, num_stages: int = 1, **kwargs: int) -> None:
        self.kwargs = dict(kwargs)
        self.num_warps = num_warps
        self.num_stages = num_stages

    def __repr__(self) -> str:
        return f"Config({self.kwargs}, num_warps={self.num_warps}, num_stages={self.num_stages})"


class Launcher:
    def __init__(self, config: Config) -> None:
        self.config = config


def build(clock: Clock) -> ModuleType:
    """A fresh module (one per "process": Foundry wraps its class's methods), its kernels timed by ``clock``."""

    class CachingAutotuner:
        def __init__(self, name: str, kernel_hash: str, configs: list[Config]) -> None:
            self.inductor_meta = {"kernel_name": name}
            self.kernel_hash = kernel_hash
            self.launchers = [Launcher(c) for c in configs]
            self.timed = 0  # how many times this kernel timed its configurations

        def benchmark_all_configs(self, *args: Any, **kwargs: Any) -> dict[Launcher, float]:
            self.timed += 1
            name = self.inductor_meta["kernel_name"]
            return {launcher: clock(name, launcher.config.kwargs) for launcher in self.launchers}

        def autotune_to_one_config(self, *args: Any, **kwargs: Any) -> None:
            timings = self.benchmark_all_configs(*args, **kwargs)
            self.launchers = [min(timings, key=timings.__getitem__)]

        def run(self, *args: Any, **kwargs: Any) -> Config:
            """Launches the kernel: the first run of several configurations chooses one; returns the one run."""
            if len(self.launchers) > 1:
                self.autotune_to_one_config(*args, **kwargs)
            return self.launchers[0].config

    module = ModuleType(MODULE)
    module.CachingAutotuner = CachingAutotuner  # type: ignore[attr-defined]
    module.Config = Config  # type: ignore[attr-defined]
    return module


def build_cache(best: dict[str, int]) -> ModuleType:
    """Inductor's local autotune cache of one "machine": kernel hash -> the R0_BLOCK a process chose and wrote."""

    class AutotuneCache:
        def __init__(self, kernel_hash: str) -> None:
            self.kernel_hash = kernel_hash
            self.reads = 0

        def read_best(self, inductor_meta: dict[str, Any], configs: list[Config]) -> Config | None:
            self.reads += 1
            block = best.get(self.kernel_hash)
            return next((c for c in configs if c.kwargs.get("R0_BLOCK") == block), None)

    module = ModuleType(CACHE_MODULE)
    module.AutotuneCache = AutotuneCache  # type: ignore[attr-defined]
    return module


def inject(module: ModuleType, monkeypatch: Any, cache: ModuleType | None = None) -> None:
    monkeypatch.setitem(sys.modules, MODULE, module)
    if cache is not None:
        monkeypatch.setitem(sys.modules, CACHE_MODULE, cache)
    else:
        monkeypatch.delitem(sys.modules, CACHE_MODULE, raising=False)


def reduction(module: ModuleType, name: str, kernel_hash: str) -> Any:
    """A reduction kernel with three configurations: the block size decides its summation order, as on a GPU. Where
    the cache injected beside ``module`` holds a choice for it, it is made with that one alone."""
    configs = [Config(XBLOCK=1, R0_BLOCK=r, num_warps=w) for r, w in ((2048, 8), (1024, 4), (512, 4))]
    cache = sys.modules.get(CACHE_MODULE)
    if cache is not None and (best := cache.AutotuneCache(kernel_hash).read_best({}, configs)) is not None:
        configs = [best]
    return module.CachingAutotuner(name, kernel_hash, configs)
