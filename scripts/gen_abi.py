"""Generates the Python side of the C/Python contract from the headers that define it.

    csrc/include/foundry.h  ->  foundry/native/_abi.py    ABI version, error codes, enums, ctypes structs,
                                                          the signature of every exported function, and the
                                                          driver values and entry points Python uses (cuda.h)
    csrc/include/format.h   ->  foundry/format/_layout.py record, delta and fatbin layouts (a NamedTuple per
                                                          struct), magics, versions, the layout digest, and
                                                          the CUDA values a record holds (cuda.h)

Names and types are read from the headers' text; every value, size and offset comes from the C compiler
(a probe program built against the headers and cuda.h prints them), so the generated files say what the
compiled library sees. What Python takes from cuda.h is named in the headers (X-macro lists such as
``FDY_NODE_TYPES`` and ``FDY_PYTHON_DRIVER_CALLS``), never typed: values from the compiler, driver signatures
from cuda.h's prototypes (scripts/abi_cuda.py). CI runs ``--check``: a header changed without
regenerating, or a generated file edited by hand, fails it; so does a record or delta layout that no
version names (``FDY_LAYOUT_<record>_<delta>``).

    python scripts/gen_abi.py            write both files
    python scripts/gen_abi.py --check    exit 1, with a diff, when either file is not what the headers give
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import keyword
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from abi_cuda import Typedefs, cuda_include, preprocessed, signature

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = ROOT / "csrc" / "include"
TARGETS = {
    "foundry.h": ROOT / "foundry" / "native" / "_abi.py",
    "format.h": ROOT / "foundry" / "format" / "_layout.py",
}

_INTS = {
    "uint8_t": ("B", "ctypes.c_uint8"),
    "int8_t": ("b", "ctypes.c_int8"),
    "uint16_t": ("H", "ctypes.c_uint16"),
    "int16_t": ("h", "ctypes.c_int16"),
    "uint32_t": ("I", "ctypes.c_uint32"),
    "int32_t": ("i", "ctypes.c_int32"),
    "uint64_t": ("Q", "ctypes.c_uint64"),
    "int64_t": ("q", "ctypes.c_int64"),
    "int": ("i", "ctypes.c_int"),
    "size_t": ("N", "ctypes.c_size_t"),
    "char": ("c", "ctypes.c_char"),
}


@dataclass(frozen=True)
class Field:
    name: str
    ctype: str  # a scalar type of _INTS, or the name of a struct of the same header
    count: int | None  # array length, None for a scalar


@dataclass(frozen=True)
class Header:
    defines: list[tuple[str, str]]  # (name, text of the value)
    enums: list[tuple[str, list[str]]]  # (tag, member names)
    structs: list[tuple[str, list[Field]]]
    functions: list[tuple[str, str, list[str]]]  # (name, return type, parameter types)
    cuda_values: list[tuple[str, list[tuple[str, str]]]]  # X-macro lists of cuda.h values: (macro, (prefix, name))
    cuda_calls: list[str]  # FDY_PYTHON_DRIVER_CALLS: the driver entry points Python calls itself


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))


def parse(text: str) -> Header:
    """The declarations of one of our headers (their style only: this is not a C parser)."""
    text = _strip_comments(text).replace("\\\n", " ")
    cuda_values, cuda_calls = [], []
    for m in re.finditer(r"^#define\s+(FDY_\w+)\(X\)[ \t]+(.+)$", text, re.M):
        items = re.findall(r"X\((\w+)(?:,\s*(\w+))?\)", m.group(2))
        if m.group(1) == "FDY_PYTHON_DRIVER_CALLS":
            cuda_calls = [name for name, _ in items]
        else:
            cuda_values.append((m.group(1), [(prefix, name) for prefix, name in items]))
    defines = [
        (m.group(1), m.group(2).strip())
        for m in re.finditer(r"^#define\s+(FDY_\w+)(?!\()[ \t]+(.+)$", text, re.M)
        if m.group(1) != "FDY_EXPORT"
    ]
    enums = []
    for m in re.finditer(r"\benum\s+(\w+)\s*\{(.*?)\}\s*;", text, re.S):
        members = [part.split("=")[0].strip() for part in m.group(2).split(",") if part.strip()]
        enums.append((m.group(1), members))
    structs = []
    for m in re.finditer(r"typedef\s+struct\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        fields: list[Field] = []
        for decl in filter(None, (d.strip() for d in m.group(1).split(";"))):
            ctype, names = decl.split(None, 1)
            for name in (n.strip() for n in names.split(",")):
                array = re.fullmatch(r"(\w+)\[(\d+)\]", name)
                fields.append(Field(array.group(1), ctype, int(array.group(2))) if array else Field(name, ctype, None))
        structs.append((m.group(2), fields))
    functions = []
    for m in re.finditer(r"FDY_EXPORT\s+([^;{]+?)\(([^)]*)\)\s*;", text, re.S):
        head = " ".join(m.group(1).split())
        ret, name = re.fullmatch(r"(.*?[\s*])(\w+)", head).groups()  # type: ignore[union-attr]
        params = [" ".join(p.split()) for p in m.group(2).split(",")]
        params = [] if params == ["void"] else [re.sub(r"\s*\b\w+$", "", p) if p not in _INTS else p for p in params]
        functions.append((name, ret.strip(), params))
    return Header(defines, enums, structs, functions, cuda_values, cuda_calls)


# ------------------------------------------------------------------ the probe: values from the compiler
def _probe_source(header: str, h: Header) -> str:
    lines = [
        "#include <stddef.h>",
        "#include <stdint.h>",
        "#include <stdio.h>",
        "#include <cuda.h>",
        f'#include "{header}"',
        "static int first = 1;",
        'static void key(const char *k) { printf("%s\\"%s\\": ", first ? "" : ",\\n", k); first = 0; }',
        "int main(void) {",
        '  printf("{\\n");',
    ]
    for name, value in h.defines:
        if value.startswith('"'):
            lines.append(f'  {{ key("{name}"); const char s[] = {name}; printf("\\"");')
            lines.append('    for (size_t i = 0; i + 1 < sizeof(s); i++) printf("%02x", (unsigned char)s[i]);')
            lines.append('    printf("\\""); }')
        elif value.startswith("{"):
            lines.append(f'  {{ key("{name}"); static const long long a[] = {name}; printf("[");')
            lines.append(
                '    for (size_t i = 0; i < sizeof(a) / sizeof(a[0]); i++) printf("%s%lld", i ? ", " : "", a[i]);'
            )
            lines.append('    printf("]"); }')
        else:
            lines.append(f'  key("{name}"); printf("%lld", (long long)({name}));')
    for _tag, members in h.enums:
        for member in members:
            lines.append(f'  key("{member}"); printf("%lld", (long long)({member}));')
    for _macro, items in h.cuda_values:
        for prefix, member in items:
            lines.append(f'  key("{prefix}{member}"); printf("%lld", (long long)({prefix}{member}));')
    known = dict(h.structs)

    def fields(struct: str, prefix: str) -> None:
        for f in known[struct]:
            path = f"{prefix}{f.name}"
            lines.append(
                f'  key("{struct_root}.{path}"); printf("[%zu, %zu]", offsetof({struct_root}, {path}), '
                f"sizeof((({struct_root} *)0)->{path}));"
            )
            if f.ctype in known and f.count is None:
                fields(f.ctype, f"{path}.")

    for struct_root, _ in h.structs:
        lines.append(f'  key("{struct_root}"); printf("%zu", sizeof({struct_root}));')
        fields(struct_root, "")
    lines += ['  printf("\\n}\\n");', "  return 0;", "}"]
    return "\n".join(lines) + "\n"


def compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise SystemExit("gen_abi: no C compiler (set CC): the values come from compiling the headers")
    return cc


def probe(header: str, h: Header) -> dict[str, object]:
    """Every value, size and offset of ``header``'s declarations, as the C compiler sees them."""
    cc = compiler()
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "probe.c", Path(tmp) / "probe"
        src.write_text(_probe_source(header, h))
        include = ["-I", str(INCLUDE), "-I", str(cuda_include())]
        subprocess.run([cc, "-std=c11", *include, "-o", str(exe), str(src)], check=True)
        out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    values: dict[str, object] = json.loads(out)
    return values


