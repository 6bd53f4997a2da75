"""The adapter's metadata file, ``vllm_plugin.json``, beside Foundry's own archive files.

It holds what LOAD needs from SAVE that Foundry's archive does not: what the archive was made for (the
fingerprint LOAD compares before it serves), the KV cache size (so LOAD skips memory profiling), the
region cursor at each start-up phase boundary with the allocations made in the phase (so LOAD can check
that it placed its persistent tensors where SAVE did), and which graph file serves which batch.

Pure data and JSON: no vLLM, no torch. The file is written last, so an archive whose SAVE failed has
no metadata and LOAD refuses it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..shared.errors import ArchiveMetadataError, ArchiveMismatchError

__all__ = [
    "METADATA_NAME",
    "SCHEMA",
    "ArchiveMetadata",
    "Fingerprint",
    "GraphEntry",
    "PhaseMark",
    "check_fingerprint",
    "read_metadata",
    "write_metadata",
]

METADATA_NAME = "vllm_plugin.json"
SCHEMA = 1

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
    """One saved graph: its Foundry JSON (relative to the archive) and the vLLM batch key it serves."""

    json: str
    key: tuple[tuple[str, Scalar], ...]
    output_address: int

    def key_dict(self) -> dict[str, Scalar]:
        return dict(self.key)


@dataclass(frozen=True)
class ArchiveMetadata:
    fingerprint: Fingerprint
    runner: str  # "v2" (vllm/v1/worker/gpu) or "v1" (gpu_model_runner.py)
    region_base: int
    region_size: int
    kv_cache_bytes: int  # what determine_available_memory returned in SAVE
    num_gpu_blocks: int
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
            f"the archive's {METADATA_NAME} has no start-up phase {name!r} (it has {[p.name for p in self.phases]}); "
            "SAVE did not finish. Run SAVE again."
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "fingerprint": self.fingerprint.as_dict(),
            "runner": self.runner,
            "region": {"base": self.region_base, "size": self.region_size, "high_water": self.high_water},
            "kv_cache": {"bytes": self.kv_cache_bytes, "num_gpu_blocks": self.num_gpu_blocks},
            "phases": [
                {"name": p.name, "cursor": p.cursor, "allocations": [list(a) for a in p.allocations]}
                for p in self.phases
            ],
            "graphs": [{"json": g.json, "key": dict(g.key), "output_address": g.output_address} for g in self.graphs],
            "timings": dict(self.timings),
        }

    @classmethod
    def from_json(cls, doc: Any) -> ArchiveMetadata:
        if not isinstance(doc, dict):
            raise ValueError("the document is not a JSON object")
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"schema {doc.get('schema')!r}, this Foundry reads schema {SCHEMA}")
        region, kv = doc["region"], doc["kv_cache"]
        return cls(
            fingerprint=Fingerprint(tuple((str(k), str(v)) for k, v in doc["fingerprint"].items())),
            runner=str(doc["runner"]),
            region_base=int(region["base"]),
            region_size=int(region["size"]),
            kv_cache_bytes=int(kv["bytes"]),
            num_gpu_blocks=int(kv["num_gpu_blocks"]),
            high_water=int(region["high_water"]),
            phases=tuple(
                PhaseMark(str(p["name"]), int(p["cursor"]), tuple((int(o), int(s)) for o, s in p["allocations"]))
                for p in doc["phases"]
            ),
            graphs=tuple(
                GraphEntry(str(g["json"]), tuple((str(k), v) for k, v in g["key"].items()), int(g["output_address"]))
                for g in doc["graphs"]
            ),
            timings=tuple((str(k), float(v)) for k, v in doc.get("timings", {}).items()),
        )


def write_metadata(archive: Path, meta: ArchiveMetadata) -> Path:
    """Writes ``archive/vllm_plugin.json`` atomically (a reader sees the old file or the whole new one)."""
    archive.mkdir(parents=True, exist_ok=True)
    path = archive / METADATA_NAME
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(meta.to_json(), indent=1) + "\n")
    os.replace(tmp, path)
    return path


def read_metadata(archive: Path) -> ArchiveMetadata:
    path = archive / METADATA_NAME
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ArchiveMetadataError(
            f"{path} does not exist: {archive} holds no finished vLLM SAVE. Run vLLM once with FOUNDRY_VLLM_MODE=save "
            "and this FOUNDRY_VLLM_ARCHIVE."
        ) from None
    except OSError as exc:
        raise ArchiveMetadataError(f"cannot read {path}: {exc.strerror}; check the path and its permissions") from None
    try:
        return ArchiveMetadata.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise ArchiveMetadataError(
            f"{path} is not a vLLM adapter metadata file this Foundry reads ({exc}); run SAVE again with this Foundry"
        ) from None


def check_fingerprint(saved: Fingerprint, here: Fingerprint, archive: Path) -> None:
    """Refuses an archive made for another model, configuration, software version or GPU."""
    diffs = saved.differences(here)
    if diffs:
        raise ArchiveMismatchError(_mismatch_message(diffs, archive))


def _mismatch_message(diffs: Iterable[tuple[str, str | None, str | None]], archive: Path) -> str:
    lines = "\n  ".join(f"{name}: saved {saved!r}, here {now!r}" for name, saved, now in diffs)
    return (
        f"the archive {archive} was saved for another setup:\n  {lines}\n"
        "Its graphs would read memory laid out for that setup. Start vLLM with the settings it was saved with, or "
        "run SAVE again for these settings (FOUNDRY_VLLM_MODE=save, a fresh FOUNDRY_VLLM_ARCHIVE)."
    )
