"""Kernel images the fake CUDA driver accepts, in the container layouts of real NVIDIA images.

* ``make_cubin``: an ELF64 cubin (e_machine 190 = EM_CUDA). As nvcc does, the section header table
  sits at the end of the file; with ``phdrs_last`` a program header table follows it, so the file's
  true end is only knowable from the ELF headers. ``variables`` (``Variable``) become module variables
  laid out as nvcc lays them out: ``STT_OBJECT`` symbols in ``.nv.global`` (no bits: zeros),
  ``.nv.global.init`` and ``.nv.constant3`` (initial bytes), pointer initializers as ``R_CUDA_64``
  relocations in ``.rela.<section>``.
* ``make_fatbin``: a fatbin container (csrc/include/format.h's layout) holding ELF and/or PTX entries.
* ``make_ptx``: NUL-terminated PTX text.
* ``fatbin_wrapper``: the 24-byte ``__fatBinC_Wrapper_t`` the CUDA runtime hands to the driver.

All integers are little-endian. The fatbin layout is format.h's (through foundry.records._layout).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from foundry.records._layout import (
    FATBIN_ENTRY,
    FATBIN_HEADER,
    FATBIN_MAGIC,
    FATBIN_WRAPPER,
    FATBIN_WRAPPER_MAGIC,
    FatbinEntry,
    FatbinHeader,
    FatbinKind,
    FatbinWrapper,
)

EM_CUDA = 190
FATBIN_VERSION = 1
FATBIN_KIND_PTX = FatbinKind.PTX
FATBIN_KIND_ELF = FatbinKind.ELF
WRAPPER_SIZE = FATBIN_WRAPPER.size

_SHT_PROGBITS = 1
_SHT_SYMTAB = 2
_SHT_STRTAB = 3
_SHT_RELA = 4
_SHT_NOBITS = 8
_SHF_WRITE = 0x1
_SHF_ALLOC = 0x2
_SHF_EXECINSTR = 0x4
_STB_LOCAL = 0
_STB_GLOBAL = 1
_STT_OBJECT = 1
_STT_FUNC = 2
R_CUDA_64 = 2
_STO_CUDA_ENTRY = 0x10
_PT_LOAD = 1
_EHDR_SIZE = 64
_SHDR_SIZE = 64
_PHDR_SIZE = 56
_SYM_SIZE = 24


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


class _StrTab:
    def __init__(self) -> None:
        self.data = bytearray(b"\0")
        self.index: dict[str, int] = {"": 0}

    def add(self, s: str) -> int:
        if s not in self.index:
            self.index[s] = len(self.data)
            self.data += s.encode() + b"\0"
        return self.index[s]


def _filler(name: str, n: int = 32) -> bytes:
    """Deterministic per-kernel "code" so that different kernels give different images."""
    out = b""
    seed = name.encode()
    while len(out) < n:
        seed = hashlib.sha256(seed).digest()
        out += seed
    return out[:n]


@dataclass(frozen=True)
class Variable:
    """A module variable of ``make_cubin``: ``space`` "global" (``__device__``, zeros), "init"
    (``__device__`` with an initializer) or "constant" (``__constant__``); ``init`` its first bytes (the
    rest zeros); ``pointer_to`` (name, addend): its first 8 bytes hold that variable's address plus the
    addend, set by the loader (a relocation), as ``__device__ int *p = &x[1];`` compiles; ``code_of``:
    kernels (of ``make_cubin``'s list) whose code addresses fill its first 8-byte words in that order, set
    by the loader, as nvlink writes a table of device function pointers (NCCL's ``ncclDevFuncTable``)."""

    name: str
    size: int
    space: str = "global"
    init: bytes = b""
    pointer_to: tuple[str, int] | None = None
    code_of: tuple[str, ...] = ()


_VARIABLE_SECTIONS = {"global": ".nv.global", "init": ".nv.global.init", "constant": ".nv.constant3"}


def make_cubin(
    kernels: list[str], payload: bytes = b"", phdrs_last: bool = False, variables: Sequence[Variable] = ()
) -> bytes:
    """An ELF64 cubin whose kernels are STT_FUNC / STB_GLOBAL symbols of ``.symtab``.

    Sections: null, .shstrtab, .strtab, .symtab, then one ``.text.<name>`` per kernel (or one
    ``.text`` when there are none) holding ``payload`` plus per-kernel filler bytes, then the sections
    of ``variables`` (each variable 8-byte aligned in its section, its STT_OBJECT / STB_LOCAL symbol
    listed before the kernels' in the order given). The section header table is placed at the end of
    the file; with ``phdrs_last`` a program header table (one PT_LOAD per text section) is placed after
    it.
    """
    shstr = _StrTab()
    strtab = _StrTab()
    texts: list[tuple[str, bytes]] = (
        [(f".text.{k}", payload + _filler(k)) for k in kernels] if kernels else [(".text", payload + _filler(""))]
    )
    # Variable sections (after the texts) and each variable's place: (section name, offset).
    layout: dict[str, bytearray] = {}
    place_of: dict[str, tuple[str, int]] = {}
    for v in variables:
        section = _VARIABLE_SECTIONS[v.space]
        data = layout.setdefault(section, bytearray())
        data.extend(bytes(_align(len(data), 8) - len(data)))
        place_of[v.name] = (section, len(data))
        data.extend((v.init + bytes(v.size))[: v.size] if v.space != "global" else bytes(v.size))
    var_sections = [name for name in _VARIABLE_SECTIONS.values() if name in layout]
    rela_for = [s for s in var_sections if any(
        (v.pointer_to or v.code_of) and place_of[v.name][0] == s for v in variables)]  # fmt: skip
    # Section indices: 0 null, 1 .shstrtab, 2 .strtab, 3 .symtab, 4.. text sections, then the variables'.
    first_var = 4 + len(texts)
    index_of = {name: first_var + i for i, name in enumerate(var_sections)}
    names = [".shstrtab", ".strtab", ".symtab"] + [t[0] for t in texts] + var_sections + [f".rela{s}" for s in rela_for]
    name_off = [0] + [shstr.add(n) for n in names]
    symtab = bytearray(_SYM_SIZE)  # null symbol
    symbol_of: dict[str, int] = {}
    for v in variables:
        section, offset = place_of[v.name]
        symbol_of[v.name] = len(symtab) // _SYM_SIZE
        st_info = (_STB_LOCAL << 4) | _STT_OBJECT
        symtab += struct.pack("<IBBHQQ", strtab.add(v.name), st_info, 0, index_of[section], offset, v.size)
    first_global = len(symtab) // _SYM_SIZE
    for i, k in enumerate(kernels):
        st_info = (_STB_GLOBAL << 4) | _STT_FUNC
        symtab += struct.pack("<IBBHQQ", strtab.add(k), st_info, _STO_CUDA_ENTRY, 4 + i, 0, len(texts[i][1]))

    body = bytearray(_EHDR_SIZE)
    # (type, flags, offset, size, link, info, addralign, entsize) per section, index 1..
    shdrs: list[tuple[int, int, int, int, int, int, int, int]] = []

    def place(data: bytes, align: int) -> int:
        body.extend(b"\0" * (_align(len(body), align) - len(body)))
        off = len(body)
        body.extend(data)
        return off

    off = place(bytes(shstr.data), 1)
    shdrs.append((_SHT_STRTAB, 0, off, len(shstr.data), 0, 0, 1, 0))
    off = place(bytes(strtab.data), 1)
    shdrs.append((_SHT_STRTAB, 0, off, len(strtab.data), 0, 0, 1, 0))
    off = place(bytes(symtab), 8)
    shdrs.append((_SHT_SYMTAB, 0, off, len(symtab), 2, first_global, 8, _SYM_SIZE))
    text_offsets: list[tuple[int, int]] = []
    for _, data in texts:
        off = place(data, 128)
        text_offsets.append((off, len(data)))
        shdrs.append((_SHT_PROGBITS, _SHF_ALLOC | _SHF_EXECINSTR, off, len(data), 3, 0, 128, 0))
    for section in var_sections:
        data = bytes(layout[section])
        if section == ".nv.global":  # no bits in the file: the loader zero-fills it
            shdrs.append((_SHT_NOBITS, _SHF_WRITE | _SHF_ALLOC, len(body), len(data), 0, 0, 8, 0))
        else:
            off = place(data, 8)
            shdrs.append((_SHT_PROGBITS, _SHF_WRITE | _SHF_ALLOC, off, len(data), 0, 0, 8, 0))
    for section in rela_for:
        rela = bytearray()
        for v in variables:
            if v.pointer_to and place_of[v.name][0] == section:
                target, addend = v.pointer_to
                info = (symbol_of[target] << 32) | R_CUDA_64
                rela += struct.pack("<QQq", place_of[v.name][1], info, addend)
            if v.code_of and place_of[v.name][0] == section:
                for slot, kernel in enumerate(v.code_of):
                    info = ((first_global + kernels.index(kernel)) << 32) | R_CUDA_64
                    rela += struct.pack("<QQq", place_of[v.name][1] + 8 * slot, info, 0)
        off = place(bytes(rela), 8)
        shdrs.append((_SHT_RELA, 0x40, off, len(rela), 3, index_of[section], 8, 24))

    shoff = _align(len(body), 8)
    body.extend(b"\0" * (shoff - len(body)))
    body += bytes(_SHDR_SIZE)  # null section
    for i, (typ, flags, o, size, link, info, align, entsize) in enumerate(shdrs):
        body += struct.pack("<IIQQQQIIQQ", name_off[i + 1], typ, flags, 0, o, size, link, info, align, entsize)
    shnum = len(shdrs) + 1

    phoff = 0
    phnum = 0
    if phdrs_last:
        phoff = len(body)
        for o, size in text_offsets:
            body += struct.pack("<IIQQQQQQ", _PT_LOAD, 5, o, 0, 0, size, size, 8)
        phnum = len(text_offsets)

    ident = b"\x7fELF" + bytes([2, 1, 1, 0x33, 7]) + bytes(7)  # ELF64, LE, v1, OSABI CUDA, ABI v7
    e_flags = (90 << 16) | 90  # sm_90 (the exact encoding is irrelevant to the fake)
    ehdr = ident + struct.pack(
        "<HHIQQQIHHHHHH",
        2,  # ET_EXEC
        EM_CUDA,
        1,
        0,  # e_entry
        phoff,
        shoff,
        e_flags,
        _EHDR_SIZE,
        _PHDR_SIZE if phnum else 0,
        phnum,
        _SHDR_SIZE,
        shnum,
        1,  # .shstrtab
    )
    body[:_EHDR_SIZE] = ehdr
    return bytes(body)


def make_ptx(kernels: list[str]) -> bytes:
    """PTX text (``.version 8.0``, ``.target sm_90``) with one ``.visible .entry`` per kernel."""
    lines = [".version 8.0", ".target sm_90", ".address_size 64", ""]
    for k in kernels:
        lines += [f".visible .entry {k}(", "\t.param .u64 p0", ")", "{", "\tret;", "}", ""]
    return "\n".join(lines).encode() + b"\0"


def make_fatbin(entries: list[tuple[str, bytes]]) -> bytes:
    """A fatbin of ``(kind, payload)`` entries, kind ``"elf"`` or ``"ptx"`` (or the ints 2 / 1).

    Layout: a ``fatbin_header``, then fat_size bytes of entries, each a ``fatbin_entry`` (its sizes and
    kind set, the rest zero) followed by the payload padded to 8. Image size = header_size + fat_size.
    """
    body = bytearray()
    for kind, payload in entries:
        k = {"ptx": FATBIN_KIND_PTX, "elf": FATBIN_KIND_ELF}.get(kind, kind) if isinstance(kind, str) else kind
        if k not in (FATBIN_KIND_PTX, FATBIN_KIND_ELF):
            raise ValueError(f"unknown fatbin entry kind {kind!r}")
        zero = FatbinEntry.unpack_from(bytes(FATBIN_ENTRY.size))
        body += zero._replace(kind=k, header_size=FATBIN_ENTRY.size, payload_size=len(payload)).pack()
        body += payload + bytes(_align(len(payload), 8) - len(payload))
    size = FATBIN_HEADER.size
    return FatbinHeader(magic=FATBIN_MAGIC, version=FATBIN_VERSION, header_size=size, fat_size=len(body)).pack() + body


def fatbin_wrapper(fatbin_address: int) -> bytes:
    """The ``__fatBinC_Wrapper_t`` of a fatbin at ``fatbin_address`` (version 1, no file name)."""
    return FatbinWrapper(magic=FATBIN_WRAPPER_MAGIC, version=1, data=fatbin_address, filename_or_fatbins=0).pack()


def image_size(data: bytes) -> int:
    """Size of the image at the start of ``data`` as the driver computes it (for test oracles)."""
    if data[:4] == b"\x7fELF":
        shoff: int = struct.unpack_from("<Q", data, 0x28)[0]
        phoff: int = struct.unpack_from("<Q", data, 0x20)[0]
        phnum: int = struct.unpack_from("<H", data, 0x38)[0]
        shnum: int = struct.unpack_from("<H", data, 0x3C)[0]
        sh_end = shoff + shnum * _SHDR_SIZE if shnum else 0
        ph_end = phoff + phnum * _PHDR_SIZE if phnum else 0
        end: int = max(_EHDR_SIZE, sh_end, ph_end)
        for i in range(shnum):
            _, typ, _, _, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * _SHDR_SIZE)
            if typ not in (0, 8):  # SHT_NULL, SHT_NOBITS
                end = max(end, off + size)
        return end
    fatbin = FatbinHeader.unpack_from(data)
    if fatbin.magic == FATBIN_MAGIC:
        return fatbin.header_size + fatbin.fat_size
    return data.index(b"\0") + 1