# ------------------------------------------------------------------ emitting Python
def _camel(tag: str) -> str:
    return "".join(part.capitalize() for part in tag.removeprefix("fdy_").split("_"))


def _common_prefix(names: list[str]) -> str:
    prefix = os.path.commonprefix(names)  # noqa: RUF071 - a prefix of names, not of paths
    return prefix[: prefix.rfind("_") + 1]


def _value(name: str, raw: str, got: object) -> str:
    if raw.startswith('"'):
        assert isinstance(got, str)
        return repr(bytes.fromhex(got))
    if raw.startswith("{"):
        assert isinstance(got, list)
        return repr(tuple(got))
    return repr(got)


def _head(header: str) -> list[str]:
    return [
        f'"""Generated from csrc/include/{header} by scripts/gen_abi.py: do not edit.',
        "",
        "Regenerate with `python scripts/gen_abi.py` after changing the header; CI checks that this file is",
        'what the header gives."""',
        "",
        "from __future__ import annotations",
        "",
    ]


def _enums(h: Header, values: dict[str, object]) -> list[str]:
    out: list[str] = []
    for tag, members in h.enums:
        prefix = _common_prefix(members)
        out += ["", "", f"class {_camel(tag)}(IntEnum):", f'    """``enum {tag}``."""', ""]
        out += [f"    {m.removeprefix(prefix)} = {values[m]}" for m in members]
    return out


