"""The gate: the one set of rules that decides whether an archive is acceptable (docs/DESIGN.md, "One gate").

LOAD applies each rule as it reads the file the rule is about, and no more; ``foundry verify`` applies every
rule to every file (``verify_archive``, ``verify_graphs``: the eager run, which gathers what each rule refuses
into one ``Report`` instead of raising the first). Both run the same functions, so they say the same thing.
"""

from __future__ import annotations

from .documents import read_archive_document
from .eager import check_archive, verify_archive, verify_graphs
from .listing import authenticate_graph, manifest_disagreement
from .manifests import archive_manifest, authenticate_manifest, manifests_read_once
from .report import Check, CheckResult, Problem, ProblemKind, Report
from .signature import check_signature

__all__ = [
    "Check",
    "CheckResult",
    "Problem",
    "ProblemKind",
    "Report",
    "archive_manifest",
    "authenticate_graph",
    "authenticate_manifest",
    "check_archive",
    "check_signature",
    "manifest_disagreement",
    "manifests_read_once",
    "read_archive_document",
    "verify_archive",
    "verify_graphs",
]
