"""What an archive's JSON files say (docs/FORMAT.md): the values of a graph's metadata (``GraphMeta``), the
entries of the manifest, the machine identity, a rank's peers, and the listing of an engine's caches, each a
frozen value with its strict reader and its JSON form. No file is opened here (foundry.storage and
foundry.archive read and write the files); ``jsondocs`` is the one JSON dialect they all are written in, with
its seal, and ``jsonfields`` the strict readers of its values.
"""

from __future__ import annotations

from . import jsondocs, jsonfields
from .caches import (
    CACHES_DIR,
    CACHES_DOCUMENT,
    MAX_CACHE_BYTES,
    MAX_CACHE_FILE_BYTES,
    MAX_CACHE_FILES,
    CacheFile,
    CachePayload,
    CacheTree,
    cache_name_problem,
    cache_path_problem,
)
from .entries import (
    IMAGES_DIR,
    BundleRef,
    GraphEntry,
    GraphRole,
    GraphStorage,
    Group,
    ImageEntry,
    graph_entry,
    group_entry,
    image_entry,
    image_json,
    image_relpath,
)
from .graphmeta import GRAPH_FORMAT, GraphMeta
from .identity import Identity, compare
from .peers import PeerMapping, RankSpec
from .values import (
    FunctionRef,
    ImageRef,
    MemorySpec,
    OutputSpec,
    RecordRef,
    RegionSpec,
    RngSpec,
    TemplateRef,
    VariableRef,
)

__all__ = [
    "CACHES_DIR",
    "CACHES_DOCUMENT",
    "GRAPH_FORMAT",
    "IMAGES_DIR",
    "MAX_CACHE_BYTES",
    "MAX_CACHE_FILES",
    "MAX_CACHE_FILE_BYTES",
    "BundleRef",
    "CacheFile",
    "CachePayload",
    "CacheTree",
    "FunctionRef",
    "GraphEntry",
    "GraphMeta",
    "GraphRole",
    "GraphStorage",
    "Group",
    "Identity",
    "ImageEntry",
    "ImageRef",
    "MemorySpec",
    "OutputSpec",
    "PeerMapping",
    "RankSpec",
    "RecordRef",
    "RegionSpec",
    "RngSpec",
    "TemplateRef",
    "VariableRef",
    "cache_name_problem",
    "cache_path_problem",
    "compare",
    "graph_entry",
    "group_entry",
    "image_entry",
    "image_json",
    "image_relpath",
    "jsondocs",
    "jsonfields",
]