def _constants(h: Header, values: dict[str, object]) -> list[str]:
    out = [""]
    for name, raw in h.defines:
        if _LAYOUT_KEY.match(name):
            continue  # the layout registry: LAYOUT_DIGEST says which applies
        out.append(f"{name.removeprefix('FDY_')} = {_value(name, raw, values[name])}")
    return out


TABLES = {"FDY_FUNC_ATTRS": "FuncAttrs"}
"""Value lists whose members a table stores as one int32 each, in list order: Python reads the table by name."""


def _cuda_values(h: Header, values: dict[str, object]) -> list[str]:
    """An IntEnum per list of cuda.h values (``FDY_NODE_TYPES`` -> ``NodeType``), values from the compiler;
    a NamedTuple per table of them."""
    out: list[str] = []
    for macro, items in h.cuda_values:
        cls = "".join(part.capitalize() for part in macro.removeprefix("FDY_").removesuffix("S").split("_"))
        prefixes = ", ".join(sorted({f"``{prefix}*``" for prefix, _ in items}))
        out += ["", "", f"class {cls}(IntEnum):", f'    """cuda.h\'s {prefixes} values that ``{macro}`` names."""', ""]
        out += [f"    {name} = {values[prefix + name]}" for prefix, name in items]
        table = TABLES.get(macro)
        if table:
            out += ["", "", f"class {table}(NamedTuple):"]
            out += [f'    """A table of ``{macro}``: one int32 per {cls}, in its order."""', ""]
            out += [f"    {name.lower()}: int" for _prefix, name in items]
    return out


def _driver_signatures(h: Header) -> list[str]:
    """DRIVER_SIGNATURES: the ctypes argument types of each entry point ``FDY_PYTHON_DRIVER_CALLS`` names, from
    cuda.h's prototypes (each returns CUresult)."""
    text = preprocessed(compiler())
    typedefs = Typedefs(text)
    out = [
        "",
        "",
        "# name -> ctypes argument types of each driver entry point Python calls (cuda.h; returns CUresult)",
        "DRIVER_SIGNATURES: dict[str, list[Any]] = {",
    ]
    out += [f'    "{name}": [{", ".join(signature(text, typedefs, name))}],' for name in h.cuda_calls]
    out.append("}")
    return out


def emit_abi(h: Header, values: dict[str, object]) -> str:
    """foundry/native/_abi.py: constants, enums, ctypes structs and function signatures."""
    structs = dict(h.structs)
    out = [*_head("foundry.h"), "import ctypes", "from enum import IntEnum", "from typing import Any"]
    out += _constants(h, values)
    out += _enums(h, values)
    out += _cuda_values(h, values)
    for name, fields in h.structs:
        out += ["", "", f"class {_camel(name)}(ctypes.Structure):", f'    """``{name}`` ({values[name]} bytes)."""', ""]
        out.append("    _fields_ = [")
        for f in fields:
            base = _INTS[f.ctype][1] if f.ctype in _INTS else _camel(f.ctype)
            out.append(f'        ("{f.name}", {base if f.count is None else f"{base} * {f.count}"}),')
        out.append("    ]")
    out += [
        "",
        "",
        "# field -> (offset, size) of each struct, as the compiler lays it out",
        "OFFSETS: dict[str, dict[str, tuple[int, int]]] = {",
    ]
    for name, fields in h.structs:
        out.append(f'    "{_camel(name)}": {{')
        for f in fields:
            off, size = values[f"{name}.{f.name}"]  # type: ignore[misc]
            out.append(f'        "{f.name}": ({off}, {size}),')
        out.append("    },")
    out += ["}", "SIZES: dict[str, int] = {"]
    out += [f'    "{_camel(name)}": {values[name]},' for name, _ in h.structs]
    out += [
        "}",
        "",
        "",
        "def _ptr(base: Any, depth: int) -> Any:",
        "    for _ in range(depth):",
        "        base = ctypes.POINTER(base)",
        "    return base",
        "",
    ]
    out += [
        "",
        "# name -> (restype, argtypes) of every exported function",
        "SIGNATURES: dict[str, tuple[Any, list[Any]]] = {",
    ]
    for fname, ret, params in h.functions:
        out.append(
            f'    "{fname}": ({_ctypes_of(ret, structs)}, [{", ".join(_ctypes_of(q, structs) for q in params)}]),'
        )
    out.append("}")
    out += _driver_signatures(h)
    return "\n".join(out) + "\n"


