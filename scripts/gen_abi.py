"""Generates the Python side of the C/Python contract from the headers that define it.

    csrc/include/foundry.h  ->  foundry/native/_abi.py    ABI version, error codes, enums, ctypes structs and
                                                          the driver values Python uses (cuda.h)
                            ->  foundry/native/_signatures.py  the signature of every exported function, and of
                                                          the driver entry points Python calls (cuda.h)
    csrc/include/format.h   ->  foundry/records/_layout.py record, delta and fatbin layouts (a NamedTuple per
                                                          struct), magics, versions, the layout digest, and
                                                          the CUDA values a record holds (cuda.h)
                            ->  foundry/records/_offsets.py each struct's size and (field, offset, format) rows

Names and types are read from the headers' text; every value, size and offset comes from the C compiler
(a probe program built against the headers and cuda.h prints them), so the generated files say what the
compiled library sees. What Python takes from cuda.h is named in the headers (X-macro lists such as
``FDY_NODE_TYPES`` and ``FDY_PYTHON_DRIVER_CALLS``), never typed: values from the compiler, driver signatures
from cuda.h's prototypes (scripts/abi_cuda.py). The headers are read by scripts/abi_headers.py, format.h's
structs laid out by scripts/abi_layout.py; this file writes _abi.py and _signatures.py and runs the whole. CI runs
``--check``: a header changed without regenerating, or a generated file edited by hand, fails it; so does a
record or delta layout that no version names (``FDY_LAYOUT_<record>_<delta>``).

    python scripts/gen_abi.py            write the four files
    python scripts/gen_abi.py --check    exit 1, with a diff, when any file is not what the headers give
"""

from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
from pathlib import Path
from typing import cast

from abi_cuda import Typedefs, preprocessed, signature
from abi_headers import (
    INCLUDE,
    INTS,
    ROOT,
    Field,
    Header,
    camel,
    compiler,
    constants,
    cuda_values,
    enums,
    head,
    parse,
    probe,
)
from abi_layout import LayoutError, emit_layout, emit_offsets, layout_problem

TARGETS = {
    "foundry.h": ROOT / "foundry" / "native" / "_abi.py",
    "format.h": ROOT / "foundry" / "records" / "_layout.py",
}
# The functions' signatures, apart from the values and structs they take; the structs' offset tables, apart from
# their named types: two files of one job each, per header.
SIGNATURES_TARGET = ROOT / "foundry" / "native" / "_signatures.py"
OFFSETS_TARGET = ROOT / "foundry" / "records" / "_offsets.py"


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
    """foundry/native/_abi.py: constants, enums, ctypes structs and their layouts."""
    out = [*head("foundry.h"), "import ctypes", "from enum import IntEnum"]
    out += constants(h, values)
    out += enums(h, values)
    out += cuda_values(h, values)
    for name, fields in h.structs:
        out += ["", "", f"class {camel(name)}(ctypes.Structure):", f'    """``{name}`` ({values[name]} bytes)."""', ""]
        out.append("    _fields_ = [")
        for f in fields:
            base = INTS[f.ctype][1] if f.ctype in INTS else camel(f.ctype)
            out.append(f'        ("{f.name}", {base if f.count is None else f"{base} * {f.count}"}),')
        out.append("    ]")
    out += [
        "",
        "",
        "# field -> (offset, size) of each struct, as the compiler lays it out",
        "OFFSETS: dict[str, dict[str, tuple[int, int]]] = {",
    ]
    for name, fields in h.structs:
        out.append(f'    "{camel(name)}": {{')
        for f in fields:
            off, size = cast("tuple[int, int]", values[f"{name}.{f.name}"])
            out.append(f'        "{f.name}": ({off}, {size}),')
        out.append("    },")
    out += ["}", "SIZES: dict[str, int] = {"]
    out += [f'    "{camel(name)}": {values[name]},' for name, _ in h.structs]
    out.append("}")
    return "\n".join(out) + "\n"


def emit_signatures(h: Header) -> str:
    """foundry/native/_signatures.py: the ctypes signature of every exported function (the structs they take from
    _abi.py) and of the driver entry points Python calls."""
    structs = dict(h.structs)
    rows = [
        f'    "{fname}": ({_ctypes_of(ret, structs)}, [{", ".join(_ctypes_of(q, structs) for q in params)}]),'
        for fname, ret, params in h.functions
    ]
    used = sorted(camel(name) for name in structs if re.search(rf"\b{camel(name)}\b", "\n".join(rows)))
    out = [*head("foundry.h"), "import ctypes", "from typing import Any", ""]
    if used:
        out.append(f"from ._abi import {', '.join(used)}")
    out += [
        "",
        "",
        "def _ptr(base: Any, depth: int) -> Any:",
        "    for _ in range(depth):",
        "        base = ctypes.POINTER(base)",
        "    return base",
        "",
        "",
        "# name -> (restype, argtypes) of every exported function",
        "SIGNATURES: dict[str, tuple[Any, list[Any]]] = {",
        *rows,
        "}",
    ]
    out += _driver_signatures(h)
    return "\n".join(out) + "\n"


def _ctypes_of(decl: str, structs: dict[str, list[Field]]) -> str:
    """The ctypes type of a C parameter or return type (char and uint8_t pointers are byte strings)."""
    decl = decl.replace("const ", "").strip()
    depth = decl.count("*")
    base = decl.replace("*", "").strip()
    if depth == 0:
        return "None" if base == "void" else INTS[base][1]
    if base == "void":
        return "ctypes.c_void_p" if depth == 1 else f"_ptr(ctypes.c_void_p, {depth - 1})"
    if base in ("char", "uint8_t") and depth == 1:
        return "ctypes.c_char_p"
    target = camel(base) if base in structs else INTS[base][1]
    return f"_ptr({target}, {depth})"


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
        texts = {target: emit_abi(h, values) if header == "foundry.h" else emit_layout(h, values)}
        if header == "foundry.h":
            texts[SIGNATURES_TARGET] = emit_signatures(h)
        else:
            texts[OFFSETS_TARGET] = emit_offsets(h, values)
        for path, text in texts.items():
            ruff = subprocess.run(
                [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(path), "-"],
                input=text, capture_output=True, text=True, check=True, cwd=ROOT,
            )  # fmt: skip
            result[path] = ruff.stdout
    return result


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
