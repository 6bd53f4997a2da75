"""SAVE: captured graphs into an archive (torch-free; foundry.capture adds tensors and RNG).

``graph`` extracts and writes one graph (``variables``: the module variables its images must hold,
carried with it); ``templates`` groups graphs of one topology and stores members as deltas;
``manifest`` writes the manifest last, the archive's commit point, listing the ``documents`` a program
wrote into the archive before it.
"""

from __future__ import annotations

from .beside import wait_beside
from .caches import pack_engine_caches
from .documents import write_archive_document
from .gcpause import gc_paused
from .graph import Extracted, SavedGraph, extract, extract_beside, save_graph, save_phases, saved_graphs
from .manifest import save_graph_manifest
from .rngprobe import can_drop_launches, launches_dropped, pointed_words, work_disabled

__all__ = [
    "Extracted",
    "SavedGraph",
    "can_drop_launches",
    "extract",
    "extract_beside",
    "gc_paused",
    "launches_dropped",
    "pack_engine_caches",
    "pointed_words",
    "save_graph",
    "save_graph_manifest",
    "save_phases",
    "saved_graphs",
    "wait_beside",
    "work_disabled",
    "write_archive_document",
]
