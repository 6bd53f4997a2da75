"""The probe surface: the one place measurement code may look inside Foundry.

The instruments beside the library (the benchmark, foundry_bench, and the measuring scripts in scripts/)
import from Foundry only its public API (``foundry``), this module, ``foundry.errors`` and the engine
plugins' surfaces (tests/cpu/test_instruments.py holds them to it). What they need beyond the public API is
named here, and nowhere else: the library can change its insides freely so long as these names keep
answering. None of it is for programs that save and load graphs; all of it is for measuring them.

- LOAD seen from outside (``foundry.load``'s probe module, which answers with LOAD's own steps so that no
  caller reaches into a ``Loader``'s groups and handles): ``Loader``, ``LIMITS``, ``rebuild``,
  ``ProbeExec``, ``ExecPair``, ``exec_pairs``, ``member_pairs``, ``varying_differences``,
  ``template_builds``, ``ImageUse``, ``images_used``, ``load_again``, ``load_again_together``,
  ``next_launch``, ``group_count``, ``outputs``.
- The driver calls a probe makes around LOAD's (``foundry.native``): ``codec`` (graph instantiation flags
  and executable-graph updates), ``exec_update``, ``module_load``, ``module_function``, and
  ``preload_env`` (the environment that preloads the interposer in a child process).
- ``tensor_at``: a tensor viewing an output's saved bytes (needs torch; imported on first use).
- ``table``: the plain-text tables the reports print.
- The archive format, read only: the packages ``archive``, ``records`` and ``schema``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from foundry import archive, records, schema
from foundry.load import LIMITS, Loader
from foundry.load.probe import (
    ExecPair,
    ImageUse,
    ProbeExec,
    exec_pairs,
    group_count,
    images_used,
    load_again,
    load_again_together,
    member_pairs,
    next_launch,
    outputs,
    rebuild,
    template_builds,
    varying_differences,
)
from foundry.native import codec, preload_env
from foundry.native.driver import exec_update, module_function, module_load
from foundry.tables import table

if TYPE_CHECKING:
    from foundry.capture import tensor_at

__all__ = [
    "LIMITS",
    "ExecPair",
    "ImageUse",
    "Loader",
    "ProbeExec",
    "archive",
    "codec",
    "exec_pairs",
    "exec_update",
    "group_count",
    "images_used",
    "load_again",
    "load_again_together",
    "member_pairs",
    "module_function",
    "module_load",
    "next_launch",
    "outputs",
    "preload_env",
    "rebuild",
    "records",
    "schema",
    "table",
    "template_builds",
    "tensor_at",
    "varying_differences",
]


def __getattr__(name: str) -> Any:
    if name == "tensor_at":  # torch-facing: foundry.capture imports torch
        from foundry.capture import tensor_at

        return tensor_at
    raise AttributeError(f"module 'foundry.probe' has no attribute {name!r}")
