"""What every engine plugin needs, whatever the engine: its identity and settings, the errors, patching
the engine's modules when they are imported, the Foundry API behind one interface, and routing the engine's
capture to Foundry; the fingerprint and metadata an archive carries, the start-up phases SAVE records
and LOAD checks, the per-process session, and the steps of SAVE and LOAD every engine takes the same way
(``steps``). Importing it imports no engine and no torch; it uses only the public ``foundry`` API.
An engine's own package (``foundry.integration.vllm``, ``foundry.integration.sglang``) holds only that engine's
hook points and phases.
"""

from __future__ import annotations

from . import steps
from .backend import FoundryApi, PublicFoundryApi
from .capture import foundry_capture, foundry_device_module
from .config import EngineConfig, Mode
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
from .fingerprint import config_digest, software_fields
from .hooks import when_imported, wrap
from .metadata import ArchiveMetadata, Fingerprint, GraphEntry, MetadataFile, PhaseMark
from .phases import PhaseTracker, check_phase
from .ranks import NCCL_SETTINGS, Place, report_path
from .session import Session, SessionStore
from .tritoncache import kernel_names

__all__ = [
    "NCCL_SETTINGS",
    "ArchiveMetadata",
    "ArchiveMetadataError",
    "ArchiveMismatchError",
    "Engine",
    "EngineConfig",
    "Fingerprint",
    "FoundryApi",
    "GraphEntry",
    "IntegrationError",
    "MetadataFile",
    "Mode",
    "PatchTargetError",
    "PhaseLayoutError",
    "PhaseMark",
    "PhaseTracker",
    "Place",
    "PluginConfigError",
    "PublicFoundryApi",
    "Session",
    "SessionStore",
    "UnsupportedConfigError",
    "check_phase",
    "config_digest",
    "foundry_capture",
    "foundry_device_module",
    "kernel_names",
    "report_path",
    "software_fields",
    "steps",
    "when_imported",
    "wrap",
]
