"""A graph's metadata, the ``<stem>.json`` file of docs/FORMAT.md, as one frozen value."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .identity import Identity
from .jsondocs import check_format
from .jsonfields import (
    U32,
    At,
    field,
    field_int,
    field_relpath,
    field_sha256,
    field_str,
    get_int_items,
    get_list,
    get_obj,
    get_sha256,
    is_sha256,
)
from .jsontext import Parts
from .peers import PeerMapping, RankSpec, peers_from_json
from .values import FunctionRef, ImageRef, MemorySpec, OutputSpec, RecordRef, RegionSpec, RngSpec, TemplateRef

__all__ = [
    "GRAPH_FORMAT",
    "GRAPH_FORMAT_LISTED",
    "GRAPH_FORMAT_VERSION",
    "GRAPH_FORMAT_VERSIONS",
    "GRAPH_FORMAT_VERSION_RANKS",
    "GraphMeta",
    "Parts",
]

T = TypeVar("T")


GRAPH_FORMAT = "foundry-graph"
GRAPH_FORMAT_VERSION = 3
"""3: images carry their module variables (docs/FORMAT.md, "Module variables"); a reader of version 2
would load the images without them, so it must refuse version 3. Written for a graph that states its region's
range itself and carries no peers or rank."""
GRAPH_FORMAT_VERSION_RANKS = 4
"""4: written for a graph with ``peers`` or ``rank`` (docs/FORMAT.md, "peers" and "rank"); a reader of
version 3 would ignore them and replay against memory that is not its peers', so it must refuse version 4."""
GRAPH_FORMAT_LISTED = 5
"""5: as 4 (``peers`` and ``rank`` both there where the graph has either, else neither), but the region's range
(base, size, granularity, small-allocation slots) is not stated: it is the manifest's, which lists the graph in its
own directory (SAVE writes every graph it stores in the graph bundle so). A reader of version 4 would find no
region base, so it must refuse version 5."""
GRAPH_FORMAT_VERSIONS: tuple[int, ...] = (2, GRAPH_FORMAT_VERSION, GRAPH_FORMAT_VERSION_RANKS, GRAPH_FORMAT_LISTED)


