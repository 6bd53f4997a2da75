"""A plugin's metadata file, ``<engine>_plugin.json`` (vLLM: ``vllm_plugin.json``), beside Foundry's own
archive files.

It holds what LOAD needs from SAVE that Foundry's archive does not: what the archive was made for (the
fingerprint LOAD compares before it serves), the region cursor at each start-up phase boundary with the
allocations made in the phase (so LOAD can check that it placed its persistent tensors where SAVE did),
which graph file serves which batch, and the engine's own values (an engine's subclass of ArchiveMetadata
adds them as fields: vLLM's runner and KV-cache size, so that LOAD skips memory profiling).

Pure data and JSON: no engine, no torch. The file is written last, so an archive whose SAVE failed has
no metadata and LOAD refuses it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from .engine import Engine
from .errors import ArchiveMetadataError, ArchiveMismatchError

__all__ = [
    "SCHEMA",
    "ArchiveMetadata",
    "Fingerprint",
    "GraphEntry",
    "MetadataFile",
    "PhaseMark",
]

SCHEMA = 2

Scalar = int | float | str | bool | None


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
    region_base: int
    region_size: int
    high_water: int  # the region's high-water mark after the last graph was saved
    phases: tuple[PhaseMark, ...]
    graphs: tuple[GraphEntry, ...]
    timings: tuple[tuple[str, float], ...] = field(default=())
    schema: int = SCHEMA

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
            "schema": self.schema,
            "fingerprint": self.fingerprint.as_dict(),
            "region": {"base": self.region_base, "size": self.region_size, "high_water": self.high_water},
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
    def from_json(cls: type[M], doc: Any) -> M:
        if not isinstance(doc, dict):
            raise ValueError("the document is not a JSON object")
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"schema {doc.get('schema')!r}, this Foundry reads schema {SCHEMA}")
        region = doc["region"]
        return cls(
            fingerprint=Fingerprint(tuple((str(k), str(v)) for k, v in doc["fingerprint"].items())),
            region_base=int(region["base"]),
            region_size=int(region["size"]),
            high_water=int(region["high_water"]),
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

    def write(self, archive: Path, meta: M) -> Path:
        """Writes ``archive/<engine>_plugin.json`` atomically (a reader sees the old file or the whole new one)."""
        archive.mkdir(parents=True, exist_ok=True)
        path = archive / self.name
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(meta.to_json(), indent=1) + "\n")
        os.replace(tmp, path)
        return path

    def read(self, archive: Path) -> M:
        path = archive / self.name
        engine = self.engine
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise ArchiveMetadataError(
                f"{path} does not exist: {archive} holds no finished {engine.name} SAVE. Run {engine.name} once with "
                f"{engine.var('MODE')}=save and this {engine.var('ARCHIVE')}."
            ) from None
        except OSError as exc:
            raise ArchiveMetadataError(
                f"cannot read {path}: {exc.strerror}; check the path and its permissions"
            ) from None
        try:
            return self.kind.from_json(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            raise ArchiveMetadataError(
                f"{path} is not a {engine.name} adapter metadata file this Foundry reads ({exc}); run SAVE again with "
                "this Foundry"
            ) from None

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
