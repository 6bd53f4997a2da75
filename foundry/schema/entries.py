"""The entries of the archive manifest (docs/FORMAT.md, "Manifest"): its images, its graphs with where each is
stored, the graph bundle it names and the groups of graphs that share a topology, each as a frozen value with
its JSON form. The manifest document itself (archive/manifest.py) holds them, in order, with what binds them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from foundry.images import ImageFormat

from .jsonfields import (
    U32,
    U64,
    At,
    field,
    field_int,
    field_relpath,
    field_sha256,
    field_str,
    get_int,
    get_list,
    get_obj,
    get_sha256,
    get_str,
    is_sha256,
)
from .values import ImageRef, VariableRef

__all__ = [
    "IMAGES_DIR",
    "BundleRef",
    "GraphEntry",
    "GraphRole",
    "GraphStorage",
    "Group",
    "ImageEntry",
    "graph_entry",
    "group_entry",
    "image_entry",
    "image_json",
    "image_relpath",
]

IMAGES_DIR = "images"
"""Where an archive's kernel images are: ``images/<sha256>.bin``, content-addressed."""


def image_relpath(sha256: str) -> str:
    """``images/<sha256>.bin``, the path the manifest records (``ValueError`` for a bad hash)."""
    if not is_sha256(sha256):
        raise ValueError(f"{sha256!r:.80} is not a lower-case hex SHA-256")
    return f"{IMAGES_DIR}/{sha256}.bin"


class GraphStorage(str, Enum):
    """Where a graph's JSON and record are: its own two files (``<stem>.json``, ``<stem>.cugraph``), or the
    archive's graph bundle, the only copy of them (docs/FORMAT.md, "Graph bundle")."""

    FILES = "files"
    BUNDLE = "bundle"


class GraphRole(str, Enum):
    """A graph's place in its group: the template others are updated from, or a member."""

    TEMPLATE = "template"
    MEMBER = "member"


@dataclass(frozen=True, slots=True)
class ImageEntry:
    """An image of the archive; its file is always ``images/<sha256>.bin``. ``kernels``: the names
    of its kernels the archive's graphs launch, sorted (empty in manifests written before it existed),
    so that loading the image can also load those kernels."""

    sha256: str
    bytes: int
    format: ImageFormat
    kernels: tuple[str, ...] = ()
    variables: tuple[VariableRef, ...] | None = None  # as in the graphs' images (docs/FORMAT.md)

    @property
    def file(self) -> str:
        return image_relpath(self.sha256)

    @classmethod
    def from_ref(cls, ref: ImageRef) -> ImageEntry:
        return cls(ref.sha256, ref.bytes, ref.format, variables=ref.variables)


@dataclass(frozen=True, slots=True)
class GraphEntry:
    """A graph of the archive. ``json`` is relative to the archive directory; ``record_sha256`` is
    the graph record's hash (as in its JSON); ``nodes`` counts all nodes, child graphs included."""

    name: str
    json: str
    json_sha256: str
    record_sha256: str
    nodes: int
    topology: str
    group: int
    role: GraphRole
    stored: GraphStorage = GraphStorage.FILES


@dataclass(frozen=True, slots=True)
class BundleRef:
    """The graph bundle a manifest names: its file (always ``graph_bundle.bin``) and its size. No hash of its
    own: every byte of it is a graph's (proven by its manifest entry and its JSON) or laid out from their
    sizes (archive/bundle.py)."""

    file: str
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "bytes": self.bytes}

    @classmethod
    def from_json(cls, value: Any, at: At) -> BundleRef:
        obj = get_obj(value, at)
        return cls(field_relpath(obj, "file", at, bare=True), field_int(obj, "bytes", at))


@dataclass(frozen=True, slots=True)
class Group:
    """Graphs sharing one topology key: the template and the other graphs (``members``, which
    do not repeat the template). Indices are into ``Manifest.graphs``."""

    topology: str
    template: int
    members: tuple[int, ...]
    varying: tuple[int, ...] | None = None  # None: a manifest written before groups recorded it


def image_json(e: ImageEntry) -> dict[str, Any]:
    doc: dict[str, Any] = {"file": e.file, "bytes": e.bytes, "format": e.format.value}
    if e.kernels:
        doc["kernels"] = list(e.kernels)
    if e.variables is not None:
        doc["variables"] = [v.to_json() for v in e.variables]
    return doc


def image_entry(sha: str, value: Any, at: At) -> ImageEntry:
    get_sha256(sha, at)
    obj = get_obj(value, at)
    file, file_at = field(obj, "file", at)
    if get_str(file, file_at) != image_relpath(sha):
        file_at.fail(f"{file!r:.120} must be {image_relpath(sha)!r}")
    ref = ImageRef.from_json(sha, obj, at)
    kernels: tuple[str, ...] = ()
    if "kernels" in obj:
        kernels_at = at.key("kernels")
        kernels = tuple(get_str(v, kernels_at.index(i)) for i, v in enumerate(get_list(obj["kernels"], kernels_at)))
        if any(not k for k in kernels) or len(set(kernels)) != len(kernels):
            kernels_at.fail("kernel names must be non-empty and listed once each")
    return ImageEntry(ref.sha256, ref.bytes, ref.format, kernels, ref.variables)


def graph_entry(value: Any, at: At, version: int) -> GraphEntry:
    obj = get_obj(value, at)
    json_path = field_relpath(obj, "json", at, parents=True)
    role_v, role_at = field(obj, "role", at)
    try:
        role = GraphRole(get_str(role_v, role_at))
    except ValueError:
        role_at.fail(f"{role_v!r:.40} is not 'template' or 'member'")
    stored = GraphStorage.FILES  # version 2: every graph in its files
    if version >= 3:
        stored_v, stored_at = field(obj, "stored", at)
        try:
            stored = GraphStorage(get_str(stored_v, stored_at))
        except ValueError:
            stored_at.fail(f"{stored_v!r:.40} is not 'files' or 'bundle'")
    return GraphEntry(
        name=field_str(obj, "name", at),
        json=json_path,
        json_sha256=field_sha256(obj, "json_sha256", at),
        record_sha256=field_sha256(obj, "record_sha256", at),
        nodes=field_int(obj, "nodes", at, U64),
        topology=field_sha256(obj, "topology", at),
        group=field_int(obj, "group", at, U32),
        role=role,
        stored=stored,
    )


def group_entry(value: Any, at: At) -> Group:
    obj = get_obj(value, at)
    members_v, members_at = field(obj, "members", at)
    members = tuple(get_int(v, members_at.index(i), U32) for i, v in enumerate(get_list(members_v, members_at)))
    varying = None
    if "varying" in obj:
        varying_at = at.key("varying")
        varying = tuple(
            get_int(v, varying_at.index(i), U32) for i, v in enumerate(get_list(obj["varying"], varying_at))
        )
    return Group(field_sha256(obj, "topology", at), field_int(obj, "template", at, U32), members, varying)
