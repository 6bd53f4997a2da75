"""What a kernel image is, read from its bytes: its format, the kernels and the module variables it defines
(foundry.storage stores and reads the image files themselves).

The scan readers are strict and never raise: anything they cannot read with certainty (a fatbin entry
that cannot be decompressed, an ELF file without a symbol table) is reported as "not known", never
guessed. ``foundry verify`` uses them to check that every kernel a graph launches is in the image its
function table names, and that the variables a graph carries are the image's; SAVE enumerates the
variables of every image a saved graph uses with ``module_variables``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from foundry.records.layout import FATBIN_HEADER

from .elf import STT_OBJECT, Section, Symbol, elf_code_relocations, elf_sections, elf_symbols
from .fatbin import FatbinKind, fatbin_entries, fatbin_header
from .kparams import KernelParams, elf_kernel_params

__all__ = [
    "ImageFormat",
    "KernelNames",
    "ModuleVariables",
    "VariableDecl",
    "detect_format",
    "kernel_names",
    "module_variables",
    "scan_image",
]


class ImageFormat(str, Enum):
    """Kind of a kernel image file, as the manifest names it."""

    FATBIN = "fatbin"
    ELF = "elf"
    PTX = "ptx"


_PTX_ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$%][\w$]*)")
# A module-scope variable definition: directives, the state space, what lies between it and the name
# (attributes, alignment, vector width, type), the name, array dimensions, then "=" or ";".
_PTX_VARIABLE = re.compile(
    rb"^[ \t]*((?:\.(?:visible|weak|extern|common)[ \t]+)*)\.(global|const)[ \t]+([^;=\n]*?)"
    rb"([A-Za-z_$][\w$]*)[ \t]*((?:\[[ \t]*\d*[ \t]*\][ \t]*)*)(?:=|;)",
    re.M,
)
_PTX_DECLARATOR = re.compile(rb"([A-Za-z_$][\w$]*)[ \t]*((?:\[[ \t]*\d*[ \t]*\][ \t]*)*)[ \t]*$")
_PTX_TYPE_BYTES = {
    b"b8": 1, b"u8": 1, b"s8": 1, b"b16": 2, b"u16": 2, b"s16": 2, b"f16": 2, b"bf16": 2,
    b"b32": 4, b"u32": 4, b"s32": 4, b"f32": 4, b"f16x2": 4, b"bf16x2": 4,
    b"b64": 8, b"u64": 8, b"s64": 8, b"f64": 8, b"b128": 16,
}  # fmt: skip
_PTX_HANDLES = (b".texref", b".samplerref", b".surfref")  # opaque handles, not memory the host can copy
_ELF_VARIABLE_SECTION = re.compile(r"\.nv\.(?:global(?:\.init)?|constant([0-9]+)|managed.*)")
_SHN_LORESERVE = 0xFF00
_STO_CUDA_MANAGED = 0x4


@dataclass(frozen=True, slots=True)
class KernelNames:
    """Kernel names an image defines. ``complete`` is False when part of the image could not be read
    (then a name missing from ``names`` may still be in it). ``params``: each kernel's parameter list as its
    ELF code states it (kparams.py), None where it cannot be read or two entries disagree; a kernel only
    PTX defines is not in it (its layout is the driver's to compile)."""

    names: frozenset[str]
    complete: bool
    params: Mapping[str, KernelParams | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class VariableDecl:
    """A module variable an image defines (``__device__``, ``__constant__``, ``__managed__``): its state
    space (``"global"``, ``"constant"`` or ``"managed"``), the sizes in bytes its definitions give (one
    per distinct size over a fatbin's entries; empty for a PTX definition whose size is not written out),
    and ``code_words``: the byte offsets, from its start, of the 8-byte words every load fills with an
    address of its own code (a relocation to a function: a table of device function pointers), over all
    entries read."""

    name: str
    space: str
    sizes: frozenset[int]
    code_words: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class ModuleVariables:
    """The module variables an image defines, by name. ``complete`` is False when part of the image could
    not be read (``problem`` says which and why): then it may define variables that ``variables`` lacks."""

    variables: dict[str, VariableDecl]
    complete: bool
    problem: str | None = None


def detect_format(data: bytes) -> ImageFormat | None:
    """The format of an image file as the driver would take it: a fatbin (exactly as long as its header
    says), an ELF file, or NUL-terminated PTX text; None for anything else."""
    fatbin = fatbin_header(data)
    if fatbin is not None:
        size = fatbin.header_size + fatbin.fat_size
        return ImageFormat.FATBIN if fatbin.header_size >= FATBIN_HEADER.size and size == len(data) else None
    if data[:4] == b"\x7fELF":
        return ImageFormat.ELF
    if data.endswith(b"\0") and len(data) > 1:
        head = data[: min(256, len(data) - 1)]
        if all(c in (9, 10, 11, 12, 13) or 0x20 <= c <= 0x7E for c in head):
            return ImageFormat.PTX
    return None


def kernel_names(data: bytes, fmt: ImageFormat) -> KernelNames:
    """The kernels image ``data`` of format ``fmt`` defines: ELF symbol names, PTX ``.entry`` names, and
    those of every fatbin entry (compressed ones decompressed)."""
    return scan_image(data, fmt)[0]


def module_variables(
    data: bytes | memoryview, fmt: ImageFormat, device: tuple[int, int] | None = None
) -> ModuleVariables:
    """The module variables image ``data`` of format ``fmt`` defines, read from the image itself: ELF
    ``STT_OBJECT`` symbols in ``.nv.global``, ``.nv.global.init``, ``.nv.constant<N>`` (N >= 1: bank 0
    holds kernel parameters) and ``.nv.managed*`` sections; PTX module-scope ``.global`` and ``.const``
    definitions; every entry of a fatbin (compressed ones decompressed).

    With ``device`` (its compute capability), only the fatbin entries the driver could load on it are read:
    SASS of its major version and no newer minor one, PTX of no newer version, entries whose architecture
    is not stated. A variable the code loaded for the device defines is in one of them; the others (a
    wheel carries a dozen architectures, each entry compressed) are neither decompressed nor parsed."""
    keep = None if device is None else _loadable_on(device)
    return _scan(data, fmt, keep, names=False)[1]


def scan_image(data: bytes | memoryview, fmt: ImageFormat) -> tuple[KernelNames, ModuleVariables]:
    """``kernel_names`` and ``module_variables`` of one image, its fatbin entries decompressed once."""
    return _scan(data, fmt, None, names=True)


def _loadable_on(device: tuple[int, int]) -> Callable[[int, int], bool]:
    major, minor = device
    version = major * 10 + minor

    def keep(kind: int, arch: int) -> bool:
        if not arch:
            return True
        if kind == FatbinKind.PTX:
            return arch <= version
        return arch // 10 == major and arch % 10 <= minor

    return keep


def _scan(
    data: bytes | memoryview, fmt: ImageFormat, keep: Callable[[int, int], bool] | None, names: bool
) -> tuple[KernelNames, ModuleVariables]:
    """Kernel names (when ``names``; else none are read) and module variables of an image, of the fatbin
    entries ``keep`` accepts (all without it)."""
    parts, problems = _parts(data, fmt, keep)
    kernels: set[str] = set()
    params: dict[str, KernelParams | None] = {}
    variables: dict[str, VariableDecl] = {}
    for i, (kind, payload) in enumerate(parts):
        if kind == FatbinKind.PTX:
            text = payload if isinstance(payload, bytes) else bytes(payload)
            if names:
                kernels |= _ptx_entries(text)
            part = _ptx_variables(text)
        else:
            sections = elf_sections(payload)
            spaces = None if sections is None else _variable_sections(sections)
            if sections is not None and spaces is not None and not spaces and not names:
                continue  # no section that holds variables: no symbol to read
            wanted = None if names or spaces is None else frozenset(spaces)
            symbols = None if sections is None else elf_symbols(payload, sections, wanted)
            code = None if sections is None or spaces is None else elf_code_relocations(
                payload, sections, frozenset(spaces))  # fmt: skip
            if sections is None or spaces is None or symbols is None or code is None:
                problems.append(f"{'the ELF image' if fmt == ImageFormat.ELF else f'ELF part {i}'} has no readable "
                                "symbol or relocation table")  # fmt: skip
                continue
            if names:
                kernels.update(s.name for s in symbols if s.name)
                for kernel, layout in elf_kernel_params(payload, sections).items():
                    params[kernel] = layout if params.get(kernel, layout) == layout else None
            part = _elf_variables(spaces, symbols, code)
        for name, decl in part.items():
            seen = variables.get(name)
            variables[name] = (
                decl
                if seen is None
                else VariableDecl(name, seen.space, seen.sizes | decl.sizes, seen.code_words | decl.code_words)
            )
    problem = "; ".join(problems) or None
    return KernelNames(frozenset(kernels), not problems, params), ModuleVariables(variables, not problems, problem)


def _parts(
    data: bytes | memoryview, fmt: ImageFormat, keep: Callable[[int, int], bool] | None
) -> tuple[list[tuple[int, bytes | memoryview]], list[str]]:
    """The PTX and ELF parts of an image as (FatbinKind.PTX or FatbinKind.ELF, bytes), and what could
    not be read."""
    if fmt == ImageFormat.PTX:
        return [(FatbinKind.PTX, bytes(data))], []
    if fmt == ImageFormat.ELF:
        return [(FatbinKind.ELF, data)], []
    if fatbin_header(data) is None:
        return [], ["not a fatbin"]
    entries, stopped = fatbin_entries(data, keep)
    parts: list[tuple[int, bytes | memoryview]] = []
    problems = [stopped] if stopped else []
    for i, entry in enumerate(entries):
        if entry.payload is None:
            problems.append(entry.problem or f"fatbin entry {i} cannot be read")
        elif entry.kind == FatbinKind.PTX:
            parts.append((FatbinKind.PTX, entry.payload))
        elif entry.payload[:4] == b"\x7fELF":
            parts.append((FatbinKind.ELF, entry.payload))
        else:
            problems.append(f"fatbin entry {i} (kind {entry.kind}, sm_{entry.sm_arch}) is neither PTX nor ELF")
    return parts, problems


def _ptx_entries(data: bytes) -> frozenset[str]:
    return frozenset(m.group(1).decode("ascii", "replace") for m in _PTX_ENTRY.finditer(data))


def _variable_sections(sections: list[Section]) -> dict[int, str] | None:
    """Section index -> the state space of its variables, for the sections that hold module variables."""
    spaces: dict[int, str] = {}
    for sec in sections:
        m = _ELF_VARIABLE_SECTION.fullmatch(sec.name)
        if m is None or (m.group(1) is not None and int(m.group(1)) == 0):
            continue  # bank 0: the kernels' parameters, never a variable
        spaces[sec.index] = "constant" if m.group(1) else "managed" if sec.name.startswith(".nv.managed") else "global"
    return spaces


def _elf_variables(
    spaces: dict[int, str], symbols: list[Symbol], code: Mapping[int, frozenset[int]]
) -> dict[str, VariableDecl]:
    found: dict[str, VariableDecl] = {}
    for sym in symbols:
        space = spaces.get(sym.shndx) if sym.type == STT_OBJECT and 0 < sym.shndx < _SHN_LORESERVE else None
        if space is None or not sym.name or sym.name.startswith("$") or sym.size == 0:
            continue  # "$str": a string literal the compiler placed there, not a variable anyone names
        if sym.other & _STO_CUDA_MANAGED:
            space = "managed"
        words = frozenset(
            at - sym.value for at in code.get(sym.shndx, ()) if sym.value <= at and at + 8 <= sym.value + sym.size
        )
        seen = found.get(sym.name)
        sizes = frozenset({sym.size}) | (seen.sizes if seen else frozenset())
        found[sym.name] = VariableDecl(sym.name, space, sizes, words | (seen.code_words if seen else frozenset()))
    return found


def _ptx_variables(data: bytes) -> dict[str, VariableDecl]:
    found: dict[str, VariableDecl] = {}
    for m in _PTX_VARIABLE.finditer(data):
        directives, space, middle, name, dims = m.group(1), m.group(2), m.group(3), m.group(4), m.group(5)
        if b".extern" in directives or any(h in middle for h in _PTX_HANDLES) or name.startswith(b"$"):
            continue
        kind = "managed" if b".managed" in middle else "constant" if space == b"const" else "global"
        # ".global .u32 a, b[4];" defines several: the names before the last are at the end of `middle`.
        head, _, others = middle.partition(b",")
        declarators = [(name, dims)]
        if b"," in middle:
            first = _PTX_DECLARATOR.search(head)
            rest = [_PTX_DECLARATOR.fullmatch(d.strip()) for d in others.split(b",") if d.strip()]
            if first is None or any(r is None for r in rest):
                continue
            declarators = [
                (first.group(1), first.group(2)),
                *((r.group(1), r.group(2)) for r in rest if r),
                *declarators,
            ]
            middle = head[: first.start()]
        for declared, shape in declarators:
            size = _ptx_size(middle, shape)
            text = declared.decode("ascii", "replace")
            seen = found.get(text)
            sizes = (frozenset() if size is None else frozenset({size})) | (seen.sizes if seen else frozenset())
            found[text] = VariableDecl(text, kind, sizes)
    return found


def _ptx_size(middle: bytes, dims: bytes) -> int | None:
    """Bytes of a PTX variable from its type, vector width and array dimensions; None when one of them
    is not written out (``[]`` sized by its initializer, a type not in the table)."""
    words = re.findall(rb"\.(\w+)", middle)
    unit = next((_PTX_TYPE_BYTES[w] for w in words if w in _PTX_TYPE_BYTES), None)
    if unit is None:
        return None
    for w in words:
        if w in (b"v2", b"v4", b"v8"):
            unit *= int(w[1:])
    for d in re.findall(rb"\[\s*(\d*)\s*\]", dims):
        if not d:
            return None
        unit *= int(d)
    return unit
