"""Kernel images read from their bytes (a fatbin, a CUDA ELF file or PTX text): their format, the kernels
they define with each kernel's parameter list, and their module variables. Strict and never raising:
what cannot be read with certainty is reported as not known. Pure Python: ``foundry verify`` and SAVE use
it without a GPU; storing the image files is foundry.storage's.
"""

from __future__ import annotations

from .kparams import KernelParams, params_reach, params_span
from .scan import ImageFormat, KernelNames, ModuleVariables, detect_format, module_variables, scan_image

__all__ = [
    "ImageFormat",
    "KernelNames",
    "KernelParams",
    "ModuleVariables",
    "detect_format",
    "module_variables",
    "params_reach",
    "params_span",
    "scan_image",
]
