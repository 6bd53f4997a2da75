"""A plugin's metadata, ``<engine>_plugin.json`` (vLLM: ``vllm_plugin.json``), a document of Foundry's archive.

It holds what LOAD needs from SAVE that Foundry's archive does not: what the archive was made for (the
fingerprint LOAD compares before it serves), the region cursor at each start-up phase boundary with the
allocations made in the phase (so LOAD can check that it placed its persistent tensors where SAVE did; the
region itself, base, size and high-water mark, is the manifest's, read with it: ``foundry.read_archive_region``),
which graph file serves which batch, and the engine's own values (an engine's subclass of ArchiveMetadata
adds them as fields: vLLM's runner and KV-cache size, so that LOAD skips memory profiling).

It is part of the archive like every other file (docs/FORMAT.md, "Documents"): SAVE writes it sealed, through
Foundry's public API, before the manifest, and the manifest lists it with its size and SHA-256; LOAD reads it
only as the manifest lists it (``foundry.read_archive_document``: hash, seal, and with a signing key the
signature), so a damaged, edited or unlisted file is refused by name before the GPU is touched, and
``foundry verify`` checks it. Its values are then checked as SAVE writes them (``ArchiveMetadata.check``)
before anything uses them: the archive is data, and nothing in it chooses what code runs.

Pure data and JSON: no engine, no torch.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import foundry

from .backend import FoundryApi, PublicFoundryApi
from .engine import Engine
from .errors import ArchiveMetadataError, ArchiveMismatchError
from .outputs import shape_problem

__all__ = [
    "SCHEMA",
    "SCHEMAS",
    "ArchiveMetadata",
    "Fingerprint",
    "GraphEntry",
    "MetadataFile",
    "PhaseMark",
]

SCHEMA = 4  # the document's format_version: 4 keeps no region (the manifest's is the archive's one); 3 kept a copy
SCHEMAS = (3, SCHEMA)  # those read: 3, sealed and listed in the manifest (2 was neither), with its region's copy

Scalar = int | float | str | bool | None  # what a batch key holds (isinstance takes this union too)


@dataclass(frozen=True)
class Fingerprint:
    """Named values that must be equal between SAVE and LOAD, in a stable order."""

    items: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, values: Mapping[str, object]) -> Fingerprint:
        return cls(tuple((k, str(v)) for k, v in values.items()))

    def as_dict(self) -> dict[str, str]:
        return dict(self.items)

    def differences(self, here: Fingerprint) -> list[tuple[str, str | None, str | None]]:
        """(name, saved value, value here) of every field that differs, absent ones as None."""
        saved, now = self.as_dict(), here.as_dict()
        names = list(saved) + [n for n in now if n not in saved]
        return [(n, saved.get(n), now.get(n)) for n in names if saved.get(n) != now.get(n)]


@dataclass(frozen=True)
class PhaseMark:
    """The region cursor when a start-up phase ended, and (offset, size) of each device allocation made in
    the phase, in order."""

    name: str
    cursor: int
    allocations: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class GraphEntry:
    """One saved graph: its Foundry JSON (relative to the archive), the engine's batch key it serves (vLLM's
    also says the graph's kind, "full" or "piece", and for a piece which one), where its first output lies,
    and the shape of its outputs (outputs.py)."""

    json: str
    key: tuple[tuple[str, Scalar], ...]
    output_address: int
    outputs: Any = "tensor"

    def key_dict(self) -> dict[str, Scalar]:
        return dict(self.key)


@dataclass(frozen=True)
class ArchiveMetadata:
    """What every engine's metadata holds. An engine adds its own values as keyword-only fields of a
    subclass, and writes and reads them in ``engine_json`` and ``engine_fields``."""

    fingerprint: Fingerprint
    # The archive's region, as its manifest states it (not written here: FORMAT.md keeps every fact once).
    region_base: int
    region_size: int
    high_water: int  # the region's high-water mark after the last graph was saved
    phases: tuple[PhaseMark, ...]
    graphs: tuple[GraphEntry, ...]
    timings: tuple[tuple[str, float], ...] = field(default=())
    schema: int = SCHEMA

    def check(self, source: str) -> None:
        """Refuses, naming ``source``, values SAVE never writes, before anything uses them: each graph is a
        ``.json`` file of the archive directory itself, named once. An engine's subclass adds its own checks
        (calling this one)."""
        seen: set[str] = set()
        for g in self.graphs:
            problem: str | None
            if not _graph_file(g.json) or g.json in seen:
                problem = "is not a graph file SAVE names (a .json file of the archive directory, named once)"
            elif any(not isinstance(v, Scalar) for _, v in g.key):
                problem = f"has a batch key {g.key_dict()!r:.120} holding more than numbers, strings and nulls"
            else:
                problem = shape_problem(g.outputs)
                problem = None if problem is None else f"has an output shape that {problem}"
            if problem:
                raise ArchiveMetadataError(
                    f"{source}: graph {g.json!r:.120} {problem}: the metadata was edited or damaged. Run SAVE again."
                )
            seen.add(g.json)

    def phase(self, name: str) -> PhaseMark:
        for mark in self.phases:
            if mark.name == name:
                return mark
        raise ArchiveMetadataError(
            f"the archive's metadata has no start-up phase {name!r} (it has {[p.name for p in self.phases]}); "
            "SAVE did not finish. Run SAVE again."
        )

    def engine_json(self) -> dict[str, Any]:
        """The engine's values, as top-level members of the JSON document."""
        return {}

    @classmethod
    def engine_fields(cls, doc: Mapping[str, Any]) -> dict[str, Any]:
        """The engine's fields, read back from the document ``engine_json`` wrote into."""
        del doc
        return {}

    def to_json(self) -> dict[str, Any]:
        common = {
            "format_version": self.schema,
            "fingerprint": self.fingerprint.as_dict(),
            "phases": [
                {"name": p.name, "cursor": p.cursor, "allocations": [list(a) for a in p.allocations]}
                for p in self.phases
            ],
            "graphs": [
                {"json": g.json, "key": dict(g.key), "output_address": g.output_address, "outputs": g.outputs}
                for g in self.graphs
            ],
            "timings": dict(self.timings),
        }
        own = self.engine_json()
        clash = sorted(set(own) & set(common))
        if clash:
            raise ValueError(f"{type(self).__name__}.engine_json writes {clash}, which every engine's metadata uses")
        return {**common, **own}

    @classmethod
    def from_json(cls: type[M], doc: Any, region: tuple[int, int, int]) -> M:
        """The metadata of ``doc``, with the archive's ``region`` (base, size, high-water mark: its manifest's).
        A version-3 document's own copy of it must name the same range, and its high-water mark stands, as it
        was read when it was written."""
        if not isinstance(doc, dict):
            raise ValueError("the document is not a JSON object")
        if doc.get("format_version") not in SCHEMAS:
            raise ValueError(f"format_version {doc.get('format_version')!r:.40}, this Foundry reads {list(SCHEMAS)}")
        base, size, high_water = region
        if doc["format_version"] == 3:
            copy = doc["region"]
            if (int(copy["base"]), int(copy["size"])) != (base, size):
                raise ValueError(
                    f"its region (base {int(copy['base']):#x} size {int(copy['size'])}) is not the manifest's (base "
                    f"{base:#x} size {size}): the two come from different saves"
                )
            high_water = int(copy["high_water"])
        return cls(
            fingerprint=Fingerprint(tuple((str(k), str(v)) for k, v in doc["fingerprint"].items())),
            region_base=base,
            region_size=size,
            high_water=high_water,
            phases=tuple(
                PhaseMark(str(p["name"]), int(p["cursor"]), tuple((int(o), int(s)) for o, s in p["allocations"]))
                for p in doc["phases"]
            ),
            graphs=tuple(
                GraphEntry(
                    str(g["json"]),
                    tuple((str(k), v) for k, v in g["key"].items()),
                    int(g["output_address"]),
                    g["outputs"],
                )
                for g in doc["graphs"]
            ),
            timings=tuple((str(k), float(v)) for k, v in doc.get("timings", {}).items()),
            **cls.engine_fields(doc),
        )


