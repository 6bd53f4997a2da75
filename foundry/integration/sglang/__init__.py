"""Foundry for SGLang 0.5.17: a ``sglang.srt.plugins`` entry point that makes SGLang save its decode and
prefill CUDA graphs (FOUNDRY_SGLANG_MODE=save) and start from them (FOUNDRY_SGLANG_MODE=load), on one GPU.

    FOUNDRY_SGLANG_MODE=save FOUNDRY_SGLANG_ARCHIVE=/tmp/arch foundry run -- python -m sglang.launch_server ...
    FOUNDRY_SGLANG_MODE=load FOUNDRY_SGLANG_ARCHIVE=/tmp/arch foundry run -- python -m sglang.launch_server ...

Decode graphs (``full`` backend) and prefill graphs (``breakable`` backend: segments between eager attention
steps) are both saved; SGLang's defaults. Importing this package imports neither SGLang nor torch; the plugin
is inert unless FOUNDRY_SGLANG_MODE is save or load.
"""

from __future__ import annotations

from ..shared.errors import (
    ArchiveMetadataError,
    ArchiveMismatchError,
    IntegrationError,
    PatchTargetError,
    PhaseLayoutError,
    PluginConfigError,
    UnsupportedConfigError,
)
from .config import SGLANG, Mode, PluginConfig
from .metadata import SglangMetadata, read_metadata
from .plugin import register

__all__ = [
    "SGLANG",
    "ArchiveMetadataError",
    "ArchiveMismatchError",
    "IntegrationError",
    "Mode",
    "PatchTargetError",
    "PhaseLayoutError",
    "PluginConfig",
    "PluginConfigError",
    "SglangMetadata",
    "UnsupportedConfigError",
    "read_metadata",
    "register",
]
