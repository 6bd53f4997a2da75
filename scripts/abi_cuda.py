"""What scripts/gen_abi.py takes from cuda.h: where the header is, and the ctypes signature of a driver
entry point as cuda.h declares it.

The headers name what crosses from cuda.h into Python (``FDY_PYTHON_DRIVER_CALLS`` and the value lists in
csrc/include); the values come from the compiler, and the signatures from cuda.h's prototypes after the
C preprocessor (which also resolves the ``_v2`` renames). Typedefs are followed to one of: a pointer to
an opaque struct (a handle), an enum, or a C integer type.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import tempfile
from pathlib import Path

# C integer and pointer types -> ctypes
_SCALARS = {
    "int": "ctypes.c_int",
    "unsigned int": "ctypes.c_uint",
    "unsigned long long": "ctypes.c_uint64",
    "size_t": "ctypes.c_size_t",
    "char": "ctypes.c_char",
}


def cuda_include() -> Path:
    """The directory holding cuda.h: $FOUNDRY_CUDA_INCLUDE_DIR, the nvidia-cuda-runtime wheel (as the
    build finds it), $CUDA_HOME, /usr/local/cuda."""
    candidates = [Path(os.environ["FOUNDRY_CUDA_INCLUDE_DIR"])] if os.environ.get("FOUNDRY_CUDA_INCLUDE_DIR") else []
    spec = importlib.util.find_spec("nvidia")
    for loc in spec.submodule_search_locations if spec and spec.submodule_search_locations else ():
        candidates += [Path(loc) / "cu13" / "include", Path(loc) / "cuda_runtime" / "include"]
    if os.environ.get("CUDA_HOME"):
        candidates.append(Path(os.environ["CUDA_HOME"]) / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    for c in candidates:
        if (c / "cuda.h").is_file():
            return c
    raise SystemExit(
        "gen_abi: cuda.h not found (pip install 'nvidia-cuda-runtime==13.0.*', or set FOUNDRY_CUDA_INCLUDE_DIR): "
        "the CUDA values and driver signatures Python uses are generated from it"
    )


def preprocessed(cc: str) -> str:
    """cuda.h after the C preprocessor, whitespace collapsed."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "cuda_h.c"
        src.write_text("#include <cuda.h>\n")
        out = subprocess.run(
            [cc, "-E", "-P", "-I", str(cuda_include()), str(src)], check=True, capture_output=True, text=True
        ).stdout
    return " ".join(out.split())


class Typedefs:
    """The typedefs of preprocessed cuda.h, resolved to what ctypes needs."""

    def __init__(self, text: str) -> None:
        self.handles = set(re.findall(r"typedef struct \w+ ?\* ?(\w+) ?;", text))
        self.enums = set(re.findall(r"typedef enum \w* ?\{[^}]*\} ?(\w+) ?;", text))
        self.aliases = dict(
            (m.group(2), m.group(1).strip())
            for m in re.finditer(r"typedef ((?:unsigned |signed |const )*\w+(?: long)?) (\w+) ?;", text)
        )

    def base(self, name: str) -> str:
        """``name`` with aliases followed: a C scalar type, or a handle, enum or struct typedef name."""
        seen = 0
        while name in self.aliases and seen < 16:
            name, seen = self.aliases[name], seen + 1
        return name

    def ctypes_of(self, decl: str) -> str:
        """The ctypes type of one parameter declaration (its name removed)."""
        decl = re.sub(r"\bconst\b", "", decl).strip()
        depth = decl.count("*")
        base = self.base(" ".join(decl.replace("*", " ").split()))
        if base == "void":
            if depth == 0:
                raise ValueError(f"cuda.h: a parameter of type void ({decl})")
            return "ctypes.c_void_p" if depth == 1 else _pointer("ctypes.c_void_p", depth - 1)
        if base == "char" and depth >= 1:
            return _pointer("ctypes.c_char_p", depth - 1)
        if base in self.handles:
            return _pointer("ctypes.c_void_p", depth)
        if base in self.enums:
            return _pointer("ctypes.c_int", depth)
        if base in _SCALARS:
            return _pointer(_SCALARS[base], depth)
        if depth:  # a pointer to a struct the caller lays out (or passes as NULL)
            return _pointer("ctypes.c_void_p", depth - 1)
        raise ValueError(f"cuda.h: cannot map parameter type {decl!r} to ctypes")


def _pointer(base: str, depth: int) -> str:
    for _ in range(depth):
        base = f"ctypes.POINTER({base})"
    return base


def signature(text: str, typedefs: Typedefs, name: str) -> list[str]:
    """The ctypes argument types of driver entry point ``name`` (every one returns CUresult, an int)."""
    m = re.search(rf"\bCUresult {re.escape(name)} ?\(([^)]*)\) ?;", text)
    if m is None:
        raise SystemExit(f"gen_abi: cuda.h declares no entry point {name} returning CUresult")
    params = [p.strip() for p in m.group(1).split(",")]
    if params == ["void"]:
        return []
    return [typedefs.ctypes_of(re.sub(r"\s*\b\w+$", "", p)) for p in params]
