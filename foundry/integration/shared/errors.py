"""Errors of the engine plugins. Each message names the problem and the next step."""

from __future__ import annotations

import foundry

__all__ = [
    "ArchiveMetadataError",
    "ArchiveMismatchError",
    "IntegrationError",
    "PatchTargetError",
    "PhaseLayoutError",
    "PluginConfigError",
    "UnsupportedConfigError",
]


class IntegrationError(foundry.FoundryError):
    """Base of every error an engine plugin raises on purpose."""


class PluginConfigError(IntegrationError):
    """A FOUNDRY_<ENGINE>_* environment variable is missing or malformed."""


class UnsupportedConfigError(IntegrationError):
    """The engine's configuration uses something the plugin cannot save or load."""


class ArchiveMetadataError(IntegrationError):
    """The plugin's metadata is missing, not what the archive's manifest lists, of another format version, or
    says something SAVE never writes (a step or a path the plugin does not take)."""


class ArchiveMismatchError(IntegrationError):
    """The archive was saved for another model, configuration, software version or GPU."""


class PhaseLayoutError(IntegrationError):
    """LOAD's device allocations left SAVE's trajectory at a start-up phase boundary."""


class PatchTargetError(IntegrationError):
    """A function or attribute the plugin hooks is not where the engine version it was written for has it."""
