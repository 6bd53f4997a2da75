"""Put first on an engine's ``PYTHONPATH`` by ``foundry bench ... --stacks`` or ``--digests``, and for vLLM's
native runs: Python imports this module in every interpreter it starts, so every process of the engine samples
its stacks (foundry_stack_sampler.py), fingerprints its attention layers (foundry_attention_digests.py), times
vLLM's capture (foundry_capture_timer.py) or logs its memory profile to the byte (foundry_memory_profile.py),
each where its variable is set. A ``sitecustomize`` this one shadows (the image's own) is run after it, as it
would have been."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.realpath(__file__))


def _start() -> None:
    names = ("foundry_stack_sampler", "foundry_attention_digests", "foundry_capture_timer", "foundry_memory_profile")
    for name in names:
        try:  # by name: this folder is on the path of the process it runs in, not a package of it
            importlib.import_module(name).start()
        except Exception as exc:
            print(f"{name} not started: {exc!r}", file=sys.stderr)


def _chain() -> None:
    if getattr(sys, "_foundry_sitecustomize_chained", False):
        return
    sys._foundry_sitecustomize_chained = True  # type: ignore[attr-defined]
    rest = [p for p in sys.path if os.path.realpath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin is None or os.path.dirname(spec.origin) == _HERE:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_start()
_chain()
