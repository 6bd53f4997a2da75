"""The gate: the one set of rules that decides whether an archive is acceptable (docs/DESIGN.md, "One gate").

LOAD applies each rule as it reads the file the rule is about, and no more; ``foundry verify`` applies every
rule to every file (``verify_archive``, ``verify_graphs``: the eager run, which gathers what each rule refuses
into one ``Report`` instead of raising the first). Both run the same functions, so they say the same thing.

The eager run and its report are imported on first use: LOAD imports the gate with its first module, at every
engine's start-up, and needs none of the checks only the eager run makes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .caches import open_engine_caches, read_engine_cache_files
from .documents import read_archive_document
from .graph import (
    authenticate_graph,
    check_agrees,
    check_template,
    check_template_path,
    graph_meta,
    graph_store,
    rebuilt_bundles,
)
from .identity import check_identity
from .manifests import authenticate_manifest, manifests_read_once, read_archive_region
from .signature import check_signature
from .symbols import missing_kernel, undefined_variable, variable_of_other_size

if TYPE_CHECKING:
    from .eager import check_archive, verify_archive, verify_graphs
    from .report import Check, CheckResult, Problem, ProblemKind, Report

_EAGER = {
    "Check": ".report",
    "CheckResult": ".report",
    "Problem": ".report",
    "ProblemKind": ".report",
    "Report": ".report",
    "check_archive": ".eager",
    "verify_archive": ".eager",
    "verify_graphs": ".eager",
}


def __getattr__(name: str) -> Any:
    module = _EAGER.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)


__all__ = [
    "Check",
    "CheckResult",
    "Problem",
    "ProblemKind",
    "Report",
    "authenticate_graph",
    "authenticate_manifest",
    "check_agrees",
    "check_archive",
    "check_identity",
    "check_signature",
    "check_template",
    "check_template_path",
    "graph_meta",
    "graph_store",
    "manifests_read_once",
    "missing_kernel",
    "open_engine_caches",
    "read_archive_document",
    "read_archive_region",
    "read_engine_cache_files",
    "rebuilt_bundles",
    "undefined_variable",
    "variable_of_other_size",
    "verify_archive",
    "verify_graphs",
]
