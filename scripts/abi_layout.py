"""format.h's packed structs for scripts/gen_abi.py: their fields in order with the compiler's offsets, the
layout digest the record and delta versions name, and foundry/records/_layout.py and _offsets.py themselves
(``emit_layout``, ``emit_offsets``)."""

from __future__ import annotations

import hashlib
import keyword
from dataclasses import dataclass
from typing import cast

from abi_headers import INTS, LAYOUT_KEY, Header, camel, constants, cuda_values, enums, head


@dataclass(frozen=True)
class Row:
    """One field of a packed struct, nested structs flattened (``h.type``)."""

    path: str
    offset: int
    code: str  # struct-module format of the field
    ctype: str
    count: int | None


def struct_rows(h: Header, values: dict[str, object], name: str) -> list[Row]:
    """The fields of struct ``name`` in order, with the offsets the compiler gave them."""
    structs = dict(h.structs)
    rows: list[Row] = []

    def walk(struct: str, prefix: str) -> None:
        for f in structs[struct]:
            path = f"{prefix}{f.name}"
            off, _size = cast("tuple[int, int]", values[f"{name}.{path}"])
            if f.ctype in structs and f.count is None:
                walk(f.ctype, f"{path}.")
                continue
            code = INTS[f.ctype][0]
            if f.count is not None:
                code = f"{f.count}s" if f.ctype in ("char", "uint8_t") else f"{f.count}{code}"
            rows.append(Row(path, off, code, f.ctype, f.count))

    walk(name, "")
    return rows


LAYOUT_PREFIX = "rec_"  # the structs of the record and the delta, whose layout the versions name


def layout_digest(h: Header, values: dict[str, object]) -> str:
    """The first 16 hex digits of the SHA-256 over every record and delta struct's field names, C types,
    array lengths and offsets, in order: any reordered, renamed, retyped or moved field changes it."""
    lines = [
        f"{name}.{r.path} {r.ctype}[{r.count or 0}] @{r.offset}"
        for name, _ in h.structs
        if name.startswith(LAYOUT_PREFIX)
        for r in struct_rows(h, values, name)
    ]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def layout_problem(h: Header, values: dict[str, object]) -> str | None:
    """Why format.h's layout does not match the versions it states (None when it does)."""
    digest = layout_digest(h, values)
    record, delta = cast(int, values["FDY_RECORD_VERSION"]), cast(int, values["FDY_DELTA_VERSION"])
    listed = {
        (int(m.group(1)), int(m.group(2))): raw.strip('"') for name, raw in h.defines if (m := LAYOUT_KEY.match(name))
    }
    want = listed.get((record, delta))
    if want == digest:
        return None
    add = f'#define FDY_LAYOUT_{record}_{delta} "{digest}"'
    if want is None:
        return f"format.h lists no layout for record version {record} and delta version {delta}: add {add}"
    return (
        f"the layout of format.h's record and delta structs changed (its digest is now {digest}), but record "
        f"version {record} and delta version {delta} name the layout {want}: readers would take the new bytes "
        "for the old. Raise FDY_RECORD_VERSION (a record's layout changed) or FDY_DELTA_VERSION (a delta's), "
        "and list the new pair's digest (a listed digest never changes), e.g. "
        f'#define FDY_LAYOUT_{record + 1}_{delta} "{digest}"'
    )


def _field(path: str) -> str:
    """A struct field's Python name: nested fields joined with ``_``, a keyword with ``_`` appended."""
    name = path.replace(".", "_")
    return f"{name}_" if keyword.iskeyword(name) else name


def _py_type(row: Row) -> str:
    if row.count is None:
        return "int"
    if row.ctype in ("char", "uint8_t"):
        return "bytes"
    return f"tuple[{', '.join(['int'] * row.count)}]"


def _named_struct(name: str, size: object, rows: list[Row]) -> list[str]:
    """A typed NamedTuple for one packed struct, read and written by field name."""
    cls, const = camel(name), name.upper()
    fmt = "<" + "".join(r.code for r in rows)
    out = ["", "", f'{const} = struct.Struct("{fmt}")', "", "", f"class {cls}(NamedTuple):"]
    out += [f'    """``{name}`` ({size} bytes, little-endian, packed)."""', ""]
    out += [f"    {_field(r.path)}: {_py_type(r)}" for r in rows]
    picks, at = [], 0
    for r in rows:
        width = r.count if _py_type(r).startswith("tuple") and r.count else 1
        picks.append(f"v[{at}:{at + width}]" if width > 1 else f"v[{at}]")
        at += width
    grouped = at != len(rows)  # an integer array is one field of several values
    out += ["", "    @staticmethod", f"    def unpack_from(buffer: Buffer, offset: int = 0) -> {cls}:"]
    if grouped:  # tuple.__new__ with the values regrouped: a NamedTuple's own __new__ is a Python call
        out += [f"        v = {const}.unpack_from(buffer, offset)"]
        out += [f"        return _new({cls}, ({', '.join(picks)}))"]
    else:
        out.append(f"        return {cls}._make({const}.unpack_from(buffer, offset))")
    args = [f"*self.{_field(r.path)}" if _py_type(r).startswith("tuple") else f"self.{_field(r.path)}" for r in rows]
    # builtins.bytes: a field may be named ``bytes`` (rec_node's record size)
    out += ["", "    def pack(self) -> builtins.bytes:", f"        return {const}.pack({', '.join(args)})"]
    return out


def emit_layout(h: Header, values: dict[str, object]) -> str:
    """foundry/records/_layout.py: constants, enums, the layout digest, and each packed struct as a
    NamedTuple read and written by field name (its rows by offset: ``emit_offsets``)."""
    out = [*head("format.h"), "import builtins", "import mmap", "import struct", "from enum import IntEnum"]
    out += ["from typing import NamedTuple", "", "Buffer = bytes | bytearray | memoryview | mmap.mmap"]
    out += ["_new = tuple.__new__"]
    out += constants(h, values)
    out += [
        "",
        f'LAYOUT_DIGEST = "{layout_digest(h, values)}"',
        '"""Of the record and delta structs (field names, C types, array lengths, offsets), listed in format.h for',
        'RECORD_VERSION and DELTA_VERSION."""',
    ]
    out += enums(h, values)
    out += cuda_values(h, values)
    for name, _ in h.structs:
        out += _named_struct(name, values[name], struct_rows(h, values, name))
    return "\n".join(out) + "\n"


def emit_offsets(h: Header, values: dict[str, object]) -> str:
    """foundry/records/_offsets.py: each packed struct's size and ordered (field, offset, struct format) rows, the
    table by field name that readers of one field and the layout checks use, apart from the named types."""
    out = [*head("format.h"), "# struct -> (size, ((field, offset, struct format), ...)); little-endian, packed"]
    out += ["LAYOUTS: dict[str, tuple[int, tuple[tuple[str, int, str], ...]]] = {"]
    for name, _ in h.structs:
        out.append(f'    "{name}": ({values[name]}, (')
        out += [f'        ("{r.path}", {r.offset}, "{r.code}"),' for r in struct_rows(h, values, name)]
        out.append("    )),")
    out.append("}")
    return "\n".join(out) + "\n"


class LayoutError(Exception):
    """format.h's structs changed without a version naming their new layout."""
