"""Errors of the vLLM adapter. Each message names the problem and the next step."""

from __future__ import annotations

import foundry

__all__ = [
    "ArchiveMetadataError",
    "ArchiveMismatchError",
    "PatchTargetError",
    "PhaseLayoutError",
    "PluginConfigError",
    "UnsupportedConfigError",
    "VllmIntegrationError",
]


class VllmIntegrationError(foundry.FoundryError):
    """Base of every error the vLLM adapter raises on purpose."""


class PluginConfigError(VllmIntegrationError):
    """A FOUNDRY_VLLM_* environment variable is missing or malformed."""


class UnsupportedConfigError(VllmIntegrationError):
    """The vLLM configuration uses something the adapter cannot save or load (cumem allocator, sleep mode,
    more than one GPU, speculative decoding, a cudagraph mode other than FULL_DECODE_ONLY)."""


class ArchiveMetadataError(VllmIntegrationError):
    """The adapter's metadata file is missing, unreadable or of another schema."""


class ArchiveMismatchError(VllmIntegrationError):
    """The archive was saved for another model, configuration, software version or GPU."""


class PhaseLayoutError(VllmIntegrationError):
    """LOAD's device allocations left SAVE's trajectory at a start-up phase boundary."""


class PatchTargetError(VllmIntegrationError):
    """A vLLM function or attribute the adapter hooks is not where vLLM 0.26 has it."""
