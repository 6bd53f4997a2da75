"""The gate: the one set of rules that decides whether an archive is acceptable (docs/DESIGN.md, "One gate").

LOAD applies each rule as it reads the file the rule is about, and no more; ``foundry verify`` applies every
rule to every file (``verify_archive``, ``verify_graphs``: the eager run, which gathers what each rule refuses
into one ``Report`` instead of raising the first). Both run the same functions, so they say the same thing.
"""

from __future__ import annotations

from .documents import read_archive_document
from .eager import check_archive, verify_archive, verify_graphs
from .graph import (
    authenticate_graph,
    check_agrees,
    check_template,
    check_template_path,
    graph_meta,
    graph_store,
    read_graph_meta,
)
from .identity import check_identity
from .kernels import missing_kernel
from .manifests import archive_manifest, authenticate_manifest, manifests_read_once, read_archive_region
from .report import Check, CheckResult, Problem, ProblemKind, Report
from .signature import check_signature
from .variables import undefined_variable, variable_of_other_size

__all__ = [
    "Check",
    "CheckResult",
    "Problem",
    "ProblemKind",
    "Report",
    "archive_manifest",
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
    "read_archive_document",
    "read_archive_region",
    "read_graph_meta",
    "undefined_variable",
    "variable_of_other_size",
    "verify_archive",
    "verify_graphs",
]
