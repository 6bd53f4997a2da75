"""Reading the two headers for scripts/gen_abi.py: their declarations (``parse``), every value, size and
offset as the C compiler lays them out (``probe``), and the pieces both generated files share (the file
head, constants, enums, and the CUDA values the headers name)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from abi_cuda import cuda_include

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = ROOT / "csrc" / "include"
LAYOUT_KEY = re.compile(r"FDY_LAYOUT_(\d+)_(\d+)$")  # format.h's registry of record and delta layouts

INTS = {
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
    ctype: str  # a scalar type of INTS, or the name of a struct of the same header
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
        params = [] if params == ["void"] else [re.sub(r"\s*\b\w+$", "", p) if p not in INTS else p for p in params]
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


# ------------------------------------------------------------------ what both generated files hold
def camel(tag: str) -> str:
    return "".join(part.capitalize() for part in tag.removeprefix("fdy_").split("_"))


def common_prefix(names: list[str]) -> str:
    prefix = os.path.commonprefix(names)  # noqa: RUF071 - a prefix of names, not of paths
    return prefix[: prefix.rfind("_") + 1]


def value_text(name: str, raw: str, got: object) -> str:
    if raw.startswith('"'):
        assert isinstance(got, str)
        return repr(bytes.fromhex(got))
    if raw.startswith("{"):
        assert isinstance(got, list)
        return repr(tuple(got))
    return repr(got)


def head(header: str) -> list[str]:
    return [
        f'"""Generated from csrc/include/{header} by scripts/gen_abi.py: do not edit.',
        "",
        "Regenerate with `python scripts/gen_abi.py` after changing the header; CI checks that this file is",
        'what the header gives."""',
        "",
        "from __future__ import annotations",
        "",
    ]


def enums(h: Header, values: dict[str, object]) -> list[str]:
    out: list[str] = []
    for tag, members in h.enums:
        prefix = common_prefix(members)
        out += ["", "", f"class {camel(tag)}(IntEnum):", f'    """``enum {tag}``."""', ""]
        out += [f"    {m.removeprefix(prefix)} = {values[m]}" for m in members]
    return out


def constants(h: Header, values: dict[str, object]) -> list[str]:
    out = [""]
    for name, raw in h.defines:
        if LAYOUT_KEY.match(name):
            continue  # the layout registry: LAYOUT_DIGEST says which applies
        out.append(f"{name.removeprefix('FDY_')} = {value_text(name, raw, values[name])}")
    return out


TABLES = {"FDY_FUNC_ATTRS": "FuncAttrs"}
"""Value lists whose members a table stores as one int32 each, in list order: Python reads the table by name."""


def cuda_values(h: Header, values: dict[str, object]) -> list[str]:
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