@dataclass(frozen=True, slots=True)
class GraphMeta:
    """Everything in a graph's JSON file.

    ``record`` is None until ``write_graph`` fills it in; ``to_json`` needs it. ``images`` lists
    every image that ``functions`` name, in file order. ``stats`` is informative
    (``node_counts`` of the record, as ``(key, value)`` pairs).
    """

    name: str
    foundry_version: str
    archive_dir: str
    functions: tuple[FunctionRef, ...]
    images: tuple[ImageRef, ...]
    events: int
    outputs: tuple[OutputSpec, ...]
    rng: RngSpec | None
    region: RegionSpec
    identity: Identity
    stats: tuple[tuple[str, int], ...]
    topology: str
    record: RecordRef | None = None
    memory: MemorySpec | None = None
    template: TemplateRef | None = None
    peers: tuple[PeerMapping, ...] = ()
    rank: RankSpec | None = None

    def stats_dict(self) -> dict[str, int]:
        return dict(self.stats)

    def problem(self) -> str | None:
        """What makes this metadata inconsistent (a function naming an image not in ``images``, a
        repeated image, a malformed hash), or None."""
        seen: set[str] = set()
        for ref in self.images:
            if not is_sha256(ref.sha256):
                return f"image hash {ref.sha256!r:.80} is not a lower-case hex SHA-256"
            if ref.sha256 in seen:
                return f"image {ref.sha256} is listed twice"
            seen.add(ref.sha256)
        for i, fn in enumerate(self.functions):
            if fn.image not in seen:
                return f"function {i} ({fn.name}) names image {fn.image}, which 'images' does not list"
        if not is_sha256(self.topology):
            return f"topology {self.topology!r:.80} is not a lower-case hex SHA-256"
        return None

    def to_json(self, listed: bool = False) -> dict[str, Any]:
        """The JSON object of the file. Raises ``ValueError`` if ``record`` is None. ``listed``: for a graph the
        manifest in its directory lists (format version 5), whose region's range is the manifest's."""
        if self.record is None:
            raise ValueError(f"graph {self.name!r}: metadata has no record reference yet; use write_graph")
        if any(ref.variables is None for ref in self.images):
            raise ValueError(
                f"graph {self.name!r}: its metadata was read from format version 2, which does not say which "
                f"module variables its images need; it cannot be written as version {GRAPH_FORMAT_VERSION}. Save "
                "the graph again."
            )
        ranked = bool(self.peers) or self.rank is not None
        version = GRAPH_FORMAT_LISTED if listed else GRAPH_FORMAT_VERSION_RANKS if ranked else GRAPH_FORMAT_VERSION
        doc = {
            "format": GRAPH_FORMAT,
            "format_version": version,
            "foundry_version": self.foundry_version,
            "name": self.name,
            "record": self.record.to_json(),
            "archive_dir": self.archive_dir,
            "functions": [f.to_json() for f in self.functions],
            "images": {ref.sha256: ref.to_json() for ref in self.images},
            "events": self.events,
            "outputs": [o.to_json() for o in self.outputs],
            "rng": None if self.rng is None else self.rng.to_json(),
            "region": self.region.to_json(range_too=not listed),
            "identity": self.identity.to_json(),
            "stats": dict(self.stats),
            "topology": self.topology,
            "memory": None if self.memory is None else self.memory.to_json(),
            "template": None if self.template is None else self.template.to_json(),
        }
        if ranked:  # version 4; in version 5 only where there are any (most graphs have neither)
            doc["peers"] = [p.to_json() for p in self.peers]
            doc["rank"] = None if self.rank is None else self.rank.to_json()
        return doc

    @classmethod
    def from_json(
        cls, doc: Any, source: str, parts: Parts | None = None, archive: RegionSpec | None = None
    ) -> GraphMeta:
        """Validate a parsed graph JSON document (``source`` names it in messages).

        ``ArchiveForeignError``: not a ``foundry-graph`` document; ``ArchiveVersionError``: unknown
        ``format_version``; ``ArchiveCorruptError``: any missing key, wrong type or inconsistency.
        Unknown keys are ignored. ``parts``: see ``Parts``. ``archive``: the region of the manifest that lists
        the graph in its own directory, whose range a graph of format version 5 takes (one no such manifest
        lists is refused: nothing else states its range).
        """
        obj = check_format(doc, GRAPH_FORMAT, GRAPH_FORMAT_VERSIONS, source)
        at = At(source)
        listed = obj["format_version"] >= GRAPH_FORMAT_LISTED
        if listed and archive is None:
            at.key("region").fail(
                "format version 5 takes the region's base, size and granularity from the manifest in the graph's "
                "directory, and none there lists the graph"
            )
        region_of = archive if listed else None
        # Kept per range: the same text of a graph's own region means another region under another manifest.
        region_kind = "region" if region_of is None else f"region@{region_of.range_key()}"

        def shared(name: str, raw: Any, where: At, parse: Callable[[Any, At], T]) -> T:
            # Kept only for the very object decoded from the same text (``same``): an equal value spelled
            # otherwise (``4.0`` for ``4``) is parsed afresh, and refused where the format wants an integer.
            if parts is None:
                return parse(raw, where)
            return parts.same(name, raw, lambda v: parse(v, where))

        def parse_images(images_v: Any, images_at: At) -> tuple[ImageRef, ...]:
            return tuple(
                ImageRef.from_json(get_sha256(sha, images_at.key(sha)), v, images_at.key(sha))
                for sha, v in get_obj(images_v, images_at).items()
            )

        funcs_v, funcs_at = field(obj, "functions", at)

        def parse_functions(value: Any) -> tuple[FunctionRef, ...]:
            return tuple([FunctionRef.from_json(v, funcs_at.index(i)) for i, v in enumerate(get_list(value, funcs_at))])

        # A graph's kernels are often the previous graph's, kept as ``shared`` keeps the rest.
        functions = parse_functions(funcs_v) if parts is None else parts.same("functions", funcs_v, parse_functions)
        images_v, images_at = field(obj, "images", at)
        images = shared("images", images_v, images_at, parse_images)
        if obj["format_version"] >= 3:  # from version 3 on, every image states its variables (maybe none)
            for ref in images:
                if ref.variables is None:
                    images_at.key(ref.sha256).key("variables").fail("missing")
        outputs_v, outputs_at = field(obj, "outputs", at)
        outputs = tuple(
            [OutputSpec.from_json(v, outputs_at.index(i)) for i, v in enumerate(get_list(outputs_v, outputs_at))]
        )
        rng_v, rng_at = field(obj, "rng", at)
        stats_v, stats_at = field(obj, "stats", at)
        stats = get_int_items(stats_v, stats_at)
        region = shared(region_kind, *field(obj, "region", at), lambda v, a: RegionSpec.from_json(v, a, region_of))
        ranked = obj["format_version"] == GRAPH_FORMAT_VERSION_RANKS or (listed and ("peers" in obj or "rank" in obj))
        peers = peers_from_json(*field(obj, "peers", at), region.size) if ranked else ()
        rank_v, rank_at = field(obj, "rank", at) if ranked else (None, at)
        meta = cls(
            name=field_str(obj, "name", at),
            foundry_version=field_str(obj, "foundry_version", at),
            archive_dir=field_relpath(obj, "archive_dir", at),
            functions=functions,
            images=images,
            events=field_int(obj, "events", at, U32),
            outputs=outputs,
            rng=None if rng_v is None else RngSpec.from_json(rng_v, rng_at),
            region=region,
            identity=shared("identity", *field(obj, "identity", at), Identity.from_json),
            stats=stats,
            topology=field_sha256(obj, "topology", at),
            record=RecordRef.from_json(*field(obj, "record", at)),
            memory=None if obj.get("memory") is None else MemorySpec.from_json(obj["memory"], at.key("memory")),
            template=None
            if obj.get("template") is None
            else TemplateRef.from_json(obj["template"], at.key("template")),
            peers=peers,
            rank=None if rank_v is None else RankSpec.from_json(rank_v, rank_at),
        )
        problem = meta.problem()
        if problem is not None:
            at.fail(problem)
        return meta
