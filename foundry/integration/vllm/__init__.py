"""Foundry for vLLM 0.26: a ``vllm.general_plugins`` entry point that makes a vLLM engine save its decode
CUDA graphs (FOUNDRY_VLLM_MODE=save) and start from them (FOUNDRY_VLLM_MODE=load), on one GPU.

    FOUNDRY_VLLM_MODE=save FOUNDRY_VLLM_ARCHIVE=/tmp/arch foundry run -- python serve.py
    FOUNDRY_VLLM_MODE=load FOUNDRY_VLLM_ARCHIVE=/tmp/arch foundry run -- python serve.py

The engine runs with ``compilation_config={"cudagraph_mode": "FULL_DECODE_ONLY"}``. Importing this package
imports neither vLLM nor torch; the plugin is inert unless FOUNDRY_VLLM_MODE is save or load.

The plugin's metadata, ``vllm_plugin.json``, is a document of the archive (docs/FORMAT.md, "Documents"):
listed in the manifest, sealed, covered by its signature and checked by ``foundry verify``; LOAD reads it
only as the manifest lists it and checks every value before it uses one (shared/metadata.py).
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
from .config import Mode, PluginConfig
from .metadata import VllmMetadata, read_metadata
from .plugin import register

# Every error the plugin raises on purpose; the engine-neutral base under its vLLM name.
VllmIntegrationError = IntegrationError
# What vLLM's SAVE writes into vllm_plugin.json.
ArchiveMetadata = VllmMetadata

__all__ = [
    "ArchiveMetadata",
    "ArchiveMetadataError",
    "ArchiveMismatchError",
    "IntegrationError",
    "Mode",
    "PatchTargetError",
    "PhaseLayoutError",
    "PluginConfig",
    "PluginConfigError",
    "UnsupportedConfigError",
    "VllmIntegrationError",
    "VllmMetadata",
    "read_metadata",
    "register",
]
