"""The ``variables`` check of ``foundry verify``: the module variables an archive carries are its images'.

A graph's image entry lists the module variables LOAD writes into the image after loading it, and so does
the manifest's, which LOAD's start-up writes (docs/FORMAT.md, "Module variables"). Each must be a variable the
stored image defines (read from its bytes: ELF symbols, PTX definitions, every fatbin entry; LOAD asks the driver,
with the same refusal: ``undefined_variable``, ``variable_of_other_size``), of a size the image gives it, and every
graph checked must need the same ones (a process holds one copy of each image: LOAD refuses graphs that
disagree). A listing of format version 2 (None) says nothing and is compared with nothing. That the
bytes are stored whole, and that a graph lists what its manifest lists, are the ``files`` check's
(``check_variable_files``, and ``manifest_disagreement`` as LOAD applies it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from foundry.schema import ImageEntry, VariableRef

from .findings import Findings, GraphUnderCheck, ImageInfo
from .report import Check, ProblemKind
from .symbols import undefined_variable, variable_of_other_size

__all__ = ["check_variables"]


def check_variables(
    graphs: Sequence[GraphUnderCheck],
    images: Mapping[str, ImageInfo],
    found: Findings,
    manifest: tuple[Path, Sequence[ImageEntry]] | None = None,
) -> None:
    """Each carried variable against its image (the graphs', and in archive mode the ``manifest``'s listing, which
    LOAD's start-up writes: its path and images), and the graphs' listings against each other."""
    first: dict[str, tuple[GraphUnderCheck, tuple[VariableRef, ...]]] = {}
    unread: set[str] = set()
    for graph in graphs:
        for ref in graph.meta.images:
            if ref.variables is None:
                continue  # format version 2: says nothing of the image's variables
            earlier = first.setdefault(ref.sha256, (graph, ref.variables))
            if earlier[1] != ref.variables:
                found.add(
                    Check.VARIABLES,
                    ProblemKind.MISMATCH,
                    graph.json_path,
                    f"{graph.label}: needs other module variables of image {ref.sha256} than {earlier[0].label}: LOAD "
                    "holds one copy of each image and refuses the second. Save the graphs again, with the variables "
                    "written before the first capture",
                )
            _against_image(graph.json_path, ref.sha256, ref.variables, images, found, unread)
    if manifest is not None:
        for entry in manifest[1]:
            if entry.variables is not None:
                _against_image(manifest[0], entry.sha256, entry.variables, images, found, unread)
    if unread:
        found.note(
            f"{len(unread)} kernel image(s) could be read only in part, so carried variables not found in the "
            f"readable parts were not reported ({', '.join(sorted(unread))})"
        )


def _against_image(
    asked_by: Path,
    sha: str,
    variables: Sequence[VariableRef],
    images: Mapping[str, ImageInfo],
    found: Findings,
    unread: set[str],
) -> None:
    info = images.get(sha)
    if info is None or not info.sound or info.variables is None:
        return
    declared = info.variables.variables
    for v in variables:
        decl = declared.get(v.name)
        if decl is None:
            if info.variables.complete:
                found.refuse(Check.VARIABLES, asked_by, undefined_variable(asked_by, v.name, v.bytes, sha))
            else:
                unread.add(sha[:12])
        elif decl.sizes and v.bytes not in decl.sizes:
            sizes = " or ".join(str(n) for n in sorted(decl.sizes))
            found.refuse(Check.VARIABLES, asked_by, variable_of_other_size(asked_by, v.name, v.bytes, sha, sizes))
