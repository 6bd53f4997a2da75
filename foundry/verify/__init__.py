"""``foundry verify``: everything that can be proven about an archive without a GPU (docs/TRUST.md).

``verify_archive`` (an archive, or one graph) and ``verify_graphs`` (graphs together, as LOAD's pre-GPU
checks take them) run the checks (``files``, ``foreign``, ``kernels``, ``variables``, ``templates``,
``pointers``, ``identity``, ``signature``: one module each) and returns one ``Report``.
"""

from __future__ import annotations

from .archive import check_archive, verify_archive, verify_graphs
from .report import Check, CheckResult, Problem, ProblemKind, Report

__all__ = [
    "Check",
    "CheckResult",
    "Problem",
    "ProblemKind",
    "Report",
    "check_archive",
    "verify_archive",
    "verify_graphs",
]
