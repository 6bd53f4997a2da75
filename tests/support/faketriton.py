"""A stand-in for Triton 3.6's file cache (triton/runtime/cache.py, triton/knobs.py, the cache lookup of
triton/compiler/compiler.py), for CPU tests of the engine caches Foundry packs and unpacks: the module and
class names, the switches (``TRITON_CACHE_DIR``, ``TRITON_CACHE_MANAGER`` as ``module:Class``, both read
whenever an entry is opened) and the files as Triton writes them, a kernel's group file holding its files'
absolute paths. ``jit`` compiles a "kernel" as Triton does: a hit when the group lists the kernel's metadata,
else it writes the kernel's files and the group."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
from types import ModuleType
from typing import Any

__all__ = ["inject", "jit"]


class CacheManager:
    def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
        pass


class FileCacheManager(CacheManager):
    def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
        self.key = key
        root = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")
        self.cache_dir = os.path.join(root, key)
        os.makedirs(self.cache_dir, exist_ok=True)

    def _make_path(self, filename: str) -> str:
        return os.path.join(self.cache_dir, filename)

    def get_file(self, filename: str) -> str | None:
        path = self._make_path(filename)
        return path if os.path.exists(path) else None

    def get_group(self, filename: str) -> dict[str, str] | None:
        path = self.get_file(f"__grp__{filename}")
        if path is None:
            return None
        with open(path) as f:
            children = json.load(f).get("child_paths")
        return None if children is None else {c: p for c, p in children.items() if os.path.exists(p)}

    def put(self, data: bytes | str, filename: str, binary: bool = True) -> str:
        path = self._make_path(filename)
        with open(path, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        return path

    def put_group(self, filename: str, group: dict[str, str]) -> str:
        return self.put(json.dumps({"child_paths": group}), f"__grp__{filename}", binary=False)


def get_cache_manager(key: str) -> CacheManager:
    named = os.environ.get("TRITON_CACHE_MANAGER")
    cls: Any = FileCacheManager
    if named:
        module, _, name = named.partition(":")
        cls = getattr(importlib.import_module(module), name)
        if not any(c.__name__ == "CacheManager" for c in cls.mro()):
            raise RuntimeError(f"TRITON_CACHE_MANAGER={named!r} is not a CacheManager")
    manager: CacheManager = cls(hashlib.sha256(key.encode()).hexdigest()[:32])
    return manager


def jit(name: str, source: str) -> tuple[str, str]:
    """("hit" or "compiled", the path of the kernel's binary) for kernel ``name`` of ``source``."""
    manager: Any = get_cache_manager(source)
    group = manager.get_group(f"{name}.json") or {}
    if f"{name}.json" in group:
        return "hit", group[f"{name}.cubin"]
    files = {f"{name}.cubin": manager.put(f"cubin of {source}".encode(), f"{name}.cubin")}
    files[f"{name}.json"] = manager.put(json.dumps({"name": name}), f"{name}.json", binary=False)
    manager.put_group(f"{name}.json", files)
    return "compiled", files[f"{name}.cubin"]


def inject(monkeypatch: Any) -> None:
    """Puts ``triton``, ``triton.runtime`` and ``triton.runtime.cache`` in sys.modules for one test."""
    cache = ModuleType("triton.runtime.cache")
    cache.__dict__.update(CacheManager=CacheManager, FileCacheManager=FileCacheManager,
                          get_cache_manager=get_cache_manager)  # fmt: skip
    runtime = ModuleType("triton.runtime")
    runtime.__dict__.update(cache=cache)
    triton = ModuleType("triton")
    triton.__dict__.update(runtime=runtime, __version__="3.6.0")
    for module in (triton, runtime, cache):
        monkeypatch.setitem(sys.modules, module.__name__, module)
