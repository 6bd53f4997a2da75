"""LOAD: archived graphs back into executable graphs in this process (torch-free).

``startup`` runs at process start (images, kernels, metadata, warmed builder threads), ``readahead`` reads
the manifest's graphs there for LOAD to take (from the graph bundle, or the graph files); ``source``
reads and checks a graph's files before the GPU is touched; ``build`` does the driver work for one
graph; ``loader`` runs many in the background, group by group (``groups``), on LOAD's ``threads``;
``variables`` writes the module variables SAVE carried into each loaded image before its graphs run;
``probe`` is what measurements (the benchmark) may look at inside LOAD, and nothing else is; they reach it
through the probe surface, foundry.probe.
"""

from __future__ import annotations

from . import probe
from .build import LoadedGraph, load_graph, preflight
from .loader import Loader
from .startup import load_cuda_modules_and_libraries, startup_phases, wait_for_startup
from .threads import LIMITS

__all__ = [
    "LIMITS",
    "LoadedGraph",
    "Loader",
    "load_cuda_modules_and_libraries",
    "load_graph",
    "preflight",
    "probe",
    "startup_phases",
    "wait_for_startup",
]
