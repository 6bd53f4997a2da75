"""The small JSON value objects of graph metadata and the manifest (docs/FORMAT.md).

Each class has ``to_json()`` (the exact JSON of the format) and ``from_json(value, at)``, which
validates types and ranges and raises ``ArchiveCorruptError`` naming the file and key on any problem.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from foundry.images import ImageFormat
from foundry.records import FuncAttr, FuncAttrs

from .jsonfields import (
    I32,
    I64,
    U32,
    U64,
    At,
    field,
    field_int,
    field_relpath,
    field_sha256,
    field_str,
    get_int_list,
    get_int_rows,
    get_list,
    get_obj,
    get_str,
    ints_within,
    is_sha256,
)

__all__ = [
    "FuncAttr",
    "FuncAttrs",
    "FunctionRef",
    "ImageRef",
    "MemorySpec",
    "OutputSpec",
    "RecordRef",
    "RegionSpec",
    "RngSpec",
    "VariableRef",
    "variables_from_json",
]

_ATTR_COUNT = len(FuncAttr)


def _format(value: Any, at: At) -> ImageFormat:
    text = get_str(value, at)
    try:
        return ImageFormat(text)
    except ValueError:
        at.fail(f"{text!r:.40} is not one of {[f.value for f in ImageFormat]}")


@dataclass(frozen=True, slots=True)
class RecordRef:
    """Where a graph's record is: ``file`` relative to the graph JSON; ``bytes`` and ``sha256`` are
    those of the graph record itself (the container's payload), not of the ``.cugraph`` file."""

    file: str
    bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "bytes": self.bytes, "sha256": self.sha256}

    @classmethod
    def from_json(cls, value: Any, at: At) -> RecordRef:
        obj = get_obj(value, at)
        file = field_relpath(obj, "file", at, bare=True)
        return cls(file, field_int(obj, "bytes", at), field_sha256(obj, "sha256", at))


@dataclass(frozen=True, slots=True)
class VariableRef:
    """A module variable an image must hold before its kernels run (docs/FORMAT.md, "Module variables"):
    its symbol name, and the SHA-256 and size of the bytes LOAD writes into it, stored in the archive as
    ``memory/<sha256>.bin``."""

    name: str
    bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "sha256": self.sha256}

    @classmethod
    def from_json(cls, value: Any, at: At) -> VariableRef:
        obj = get_obj(value, at)
        name = field_str(obj, "name", at)
        if not name or "\0" in name:
            at.key("name").fail("a variable name must be non-empty and hold no NUL byte")
        size = field_int(obj, "bytes", at)
        if size == 0:
            at.key("bytes").fail("a carried variable holds at least one byte")
        return cls(name, size, field_sha256(obj, "sha256", at))


def variables_from_json(value: Any, at: At) -> tuple[VariableRef, ...]:
    """An image's ``variables`` list: each name once, in name order (as SAVE writes it)."""
    refs = tuple(VariableRef.from_json(v, at.index(i)) for i, v in enumerate(get_list(value, at)))
    names = [r.name for r in refs]
    if names != sorted(set(names)):
        at.fail("variables must be listed once each, sorted by name")
    return refs


@dataclass(frozen=True, slots=True)
class ImageRef:
    """A kernel image: content hash, size in bytes, format, and the module variables LOAD writes into it
    after loading it (``variables``, by name; None only when read from a graph of format version 2,
    written before SAVE recorded them, which says nothing about them)."""

    sha256: str
    bytes: int
    format: ImageFormat
    variables: tuple[VariableRef, ...] | None = ()

    def to_json(self) -> dict[str, Any]:
        """The value under ``images[sha256]`` in a graph JSON."""
        doc: dict[str, Any] = {"bytes": self.bytes, "format": self.format.value}
        if self.variables is not None:
            doc["variables"] = [v.to_json() for v in self.variables]
        return doc

    @classmethod
    def from_json(cls, sha256: str, value: Any, at: At) -> ImageRef:
        obj = get_obj(value, at)
        variables = variables_from_json(obj["variables"], at.key("variables")) if "variables" in obj else None
        return cls(sha256, field_int(obj, "bytes", at), _format(*field(obj, "format", at)), variables)


