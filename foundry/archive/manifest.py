"""The archive manifest, ``<archive>/graph_manifest.json`` (docs/FORMAT.md, "Manifest").

The manifest is written last by SAVE and lists every image and graph of the archive with their
checksums, where each graph's bytes are stored (its own files, or the archive's graph bundle: the one copy
of the graphs saved in the archive directory), the groups of graphs that share a topology, and the documents
the archive carries (storage/documents.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from foundry.errors import ArchiveCorruptError
from foundry.schema import (
    BundleRef,
    GraphEntry,
    GraphRole,
    GraphStorage,
    Group,
    Identity,
    ImageEntry,
    RecordRef,
    RegionSpec,
    graph_entry,
    group_entry,
    image_entry,
    image_json,
)
from foundry.schema.jsondocs import check_format, load_sealed, seal
from foundry.schema.jsonfields import (
    At,
    field,
    field_relpath,
    field_str,
    get_list,
    get_obj,
    get_str,
    relative_path_problem,
)
from foundry.storage import REGION_HINT, PathLike, inside, listed_document, read_region_hint, read_regular, write_atomic

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_FORMAT_VERSION",
    "MANIFEST_FORMAT_VERSIONS",
    "MANIFEST_NAME",
    "Manifest",
    "archive_region",
    "listed_documents",
    "manifest_document",
    "now_iso",
    "parse_manifest_doc",
    "read_manifest",
    "read_manifest_doc",
    "write_manifest",
]

MANIFEST_NAME = "graph_manifest.json"
MANIFEST_FORMAT = "foundry-archive"
MANIFEST_FORMAT_VERSION = 3
"""3: a graph is stored once, in its files or in the graph bundle (``stored``); a version-2 reader would look
for the files of a bundled graph and find none, so it must refuse version 3. Version 2 is read as it was
written: every graph in its files (a version-2 archive's bundle, a second copy, is not read)."""
MANIFEST_FORMAT_VERSIONS: tuple[int, ...] = (2, MANIFEST_FORMAT_VERSION)


def now_iso() -> str:
    """The current UTC time in ISO-8601, as ``created`` is written."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True, slots=True)
class Manifest:
    """The whole manifest. ``signature`` is kept verbatim (see docs/TRUST.md); None when absent."""

    foundry_version: str
    created: str
    identity: Identity
    region: RegionSpec
    images: tuple[ImageEntry, ...]
    graphs: tuple[GraphEntry, ...]
    groups: tuple[Group, ...]
    signature: Any = None
    # The graph bundle (archive/bundle.py), the one copy of the graphs stored in it (``GraphEntry.stored``);
    # None where every graph is stored in its files.
    bundle: BundleRef | None = None
    # Documents the archive carries for the program that reads it (storage/documents.py), each file once.
    documents: tuple[RecordRef, ...] = ()
    format_version: int = MANIFEST_FORMAT_VERSION  # as read; written as MANIFEST_FORMAT_VERSION
    # A version-2 manifest's ``bundle``: the file of a second copy of its graph files, which is not read.
    stale_bundle: str | None = None

    def bundled(self) -> tuple[int, ...]:
        """The graphs stored in the bundle (indices into ``graphs``), in the order of its table."""
        return tuple(i for i, e in enumerate(self.graphs) if e.stored == GraphStorage.BUNDLE)

    def problem(self) -> str | None:
        """The first cross-reference inconsistency (repeated image, group index out of range, role
        or topology not matching the group, a bundle named for no graph or missing for one), or None."""
        shas = [e.sha256 for e in self.images]
        if len(set(shas)) != len(shas):
            return "an image is listed twice"
        in_bundle = [e for e in self.graphs if e.stored == GraphStorage.BUNDLE]
        if in_bundle and self.bundle is None:
            return f"graph {in_bundle[0].json!r} is stored in the graph bundle, but the manifest names none"
        if self.bundle is not None and not in_bundle:
            return "the manifest names a graph bundle, but stores no graph in it"
        for e in in_bundle:  # named in the archive directory, where readers look its name up
            if "/" in e.json or relative_path_problem(e.json, bare=True):
                return f"graph {e.json!r:.120} is stored in the graph bundle, but is not named as a file of the archive"
        names = [e.json for e in self.graphs]
        if len(set(names)) != len(names):
            return "a graph is listed twice"
        n = len(self.graphs)
        for gi, g in enumerate(self.groups):
            listed = (g.template, *g.members)
            if len(set(listed)) != len(listed):
                return f"group {gi} lists a graph twice"
            for i in listed:
                if i >= n:
                    return f"group {gi} names graph {i}; there are {n} graphs"
                if self.graphs[i].group != gi:
                    return f"group {gi} lists graph {i}, whose group is {self.graphs[i].group}"
                if self.graphs[i].topology != g.topology:
                    return f"graph {i} has topology {self.graphs[i].topology}, its group {gi} has {g.topology}"
        problem = _documents_problem(self)
        if problem:
            return problem
        members = [frozenset(g.members) for g in self.groups]  # a group holds up to every graph: no linear search
        for i, e in enumerate(self.graphs):
            if e.group >= len(self.groups):
                return f"graph {i} names group {e.group}; there are {len(self.groups)} groups"
            is_template = self.groups[e.group].template == i
            if (e.role == GraphRole.TEMPLATE) != is_template or (not is_template and i not in members[e.group]):
                return f"graph {i} has role {e.role.value!r} but group {e.group} does not list it so"
        return None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "format": MANIFEST_FORMAT,
            "format_version": MANIFEST_FORMAT_VERSION,
            "foundry_version": self.foundry_version,
            "created": self.created,
            "identity": self.identity.to_json(),
            "region": self.region.to_json(),
            "images": {e.sha256: image_json(e) for e in self.images},
            "graphs": [
                {
                    "name": e.name,
                    "json": e.json,
                    "json_sha256": e.json_sha256,
                    "record_sha256": e.record_sha256,
                    "nodes": e.nodes,
                    "topology": e.topology,
                    "group": e.group,
                    "role": e.role.value,
                    "stored": e.stored.value,
                }
                for e in self.graphs
            ],
            "groups": [
                {
                    "topology": g.topology,
                    "template": g.template,
                    "members": list(g.members),
                    **({"varying": list(g.varying)} if g.varying is not None else {}),
                }
                for g in self.groups
            ],
        }
        if self.bundle is not None:
            doc["bundle"] = self.bundle.to_json()
        if self.documents:
            doc["documents"] = [d.to_json() for d in self.documents]
        if self.signature is not None:
            doc["signature"] = self.signature
        return doc

    @classmethod
    def from_json(cls, doc: Any, source: str) -> Manifest:
        """Validate a parsed manifest (errors as for ``GraphMeta.from_json``)."""
        obj = check_format(doc, MANIFEST_FORMAT, MANIFEST_FORMAT_VERSIONS, source)
        at = At(source)
        version = obj["format_version"]
        images_v, images_at = field(obj, "images", at)
        images = tuple(image_entry(sha, v, images_at.key(sha)) for sha, v in get_obj(images_v, images_at).items())
        graphs_v, graphs_at = field(obj, "graphs", at)
        graphs = tuple(graph_entry(v, graphs_at.index(i), version) for i, v in enumerate(get_list(graphs_v, graphs_at)))
        bundle: BundleRef | None = None
        stale: str | None = None
        if "bundle" in obj and version >= 3:
            bundle = BundleRef.from_json(obj["bundle"], at.key("bundle"))
        elif "bundle" in obj:  # version 2: a copy of files that are there too; named, so it is not foreign
            stale = field_relpath(get_obj(obj["bundle"], at.key("bundle")), "file", at.key("bundle"), bare=True)
        groups_v, groups_at = field(obj, "groups", at)
        groups = tuple(group_entry(v, groups_at.index(i)) for i, v in enumerate(get_list(groups_v, groups_at)))
        manifest = cls(
            foundry_version=field_str(obj, "foundry_version", at),
            created=_created(*field(obj, "created", at)),
            identity=Identity.from_json(*field(obj, "identity", at)),
            region=RegionSpec.from_json(*field(obj, "region", at)),
            images=images,
            graphs=graphs,
            groups=groups,
            signature=obj.get("signature"),
            bundle=bundle,
            documents=_documents(obj, at),
            format_version=version,
            stale_bundle=stale,
        )
        problem = manifest.problem()
        if problem is not None:
            at.fail(problem)
        return manifest


def _documents(obj: dict[str, Any], at: At) -> tuple[RecordRef, ...]:
    """``documents``, optional: absent in manifests written before it existed, and when SAVE listed none."""
    if "documents" not in obj:
        return ()
    docs_at = at.key("documents")
    return tuple(listed_document(v, docs_at.index(i)) for i, v in enumerate(get_list(obj["documents"], docs_at)))


def listed_documents(doc: dict[str, Any], source: str) -> tuple[RecordRef, ...]:
    """The documents the manifest document ``doc`` (``parse_manifest_doc``'s: sealed, of a known version; the
    manifest ``source``) lists, each once, without reading the rest of it: an engine reads its metadata at
    start-up, before it has anything else to do with the manifest, and an engine's manifest lists thousands of
    graphs (``Manifest.from_json`` checks the rest). Errors as ``read_manifest``."""
    at = At(source)
    documents = _documents(doc, at)
    if len({d.file for d in documents}) != len(documents):
        at.fail("a document is listed twice")
    return documents


def _documents_problem(manifest: Manifest) -> str | None:
    files = [d.file for d in manifest.documents]
    if len(set(files)) != len(files):
        return "a document is listed twice"
    graphs = {g.json for g in manifest.graphs}
    clash = next((f for f in files if f in graphs), None)
    return None if clash is None else f"document {clash!r} is listed as a graph too"


# ``now_iso``'s form exactly, digits ASCII: ``datetime.fromisoformat`` alone takes more forms from Python 3.11 on
# (``Z``, basic format, fractions), so which manifests passed would depend on the Python that read them.
_CREATED = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[+-][0-9]{2}:[0-9]{2}")


def _created(value: Any, at: At) -> str:
    """``created`` as ``now_iso`` writes it: an ISO-8601 date and time to the second with its UTC offset
    (``2025-01-31T12:00:00+00:00``), and a real one (no 13th month)."""
    text = get_str(value, at)
    try:
        sound = _CREATED.fullmatch(text) is not None and datetime.fromisoformat(text).tzinfo is not None
    except ValueError:
        sound = False
    if not sound:
        at.fail(
            f"{text!r:.60} is not an ISO-8601 date and time to the second with a UTC offset (2025-01-31T12:00:00+00:00)"
        )
    return text


def write_manifest(archive_dir: PathLike, manifest: Manifest) -> None:
    """Write ``graph_manifest.json`` atomically, creating ``archive_dir`` if needed. An inconsistent
    manifest (see ``Manifest.problem``) raises ``ValueError`` and nothing is written."""
    problem = manifest.problem()
    if problem is not None:
        raise ValueError(f"manifest not written: {problem}")
    directory = Path(archive_dir)
    directory.mkdir(parents=True, exist_ok=True)
    write_atomic(directory / MANIFEST_NAME, seal(manifest.to_json()))


def read_manifest(archive_dir: PathLike) -> Manifest:
    """Read and validate ``graph_manifest.json``. A missing manifest or bad content raises
    ``ArchiveCorruptError``; another kind of file ``ArchiveForeignError``; an unknown
    ``format_version`` ``ArchiveVersionError``."""
    return read_manifest_doc(archive_dir)[0]


def parse_manifest_doc(data: bytes | bytearray, source: str) -> dict[str, Any]:
    """The manifest document held by ``data`` (a manifest file's bytes; ``source`` names it in errors),
    its seal and format checked: what a signature covers. Errors as ``read_manifest``."""
    return check_format(load_sealed(data, source, MANIFEST_FORMAT), MANIFEST_FORMAT, MANIFEST_FORMAT_VERSIONS, source)


def read_manifest_doc(archive_dir: PathLike) -> tuple[Manifest, dict[str, Any]]:
    """``read_manifest`` and the JSON document it was parsed from (what a signature covers), from
    one read of the file. Errors as ``read_manifest``."""
    doc = manifest_document(archive_dir)
    return Manifest.from_json(doc, str(Path(archive_dir) / MANIFEST_NAME)), doc


def manifest_document(archive_dir: PathLike) -> dict[str, Any]:
    """The manifest document of ``archive_dir`` (``parse_manifest_doc``: sealed, of a known version), the rest
    of it not yet validated: what a signature covers, proven before anything else is taken from it. Errors as
    ``read_manifest``."""
    path = Path(archive_dir) / MANIFEST_NAME
    if not path.exists() and not path.is_symlink():
        raise ArchiveCorruptError(
            f"{archive_dir}: no {MANIFEST_NAME}: not a Foundry archive, or SAVE did not finish"
        ).as_kind("missing")
    data = read_regular(inside(archive_dir, MANIFEST_NAME, "manifest"), "manifest")
    return parse_manifest_doc(data, str(path))


def archive_region(archive_dir: PathLike, manifest: Manifest | None) -> tuple[int, int] | None:
    """The region ``(base, size)`` LOAD reserves for the archive before it loads its images: the
    manifest's where there is one, else ``region.json``'s (None: neither). A ``region.json`` that is
    there must be sound and, beside a manifest, name the manifest's region (both come from one save);
    ``ArchiveCorruptError`` otherwise. LOAD, ``foundry verify`` and ``foundry.load.preflight`` all apply
    this one rule."""
    hint = read_region_hint(archive_dir)
    if manifest is None:
        return hint
    region = (manifest.region.base, manifest.region.size)
    if hint is not None and hint != region:
        raise ArchiveCorruptError(
            f"{Path(archive_dir) / REGION_HINT}: the region hint says base {hint[0]:#x} size {hint[1]}, the manifest "
            f"base {region[0]:#x} size {region[1]}: the two come from different saves. Save the archive again."
        )
    return region
