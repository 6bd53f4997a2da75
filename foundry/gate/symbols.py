"""What an image must define: the kernels the manifest lists for it, and the module variables a listing carries
for it (docs/FORMAT.md, "Module variables"), of the size given. LOAD finds each in the driver once the image is
loaded (load/startup.py, load/variables.py); ``foundry verify`` in the image's symbols (gate/kernels.py,
gate/variables.py). Both refuse with these."""

from __future__ import annotations

from pathlib import Path

from foundry.errors import ArchiveCorruptError
from foundry.storage import PathLike

__all__ = ["missing_kernel", "undefined_variable", "variable_of_other_size"]


def missing_kernel(manifest_path: Path, name: str, image: str) -> ArchiveCorruptError:
    """The refusal of a manifest listing kernel ``name`` in ``image``, which does not define it: LOAD's start-up
    (which looks every listed kernel up in the driver) and ``foundry verify`` (which reads the image's symbols)
    raise it alike."""
    return ArchiveCorruptError(
        f"{manifest_path}: the manifest lists kernel {name} in image {image}, which does not define it: the manifest "
        "does not belong to these images. Save the archive again."
    ).as_kind("missing")


def undefined_variable(asked_by: PathLike, name: str, nbytes: int, image: str) -> ArchiveCorruptError:
    """The refusal of a listing (``asked_by``: the graph's JSON, or the manifest) that carries variable ``name`` of
    ``nbytes`` bytes for ``image``, which does not define it: LOAD finds it in the driver once the image is
    loaded, ``foundry verify`` in the image's symbols."""
    return ArchiveCorruptError(
        f"{asked_by} carries module variable {name} ({nbytes} bytes) of kernel image {image}, which the image does "
        "not define: the metadata does not belong to that image. Save the graph again."
    ).as_kind("mismatch")


def variable_of_other_size(asked_by: PathLike, name: str, nbytes: int, image: str, sizes: str) -> ArchiveCorruptError:
    """``undefined_variable`` for a variable the image defines with another size (``sizes``)."""
    return ArchiveCorruptError(
        f"{asked_by} carries module variable {name} ({nbytes} bytes) of kernel image {image}, which defines it with "
        f"{sizes} bytes: the metadata does not belong to that image. Save the graph again."
    ).as_kind("mismatch")
