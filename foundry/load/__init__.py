"""LOAD: archived graphs back into executable graphs in this process (torch-free).

``startup`` runs at process start (images, kernels, metadata, warmed builder threads); ``source``
reads and checks a graph's files before the GPU is touched; ``build`` does the driver work for one
graph; ``loader`` runs many in the background, group by group (``groups``), on LOAD's ``threads``;
``variables`` writes the module variables SAVE carried into each loaded image before its graphs run.
"""

from __future__ import annotations

from .build import (
    LoadedGraph,
    Occupied,
    build_exec,
    check_identity,
    load_graph,
    load_images,
    preflight,
    prepare_memory,
    resolve_functions,
)
from .groups import GraphHandle, Group
from .loader import Loader
from .source import GraphSource, read_meta_cached, read_source, read_sources, source_images
from .startup import load_cuda_modules_and_libraries, startup_phases, wait_for_startup
from .threads import LIMITS, Limits

__all__ = [
    "LIMITS",
    "GraphHandle",
    "GraphSource",
    "Group",
    "Limits",
    "LoadedGraph",
    "Loader",
    "Occupied",
    "build_exec",
    "check_identity",
    "load_cuda_modules_and_libraries",
    "load_graph",
    "load_images",
    "preflight",
    "prepare_memory",
    "read_meta_cached",
    "read_source",
    "read_sources",
    "resolve_functions",
    "source_images",
    "startup_phases",
    "wait_for_startup",
]