def _graph_file(name: str) -> bool:
    """Whether ``name`` is a ``.json`` file name with no directory part (LOAD opens ``archive / name``)."""
    return name.endswith(".json") and "/" not in name and "\0" not in name


M = TypeVar("M", bound=ArchiveMetadata)


@dataclass(frozen=True)
class MetadataFile(Generic[M]):
    """One engine's metadata file: its name, the class its document reads into, and the messages that
    name the engine and its variables."""

    engine: Engine
    kind: type[M]

    @property
    def name(self) -> str:
        return self.engine.metadata_name

    @property
    def format(self) -> str:
        """The document's ``format``: which engine's metadata it is."""
        return f"foundry-{self.engine.key}-plugin"

    def write(self, archive: Path, meta: M, api: FoundryApi | None = None) -> Path:
        """Writes ``archive/<engine>_plugin.json`` as a sealed archive document (atomically), for the manifest,
        written next, to list (``FoundryApi.save_manifest(archive, documents=[name])``)."""
        path = archive / self.name
        (api or PublicFoundryApi()).write_document(archive, self.name, {"format": self.format, **meta.to_json()})
        return path

    def read(self, archive: Path, api: FoundryApi | None = None) -> M:
        """The metadata, read as the archive's manifest lists it, and checked (``ArchiveMetadata.check``)."""
        path = archive / self.name
        engine = self.engine
        again = f"run SAVE again ({engine.var('MODE')}=save, a fresh {engine.var('ARCHIVE')})"
        if not os.path.lexists(path):
            raise ArchiveMetadataError(
                f"{path} does not exist: {archive} holds no finished {engine.name} SAVE. Run {engine.name} once with "
                f"{engine.var('MODE')}=save and this {engine.var('ARCHIVE')}."
            )
        try:
            doc = (api or PublicFoundryApi()).read_document(archive, self.name)
        except foundry.ArchiveSignatureError:
            raise  # says which key and what to do with it
        except foundry.ArchiveError as exc:
            raise ArchiveMetadataError(f"the {engine.name} metadata cannot be used ({exc}); {again}") from None
        if doc.get("format") != self.format:
            raise ArchiveMetadataError(
                f"{path} is not {engine.name}'s metadata (format {doc.get('format')!r:.60}, expected {self.format!r}): "
                f"{again}"
            )
        try:
            meta = self.kind.from_json(doc, (api or PublicFoundryApi()).archive_region(archive))
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
            raise ArchiveMetadataError(
                f"{path} is not a {engine.name} adapter metadata file this Foundry reads ({exc}); run SAVE again with "
                "this Foundry"
            ) from None
        meta.check(str(path))
        return meta

    def check_fingerprint(self, saved: Fingerprint, here: Fingerprint, archive: Path) -> None:
        """Refuses an archive made for another model, configuration, software version or GPU."""
        diffs = saved.differences(here)
        if diffs:
            raise ArchiveMismatchError(_mismatch_message(diffs, archive, self.engine))


def _mismatch_message(diffs: Iterable[tuple[str, str | None, str | None]], archive: Path, engine: Engine) -> str:
    lines = "\n  ".join(f"{name}: saved {saved!r}, here {now!r}" for name, saved, now in diffs)
    return (
        f"the archive {archive} was saved for another setup:\n  {lines}\n"
        f"Its graphs would read memory laid out for that setup. Start {engine.name} with the settings it was saved "
        f"with (the saved values above), or run SAVE again for these settings ({engine.var('MODE')}=save, a fresh "
        f"{engine.var('ARCHIVE')})."
    )
