"""Exception types. Every message says what happened and what to do next.

The archive layer raises only ``ArchiveError`` subclasses, so that a reader fed arbitrary bytes
can be trusted to fail in one well-defined way.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = [
    "ArchiveCorruptError",
    "ArchiveError",
    "ArchiveForeignError",
    "ArchiveSignatureError",
    "ArchiveVersionError",
    "CachesRefusedError",
    "CodecError",
    "DriverError",
    "FoundryError",
    "IdentityMismatchError",
    "InterposerNotLoadedError",
    "KernelNotFoundError",
    "LayoutMismatchError",
    "LoadError",
    "ModuleAddressError",
    "ModuleVariableError",
    "ParamIntrospectionError",
    "PeerMappingError",
    "PeerMemoryError",
    "RankMismatchError",
    "RegionBaseTakenError",
    "RegionError",
    "RegionFullError",
    "RegionStateError",
    "RegistryError",
    "SaveError",
    "TorchMissingError",
    "UnsupportedNodeError",
    "VariableConflictError",
    "VariablesUnknownError",
]


class FoundryError(Exception):
    """Base of every error Foundry raises on purpose."""


class TorchMissingError(FoundryError, AttributeError):
    """A name of the package that needs PyTorch (``foundry.CUDAGraph``, ``foundry.graph``) was asked for where
    torch cannot be imported. An ``AttributeError``, so that ``hasattr(foundry, "CUDAGraph")`` is False
    there as for any name a module lacks; the message says to install PyTorch, and ``__cause__`` is the
    failed import."""


class InterposerNotLoadedError(FoundryError):
    """libfoundry was not preloaded, so allocations and image loads are not being recorded."""


class DriverError(FoundryError):
    """A CUDA driver call failed. ``code`` is the CUresult (or a Foundry code above 10000)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


class RegionError(DriverError):
    """The deterministic allocation region refused an operation."""


class RegionStateError(RegionError):
    """A region call made out of order (no region set, one already set, ...)."""


class RegionBaseTakenError(RegionError):
    """The requested base address is already in use in this process."""


class RegionFullError(RegionError):
    """An allocation would escape the region, or physical memory ran out while mapping it."""


class RegistryError(DriverError):
    """The kernel-image registry cannot answer."""


class KernelNotFoundError(RegistryError):
    """A kernel named by a graph is not in any recorded or archived image."""


class CodecError(DriverError):
    """A captured graph cannot be turned into records, or records into a graph."""


class UnsupportedNodeError(CodecError):
    """The graph holds a node type Foundry cannot persist (host callback, memory node, ...)."""


class ParamIntrospectionError(CodecError):
    """The driver cannot describe a kernel's parameters, so they cannot be saved faithfully."""


_Refusal = TypeVar("_Refusal", bound="ArchiveError")


class ArchiveError(FoundryError):
    """An archive cannot be read, or must not be used on this machine."""

    kind: str = "corrupt"
    """What ``foundry verify`` reports the problem as (the values of foundry.gate.ProblemKind): the class's, or
    where the rule that refuses knows more, ``missing``, ``checksum`` or ``mismatch`` (``as_kind``)."""

    def as_kind(self: _Refusal, kind: str) -> _Refusal:
        """This error, reported by ``foundry verify`` as a problem of ``kind``."""
        self.kind = kind
        return self


class ArchiveCorruptError(ArchiveError):
    """Truncated, bit-flipped or otherwise malformed archive content."""


class ArchiveVersionError(ArchiveError):
    """The archive was written in a format version this Foundry cannot read."""

    kind = "version"


class ArchiveForeignError(ArchiveError):
    """The file is not a Foundry archive at all."""

    kind = "foreign"


class ArchiveSignatureError(ArchiveError):
    """A signing key is configured and the archive is unsigned or wrongly signed."""

    kind = "signature"


class IdentityMismatchError(ArchiveError):
    """The archive was made on a different GPU, driver or software stack."""

    kind = "identity"


class CachesRefusedError(ArchiveError):
    """The engine caches an archive carries are not handed to the engine here: the archive is not signed with
    a key in force, they were made with another torch, Triton, engine or GPU, or their files are damaged. The
    engine starts without them, compiling as on a machine that never ran it."""


class SaveError(FoundryError):
    """SAVE cannot write the graph as asked; nothing was written."""


class PeerMemoryError(SaveError):
    """The process has memory of another process open (IPC mappings, allocations imported from a
    shareable handle: NCCL's peer buffers, a custom all-reduce's) that a graph may read, directly or
    through pointers in device memory, and that LOAD could not map at the same address again (an IPC
    mapping, a mapping outside the region), or the process declared no rank; nothing was written."""


class LoadError(FoundryError):
    """LOAD cannot rebuild the saved state in this process."""


class PeerMappingError(LoadError):
    """A graph reads another process's memory that SAVE found mapped in the region, and this process has
    not mapped it again at the same address (its communicators were not re-created, or not in the same
    order); nothing was loaded."""


class RankMismatchError(LoadError):
    """The graph was saved by another rank, world size or device than this process declares and runs on."""


class DeviceMismatchError(LoadError):
    """``load_cuda_modules_and_libraries`` loaded the archive's kernel images with another device's context
    current than the one LOAD runs on: module variables and kernels are per context, so the graphs would
    run on another device's copies."""


class LayoutMismatchError(LoadError):
    """This process did not make the same region allocations as the SAVE process."""


class ModuleVariableError(FoundryError):
    """A module variable (``__constant__``, ``__device__``, ``__managed__``) that a saved graph's kernels
    may read cannot be carried to LOAD as it is. ``image`` is the image's SHA-256, ``variable`` the
    variable's name (empty when the problem is the image's)."""

    def __init__(self, message: str, image: str = "", variable: str = "") -> None:
        super().__init__(message)
        self.image = image
        self.variable = variable


class ModuleAddressError(ModuleVariableError, SaveError):
    """A module variable holds, at ``offset``, the address of module memory of the SAVE process (another
    variable), which means nothing in another process; nothing was written."""

    def __init__(self, message: str, image: str = "", variable: str = "", offset: int = 0) -> None:
        super().__init__(message, image, variable)
        self.offset = offset


class VariablesUnknownError(ModuleVariableError, SaveError):
    """The module variables of an image a saved graph uses cannot be enumerated from its bytes (an
    entry that cannot be decompressed or read), so SAVE cannot tell what to carry; nothing was written."""


class VariableConflictError(ModuleVariableError):
    """Two graphs need different values of one module variable, and a process holds one copy of each
    loaded image: refused by SAVE (nothing written) and by LOAD (before either graph replays)."""
