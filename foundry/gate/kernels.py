"""The ``kernels`` check of ``foundry verify``: every kernel a graph launches is in a stored image.

A graph's function table names, for each kernel, the image (by SHA-256) that holds it; its ``images``
list gives each image's size and format. They must agree with each other and with the manifest (and
its per-image kernel lists, which must name only kernels their image defines), each
image's bytes must be of the format recorded for it, and the kernel must be defined in it (checked
where the image's structure can be read: ELF symbol tables, PTX ``.entry`` lines, uncompressed fatbin
entries).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from foundry.images import ImageFormat
from foundry.schema import ImageEntry

from .findings import Findings, GraphUnderCheck, ImageInfo
from .report import Check, ProblemKind
from .symbols import missing_kernel

__all__ = ["check_functions", "check_image_formats", "check_manifest_kernels"]


def check_image_formats(images: Mapping[str, ImageInfo], declared: Mapping[str, ImageFormat], found: Findings) -> None:
    """Each sound image's format, read from its bytes, against the one recorded for it."""
    partly_read = []
    for sha, info in images.items():
        fmt = declared.get(sha)
        if not info.sound or fmt is None:
            continue
        if info.detected != fmt:
            what = info.detected.value if info.detected is not None else "in no format the CUDA driver loads"
            found.add(
                Check.KERNELS,
                ProblemKind.MISMATCH,
                info.path,
                f"kernel image {sha} is recorded as {fmt.value}, but its bytes are {what}; the driver would "
                "reject it or misread it",
            )
        elif info.names is not None and not info.names_complete:
            partly_read.append(sha[:12])
    if partly_read:
        found.note(
            f"{len(partly_read)} kernel image(s) could be read only in part (compressed fatbin entries, or ELF "
            f"without a symbol table): kernels not found in the readable parts were not reported "
            f"({', '.join(partly_read)})"
        )


def check_functions(
    graph: GraphUnderCheck,
    images: Mapping[str, ImageInfo],
    listed: Mapping[str, ImageEntry] | None,
    found: Findings,
) -> None:
    """The graph's function table against its images list, the manifest's images (``listed``, None
    for a graph checked on its own) and the kernel names the stored images define."""
    meta, where = graph.meta, graph.json_path

    def problem(kind: ProblemKind, message: str) -> None:
        found.add(Check.KERNELS, kind, where, f"{graph.label}: {message}")

    used = {f.image for f in meta.functions}
    for ref in meta.images:
        if ref.sha256 not in used:
            problem(
                ProblemKind.MISMATCH, f"its images list {ref.sha256}, but no function of its function table is in it"
            )
    if listed is not None:
        for ref in meta.images:
            entry = listed.get(ref.sha256)
            if entry is None:
                problem(ProblemKind.MISSING, f"uses kernel image {ref.sha256}, which the manifest does not list")
            elif (entry.bytes, entry.format) != (ref.bytes, ref.format):
                problem(
                    ProblemKind.MISMATCH,
                    f"image {ref.sha256} is {ref.bytes} bytes of {ref.format.value} in the metadata, "
                    f"{entry.bytes} bytes of {entry.format.value} in the manifest",
                )
        for index, fn in enumerate(meta.functions):
            entry = listed.get(fn.image)
            if entry is not None and entry.kernels and fn.name not in entry.kernels:
                problem(
                    ProblemKind.MISMATCH,
                    f"function {index} ({fn.name}) is in image {fn.image}, but the manifest's kernel list for that "
                    "image does not name it: load_cuda_modules_and_libraries would not load it ahead. Write the "
                    "manifest again (save_graph_manifest)",
                )
    for index, fn in enumerate(meta.functions):
        info = images.get(fn.image)
        if info is None or not info.sound or info.names is None:
            continue
        if fn.name not in info.names and info.names_complete:
            problem(
                ProblemKind.MISSING,
                f"function {index} ({fn.name}) is not defined in its image {fn.image} ({len(info.names)} symbols); "
                "LOAD would not find the kernel",
            )


def check_manifest_kernels(
    manifest_path: Path, listed: Mapping[str, ImageEntry], images: Mapping[str, ImageInfo], found: Findings
) -> None:
    """Each kernel the manifest lists for an image is defined in that image (where its names can be
    read), as load_cuda_modules_and_libraries finds each one in the driver (``missing_kernel``)."""
    for sha, entry in listed.items():
        info = images.get(sha)
        if info is None or not info.sound or info.names is None or not info.names_complete:
            continue
        for name in entry.kernels:
            if name not in info.names:
                found.refuse(Check.KERNELS, manifest_path, missing_kernel(manifest_path, name, sha))