def _ctypes_of(decl: str, structs: dict[str, list[Field]]) -> str:
    """The ctypes type of a C parameter or return type (char and uint8_t pointers are byte strings)."""
    decl = decl.replace("const ", "").strip()
    depth = decl.count("*")
    base = decl.replace("*", "").strip()
    if depth == 0:
        return "None" if base == "void" else _INTS[base][1]
    if base == "void":
        return "ctypes.c_void_p" if depth == 1 else f"_ptr(ctypes.c_void_p, {depth - 1})"
    if base in ("char", "uint8_t") and depth == 1:
        return "ctypes.c_char_p"
    target = _camel(base) if base in structs else _INTS[base][1]
    return f"_ptr({target}, {depth})"


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
            off, _size = values[f"{name}.{path}"]  # type: ignore[misc]
            if f.ctype in structs and f.count is None:
                walk(f.ctype, f"{path}.")
                continue
            code = _INTS[f.ctype][0]
            if f.count is not None:
                code = f"{f.count}s" if f.ctype in ("char", "uint8_t") else f"{f.count}{code}"
            rows.append(Row(path, off, code, f.ctype, f.count))

    walk(name, "")
    return rows


LAYOUT_PREFIX = "rec_"  # the structs of the record and the delta, whose layout the versions name
_LAYOUT_KEY = re.compile(r"FDY_LAYOUT_(\d+)_(\d+)$")


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
    record, delta = values["FDY_RECORD_VERSION"], values["FDY_DELTA_VERSION"]
    listed = {
        (int(m.group(1)), int(m.group(2))): raw.strip('"') for name, raw in h.defines if (m := _LAYOUT_KEY.match(name))
    }
    want = listed.get((record, delta))  # type: ignore[call-overload]
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
        f'#define FDY_LAYOUT_{int(record) + 1}_{delta} "{digest}"'  # type: ignore[call-overload]
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
    cls, const = _camel(name), name.upper()
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
    """foundry/format/_layout.py: constants, enums, the layout digest, and each packed struct as a
    NamedTuple read and written by field name, plus its ordered (field, offset, struct format) rows."""
    out = [*_head("format.h"), "import builtins", "import mmap", "import struct", "from enum import IntEnum"]
    out += ["from typing import NamedTuple", "", "Buffer = bytes | bytearray | memoryview | mmap.mmap"]
    out += ["_new = tuple.__new__"]
    out += _constants(h, values)
    out += [
        "",
        f'LAYOUT_DIGEST = "{layout_digest(h, values)}"',
        '"""Of the record and delta structs (field names, C types, array lengths, offsets), listed in format.h for',
        'RECORD_VERSION and DELTA_VERSION."""',
    ]
    out += _enums(h, values)
    out += _cuda_values(h, values)
    for name, _ in h.structs:
        out += _named_struct(name, values[name], struct_rows(h, values, name))
    out += [
        "",
        "",
        "# struct -> (size, ((field, offset, struct format), ...)); little-endian, packed",
        "LAYOUTS: dict[str, tuple[int, tuple[tuple[str, int, str], ...]]] = {",
    ]
    for name, _ in h.structs:
        out.append(f'    "{name}": ({values[name]}, (')
        out += [f'        ("{r.path}", {r.offset}, "{r.code}"),' for r in struct_rows(h, values, name)]
        out.append("    )),")
    out.append("}")
    return "\n".join(out) + "\n"


def generate() -> dict[Path, str]:
    """The text each target file must hold, formatted as ruff formats it. Raises ``LayoutError`` when
    format.h's layout is not the one its versions name."""
    result = {}
    for header, target in TARGETS.items():
        h = parse((INCLUDE / header).read_text())
        values = probe(header, h)
        problem = layout_problem(h, values) if header == "format.h" else None
        if problem:
            raise LayoutError(problem)
        text = emit_abi(h, values) if header == "foundry.h" else emit_layout(h, values)
        ruff = subprocess.run(
            [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(target), "-"],
            input=text, capture_output=True, text=True, check=True, cwd=ROOT,
        )  # fmt: skip
        result[target] = ruff.stdout
    return result


class LayoutError(Exception):
    """format.h's structs changed without a version naming their new layout."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = parser.parse_args()
    stale = 0
    try:
        generated = generate()
    except LayoutError as exc:
        print(f"gen_abi: {exc}")
        return 1
    for target, text in generated.items():
        current = target.read_text() if target.exists() else ""
        if current == text:
            continue
        if args.check:
            stale += 1
            rel = target.relative_to(ROOT)
            diff = difflib.unified_diff(
                current.splitlines(), text.splitlines(), f"{rel} (committed)", f"{rel} (header)", lineterm=""
            )
            print("\n".join(diff))
        else:
            target.write_text(text)
            print(f"wrote {target.relative_to(ROOT)}")
    if stale:
        print(
            f"\n{stale} generated file(s) differ from their header: run `python scripts/gen_abi.py`, commit the result"
        )
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