@dataclass(frozen=True, slots=True)
class FunctionRef:
    """A kernel: the image holding it, its mangled name, and its function attributes (one per ``FuncAttr``,
    stored in the JSON as a list in that order)."""

    image: str
    name: str
    attrs: FuncAttrs

    def __post_init__(self) -> None:
        if type(self.attrs) is not FuncAttrs:
            object.__setattr__(self, "attrs", FuncAttrs._make(self.attrs))

    def to_json(self) -> dict[str, Any]:
        return {"image": self.image, "name": self.name, "attrs": list(self.attrs)}

    @classmethod
    def from_json(cls, value: Any, at: At) -> FunctionRef:
        # Fast path: a graph's JSON lists every kernel it launches, and LOAD reads dozens of graphs.
        if type(value) is dict:
            image, name, attrs = value.get("image"), value.get("name"), value.get("attrs")
            if (
                type(name) is str
                and name
                and is_sha256(image)
                and type(attrs) is list
                and len(attrs) == _ATTR_COUNT
                and ints_within(attrs, *I32)
            ):
                return cls(str(image), name, tuple.__new__(FuncAttrs, attrs))  # its length checked above
        obj = get_obj(value, at)
        name = field_str(obj, "name", at)
        if not name:
            at.key("name").fail("empty kernel name")
        attrs, attrs_at = field(obj, "attrs", at)
        values = get_int_list(attrs, attrs_at, _ATTR_COUNT, I32)
        return cls(field_sha256(obj, "image", at), name, FuncAttrs._make(values))


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """A graph output tensor: device address, shape, strides (elements), dtype name, size."""

    address: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    nbytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "shape": list(self.shape),
            "strides": list(self.strides),
            "dtype": self.dtype,
            "nbytes": self.nbytes,
        }

    @classmethod
    def from_json(cls, value: Any, at: At) -> OutputSpec:
        obj = get_obj(value, at)
        shape_v, strides_v = obj.get("shape"), obj.get("strides")
        if (
            type(shape_v) is list
            and type(strides_v) is list
            and len(strides_v) == len(shape_v)
            and ints_within(shape_v, 0, I64[1])
            and ints_within(strides_v, *I64)
        ):
            shape, strides = tuple(shape_v), tuple(strides_v)
        else:  # the plain readers, in this order, name what is wrong
            shape_v, shape_at = field(obj, "shape", at)
            strides_v, strides_at = field(obj, "strides", at)
            shape = get_int_list(shape_v, shape_at, None, (0, I64[1]))
            strides = get_int_list(strides_v, strides_at, len(shape), I64)
        return cls(
            field_int(obj, "address", at),
            shape,
            strides,
            field_str(obj, "dtype", at),
            field_int(obj, "nbytes", at),
        )


@dataclass(frozen=True, slots=True)
class RngSpec:
    """Where the graph's random-number generator state lives and how far each replay advances it."""

    seed_address: int
    offset_address: int
    increment: int

    def to_json(self) -> dict[str, Any]:
        return {
            "seed_address": self.seed_address,
            "offset_address": self.offset_address,
            "increment": self.increment,
        }

    @classmethod
    def from_json(cls, value: Any, at: At) -> RngSpec:
        obj = get_obj(value, at)
        return cls(
            field_int(obj, "seed_address", at),
            field_int(obj, "offset_address", at),
            field_int(obj, "increment", at),
        )


