"""Generates the Python side of the C/Python contract from the headers that define it.

    csrc/include/foundry.h  ->  foundry/native/_abi.py    ABI version, error codes, enums, ctypes structs,
                                                          the signature of every exported function
    csrc/include/format.h   ->  foundry/format/_layout.py record and delta layouts, magics, versions,
                                                          launch and function attribute ids

Names and types are read from the headers' text; every value, size and offset comes from the C compiler
(a probe program built against the headers prints them), so the generated files say what the compiled
library sees. CI runs ``--check``: a header changed without regenerating, or a generated file edited by
hand, fails it.

    python scripts/gen_abi.py            write both files
    python scripts/gen_abi.py --check    exit 1, with a diff, when either file is not what the headers give
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

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


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))


def parse(text: str) -> Header:
    """The declarations of one of our headers (their style only: this is not a C parser)."""
    text = _strip_comments(text)
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
    return Header(defines, enums, structs, functions)


# ------------------------------------------------------------------ the probe: values from the compiler
def _probe_source(header: str, h: Header) -> str:
    lines = [
        "#include <stddef.h>",
        "#include <stdint.h>",
        "#include <stdio.h>",
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


def probe(header: str, h: Header) -> dict[str, object]:
    """Every value, size and offset of ``header``'s declarations, as the C compiler sees them."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise SystemExit("gen_abi: no C compiler (set CC): the values come from compiling the headers")
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "probe.c", Path(tmp) / "probe"
        src.write_text(_probe_source(header, h))
        subprocess.run([cc, "-std=c11", "-I", str(INCLUDE), "-o", str(exe), str(src)], check=True)
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
        out.append(f"{name.removeprefix('FDY_')} = {_value(name, raw, values[name])}")
    return out


def emit_abi(h: Header, values: dict[str, object]) -> str:
    """foundry/native/_abi.py: constants, enums, ctypes structs and function signatures."""
    structs = dict(h.structs)
    out = [*_head("foundry.h"), "import ctypes", "from enum import IntEnum", "from typing import Any"]
    out += _constants(h, values)
    out += _enums(h, values)
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


def emit_layout(h: Header, values: dict[str, object]) -> str:
    """foundry/format/_layout.py: constants, enums and each packed struct as ordered (field, offset,
    struct format) rows, nested structs flattened with dotted names."""
    structs = dict(h.structs)
    out = [*_head("format.h"), "from enum import IntEnum"]
    out += _constants(h, values)
    out += _enums(h, values)
    out += [
        "",
        "",
        "# struct -> (size, ((field, offset, struct format), ...)); little-endian, packed",
        "LAYOUTS: dict[str, tuple[int, tuple[tuple[str, int, str], ...]]] = {",
    ]
    for name, _ in h.structs:
        rows: list[tuple[str, int, str]] = []

        def walk(struct: str, prefix: str, root: str = name, rows: list[tuple[str, int, str]] = rows) -> None:
            for f in structs[struct]:
                path = f"{prefix}{f.name}"
                off, _size = values[f"{root}.{path}"]  # type: ignore[misc]
                if f.ctype in structs and f.count is None:
                    walk(f.ctype, f"{path}.")
                    continue
                code = _INTS[f.ctype][0]
                if f.count is not None:
                    code = f"{f.count}s" if f.ctype in ("char", "uint8_t") else f"{f.count}{code}"
                rows.append((path, off, code))

        walk(name, "")
        out.append(f'    "{name}": ({values[name]}, (')
        out += [f'        ("{p}", {o}, "{c}"),' for p, o, c in rows]
        out.append("    )),")
    out.append("}")
    return "\n".join(out) + "\n"


def generate() -> dict[Path, str]:
    """The text each target file must hold, formatted as ruff formats it."""
    result = {}
    for header, target in TARGETS.items():
        h = parse((INCLUDE / header).read_text())
        values = probe(header, h)
        text = emit_abi(h, values) if header == "foundry.h" else emit_layout(h, values)
        ruff = subprocess.run(
            [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(target), "-"],
            input=text, capture_output=True, text=True, check=True, cwd=ROOT,
        )  # fmt: skip
        result[target] = ruff.stdout
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = parser.parse_args()
    stale = 0
    for target, text in generate().items():
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
