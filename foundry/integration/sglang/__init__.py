"""Foundry for SGLang 0.5.17: a ``sglang.srt.plugins`` entry point that makes SGLang save its decode and
prefill CUDA graphs (FOUNDRY_SGLANG_MODE=save) and start from them (FOUNDRY_SGLANG_MODE=load), on one GPU or
on several in tensor parallel (expert parallel over the same GPUs included).

    FOUNDRY_SGLANG_MODE=save FOUNDRY_SGLANG_ARCHIVE=/tmp/arch foundry run -- python -m sglang.launch_server ...
    FOUNDRY_SGLANG_MODE=load FOUNDRY_SGLANG_ARCHIVE=/tmp/arch foundry run -- python -m sglang.launch_server ...

Decode graphs (``full`` backend) and prefill graphs (``breakable`` backend: segments between eager attention
steps) are both saved; SGLang's defaults. Importing this package imports neither SGLang nor torch; the plugin
is inert unless FOUNDRY_SGLANG_MODE is save or load.

The plugin's metadata, ``sglang_plugin.json``, is a document of the archive (docs/FORMAT.md, "Documents"):
listed in the manifest, sealed, covered by its signature and checked by ``foundry verify``; LOAD reads it
only as the manifest lists it. It describes each eager step between prefill segments, and LOAD calls only
the SGLang functions the plugin lists (allowed.py: ``radix_attention.unified_attention_with_output``), with
the arguments they take: a step naming anything else is refused by name as the metadata is read, before the
GPU is touched, and SAVE refuses to record one.
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
