"""What every engine plugin needs, whatever the engine: its identity and settings, the errors, patching
the engine's modules when they are imported, the Foundry API behind one interface, and routing the engine's
capture to Foundry. Importing it imports no engine and no torch; it uses only the public ``foundry`` API.
An engine's own package (``foundry.integration.vllm``) holds only that engine's hook points and phases.
"""

from __future__ import annotations

from .backend import FoundryApi, PublicFoundryApi
from .capture import foundry_capture
from .engine import Engine
from .errors import (
    ArchiveMetadataError,
    ArchiveMismatchError,
    IntegrationError,
    PatchTargetError,
    PhaseLayoutError,
    PluginConfigError,
    UnsupportedConfigError,
)
from .hooks import when_imported, wrap

__all__ = [
    "ArchiveMetadataError",
    "ArchiveMismatchError",
    "Engine",
    "FoundryApi",
    "IntegrationError",
    "PatchTargetError",
    "PhaseLayoutError",
    "PluginConfigError",
    "PublicFoundryApi",
    "UnsupportedConfigError",
    "foundry_capture",
    "when_imported",
    "wrap",
]