@dataclass(frozen=True, slots=True)
class RegionSpec:
    """The allocation region at SAVE time (docs/FORMAT.md, "region").

    ``live`` is ``(offset, length)`` pairs, sorted and non-overlapping, inside ``[0, size)``;
    ``events`` is ``(seq, kind, offset, size, span)`` tuples (kinds: ``FDY_EV_*`` in foundry.h);
    ``small_align`` the slot size of allocations smaller than a granule, which share granules (0: each had a
    granule of its own, as regions placed them before they packed them).
    """

    base: int
    size: int
    granularity: int
    high_water: int
    live: tuple[tuple[int, int], ...]
    events: tuple[tuple[int, int, int, int, int], ...]
    small_align: int = 0

    def to_json(self, range_too: bool = True) -> dict[str, Any]:
        """The region's JSON; without ``range_too``, only what is the graph's own (its high-water mark, live
        ranges and allocations): a graph its archive's manifest lists takes the range (base, size, granularity,
        small-allocation slots) from that manifest, which states it once for the archive (graph format version
        5)."""
        own = {
            "high_water": self.high_water,
            "live": [list(r) for r in self.live],
            "events": [list(e) for e in self.events],
        }
        if not range_too:
            return own
        out: dict[str, Any] = {"base": self.base, "size": self.size, "granularity": self.granularity, **own}
        if self.small_align:
            out["small_align"] = self.small_align
        return out

    def range_key(self) -> str:
        """The region's range as text, which a graph of format version 5 takes from its manifest: the key under
        which readers keep what they parsed under one range apart from another's."""
        return f"{self.base:x}:{self.size:x}:{self.granularity:x}:{self.small_align:x}"

    @classmethod
    def from_json(cls, value: Any, at: At, archive: RegionSpec | None = None) -> RegionSpec:
        """A region's JSON; with ``archive`` (the manifest's region), one that states only what is the graph's own
        (``to_json(range_too=False)``), its range taken from ``archive``."""
        obj = get_obj(value, at)
        if archive is not None:
            for key in ("base", "size", "granularity", "small_align"):
                if key in obj:
                    at.key(key).fail("stated here and in the manifest: a graph of format version 5 takes it from there")
            base, size, granularity = archive.base, archive.size, archive.granularity
        else:
            base = field_int(obj, "base", at)
            size = field_int(obj, "size", at)
            granularity = field_int(obj, "granularity", at)
        if base + size > U64[1] + 1:
            at.key("size").fail(f"the region {base:#x}+{size:#x} runs past the 64-bit address space")
        high_water = field_int(obj, "high_water", at)
        if high_water > size:
            at.key("high_water").fail(f"{high_water} is beyond the region size {size}")
        live_v, live_at = field(obj, "live", at)
        live = get_int_rows(live_v, live_at, (U64, U64))
        end = 0
        for i, (off, length) in enumerate(live):
            if off < end:
                live_at.index(i).fail("ranges must be sorted and must not overlap")
            end = off + length
            if end > size:
                live_at.index(i).fail(f"range {off}+{length} ends beyond the region size {size}")
        events_v, events_at = field(obj, "events", at)
        events = get_int_rows(events_v, events_at, (U64, U32, U64, U64, U64))
        if archive is not None:
            small_align = archive.small_align
        else:
            small_align = field_int(obj, "small_align", at) if "small_align" in obj else 0
        return cls(base, size, granularity, high_water, live, events, small_align)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class MemorySpec:
    """Contents of the program's state memory at SAVE (docs/FORMAT.md, "memory").

    ``ranges`` are ``(offset, length)`` pairs from the region base, sorted and non-overlapping; the
    file ``memory/<sha256>.bin`` of the archive holds their bytes back to back.
    """

    sha256: str
    bytes: int
    ranges: tuple[tuple[int, int], ...]

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "bytes": self.bytes, "ranges": [list(r) for r in self.ranges]}

    @classmethod
    def from_json(cls, value: Any, at: At) -> MemorySpec:
        obj = get_obj(value, at)
        ranges_v, ranges_at = field(obj, "ranges", at)
        ranges = get_int_rows(ranges_v, ranges_at, (U64, U64))
        end = 0
        for i, (off, length) in enumerate(ranges):
            if off < end:
                ranges_at.index(i).fail("ranges must be sorted and must not overlap")
            end = off + length
        total = field_int(obj, "bytes", at)
        if total != sum(length for _, length in ranges):
            at.key("bytes").fail(f"{total} is not the sum of the range lengths")
        return cls(field_sha256(obj, "sha256", at), total, ranges)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class TemplateRef:
    """A template member's template: its graph JSON (relative to the member's JSON, or absolute) and
    the SHA-256 of its graph record, which the member's delta also names."""

    json: str
    record_sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"json": self.json, "record_sha256": self.record_sha256}

    @classmethod
    def from_json(cls, value: Any, at: At) -> TemplateRef:
        obj = get_obj(value, at)
        path = field_relpath(obj, "json", at)
        return cls(path, field_sha256(obj, "record_sha256", at))
