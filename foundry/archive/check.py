"""Whole-archive verification for ``foundry verify``: every checksum, every cross-reference.

``check_archive`` never raises for archive content; it returns one ``Problem`` per defect found,
following the checksums down from the manifest: manifest -> graph JSON -> ``.cugraph`` -> record,
and manifest -> images.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from foundry.archive.atomic import sha256_bytes, sha256_file
from foundry.archive.graphfile import read_graph, resolve_archive_dir
from foundry.archive.manifest import GraphEntry, Manifest, read_manifest
from foundry.archive.record_parse import parse_record
from foundry.archive.record_walk import node_counts, topology_key
from foundry.errors import ArchiveError, ArchiveForeignError, ArchiveVersionError

__all__ = ["Problem", "ProblemKind", "check_archive"]

PathLike = str | os.PathLike[str]


class ProblemKind(Enum):
    """What is wrong with a file."""

    MISSING = "missing"
    """A file the archive names does not exist (or cannot be read)."""
    CHECKSUM = "checksum"
    """A file's content does not match the checksum recorded for it."""
    CORRUPT = "corrupt"
    """A file is malformed."""
    MISMATCH = "mismatch"
    """Two files are each well-formed but disagree (files of different saves)."""
    VERSION = "version"
    """A file is in a format version this Foundry does not read."""
    FOREIGN = "foreign"
    """A file is not a Foundry archive file at all."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One defect: the file it is in, its kind, and a message saying what was found."""

    path: str
    kind: ProblemKind
    message: str

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.path}: {self.message}"


def _kind(exc: ArchiveError) -> ProblemKind:
    if isinstance(exc, ArchiveVersionError):
        return ProblemKind.VERSION
    if isinstance(exc, ArchiveForeignError):
        return ProblemKind.FOREIGN
    return ProblemKind.CORRUPT


def check_archive(archive_dir: PathLike) -> list[Problem]:
    """All problems of the archive in ``archive_dir``, in the order found; empty when it is sound.

    Hashes every image and graph file, so it reads the whole archive.
    """
    directory = Path(archive_dir)
    problems: list[Problem] = []
    try:
        manifest = read_manifest(directory)
    except ArchiveError as exc:
        return [Problem(str(directory), _kind(exc), str(exc))]
    except OSError as exc:
        return [Problem(str(directory), ProblemKind.MISSING, f"cannot read the manifest: {exc}")]
    for image in manifest.images:
        _check_image(directory, image.file, image.bytes, image.sha256, problems.append)
    for index, entry in enumerate(manifest.graphs):
        _check_graph(directory, manifest, index, entry, problems.append)
    return problems


def _check_image(directory: Path, file: str, size: int, sha: str, report: Callable[[Problem], None]) -> None:
    path = directory / file
    try:
        actual_size = path.stat().st_size
        actual_sha = sha256_file(path) if actual_size == size else None
    except OSError as exc:
        report(Problem(str(path), ProblemKind.MISSING, f"kernel image {sha} cannot be read: {exc.strerror}"))
        return
    if actual_sha is None:
        report(
            Problem(
                str(path),
                ProblemKind.CHECKSUM,
                f"kernel image is {actual_size} bytes, the manifest says {size}",
            )
        )
    elif actual_sha != sha:
        report(
            Problem(
                str(path),
                ProblemKind.CHECKSUM,
                f"kernel image content SHA-256 is {actual_sha}, the manifest says {sha}",
            )
        )


def _check_graph(
    directory: Path, manifest: Manifest, index: int, entry: GraphEntry, report: Callable[[Problem], None]
) -> None:
    json_path = directory / entry.json
    where = str(json_path)

    def problem(kind: ProblemKind, message: str) -> None:
        report(Problem(where, kind, f"graph {index} ({entry.name}): {message}"))

    try:
        actual = sha256_bytes(json_path.read_bytes())
    except OSError as exc:
        problem(ProblemKind.MISSING, f"cannot read the graph metadata: {exc.strerror}")
        return
    if actual != entry.json_sha256:
        problem(ProblemKind.CHECKSUM, f"SHA-256 is {actual}, the manifest says {entry.json_sha256}")
    try:
        meta, data = read_graph(json_path, verify=True)
        record = parse_record(data)
    except ArchiveError as exc:
        report(Problem(where, _kind(exc), f"graph {index} ({entry.name}): {exc}"))
        return
    except OSError as exc:
        problem(ProblemKind.MISSING, f"cannot read the graph record: {exc}")
        return
    assert meta.record is not None
    if meta.name != entry.name:
        problem(ProblemKind.MISMATCH, f"the metadata names the graph {meta.name!r}")
    if meta.record.sha256 != entry.record_sha256:
        problem(
            ProblemKind.MISMATCH,
            f"record SHA-256 is {meta.record.sha256}, the manifest says {entry.record_sha256}",
        )
    nodes = node_counts(record)["nodes"]
    if nodes != entry.nodes:
        problem(ProblemKind.MISMATCH, f"the record has {nodes} nodes, the manifest says {entry.nodes}")
    topology = topology_key(record)
    if topology != meta.topology or topology != entry.topology:
        problem(
            ProblemKind.MISMATCH,
            f"the record's topology key is {topology}; the metadata says "
            f"{meta.topology}, the manifest {entry.topology}",
        )
    if record.function_count != len(meta.functions):
        problem(
            ProblemKind.MISMATCH,
            f"the record names {record.function_count} functions, the metadata lists {len(meta.functions)}",
        )
    if record.event_count != meta.events:
        problem(
            ProblemKind.MISMATCH,
            f"the record uses {record.event_count} events, the metadata says {meta.events}",
        )
    listed = {e.sha256: e for e in manifest.images}
    for ref in meta.images:
        found = listed.get(ref.sha256)
        if found is None:
            problem(ProblemKind.MISSING, f"uses kernel image {ref.sha256}, which the manifest does not list")
        elif (found.bytes, found.format) != (ref.bytes, ref.format):
            problem(
                ProblemKind.MISMATCH,
                f"image {ref.sha256} is {ref.bytes} bytes of {ref.format.value} "
                f"in the metadata, {found.bytes} bytes of {found.format.value} "
                "in the manifest",
            )
    images_at = resolve_archive_dir(json_path, meta)
    try:
        same = images_at.samefile(directory)
    except OSError:
        same = False
    if not same:
        problem(
            ProblemKind.MISMATCH,
            f"the metadata looks for its images in {images_at}, not in this archive {directory}",
        )
