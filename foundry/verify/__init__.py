"""``foundry verify``: the gate (foundry.gate) run eagerly, every rule on every file of an archive or of the
graphs given, without a GPU (docs/TRUST.md). ``verify_archive`` (an archive, or one graph) and
``verify_graphs`` (graphs together, as LOAD's pre-GPU checks take them) return one ``Report``.
"""

from __future__ import annotations

from foundry.gate import Check, CheckResult, Problem, ProblemKind, Report, check_archive, verify_archive, verify_graphs

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
