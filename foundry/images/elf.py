"""The little of ELF64 (little-endian, as every CUDA cubin is) that reading kernel images needs: the
section table, the symbol tables, and where relocations put code addresses. Strict and bounded: a table
that does not fit the bytes makes the reader answer None, never guess, and nothing here raises for
malformed input.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["STT_FUNC", "STT_OBJECT", "Section", "Symbol", "elf_code_relocations", "elf_sections", "elf_symbols"]

SHT_SYMTAB = 2
SHT_RELA = 4
SHT_NOBITS = 8
SHT_REL = 9
SHF_EXECINSTR = 0x4
STT_OBJECT = 1
STT_FUNC = 2
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_REL = struct.Struct("<QQ")  # r_offset, r_info (SHT_RELA entries add an r_addend after them)


@dataclass(frozen=True, slots=True)
class Section:
    """One section header; ``name`` read from the section-name string table ("" when unreadable)."""

    index: int
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int

    @property
    def nobits(self) -> bool:
        return self.type == SHT_NOBITS


@dataclass(frozen=True, slots=True)
class Symbol:
    """One symbol table entry: ``type`` and ``bind`` split from ``st_info``; ``shndx`` its section."""

    name: str
    value: int
    size: int
    type: int
    bind: int
    other: int
    shndx: int


def elf_sections(data: bytes | memoryview) -> list[Section] | None:
    """The section table of an ELF64 little-endian file, or None when it is not one or its table (or
    a section's contents) does not fit the bytes."""
    n = len(data)
    if n < 64 or bytes(data[:4]) != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shnum == 0 or shentsize < _SHDR.size or shoff + shnum * shentsize > n:
        return None
    raw = [_SHDR.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    for _name, sh_type, _f, _a, off, size, *_ in raw:
        if sh_type != SHT_NOBITS and off + size > n:
            return None
    names = b""
    if shstrndx < shnum and raw[shstrndx][1] != SHT_NOBITS:
        off, size = raw[shstrndx][4], raw[shstrndx][5]
        names = bytes(data[off : off + size])
    return [Section(i, _cstr(names, r[0]), r[1], r[2], r[4], r[5], r[6], r[7], r[9]) for i, r in enumerate(raw)]


def elf_symbols(
    data: bytes | memoryview, sections: list[Section], in_sections: frozenset[int] | None = None
) -> list[Symbol] | None:
    """Every entry of every symbol table (SHT_SYMTAB) in the file, or None when it has none or one
    does not fit (its string table out of range, entries shorter than 24 bytes). With ``in_sections``,
    only the symbols defined in those sections (by index) are read: a kernel image has thousands of
    kernel symbols and a few variables."""
    out: list[Symbol] = []
    found = False
    for sec in sections:
        if sec.type != SHT_SYMTAB:
            continue
        if sec.link >= len(sections) or sections[sec.link].nobits:
            return None
        strtab = sections[sec.link]
        names = bytes(data[strtab.offset : strtab.offset + strtab.size])
        step = sec.entsize or _SYM.size
        if step < _SYM.size:
            return None
        found = True
        count = (sec.size - _SYM.size) // step + 1 if sec.size >= _SYM.size else 0
        if step == _SYM.size:
            rows = _SYM.iter_unpack(memoryview(data)[sec.offset : sec.offset + count * step])
        else:
            rows = (_SYM.unpack_from(data, sec.offset + k * step) for k in range(count))
        for name_at, info, other, shndx, value, size in rows:
            if in_sections is None or shndx in in_sections:
                out.append(Symbol(_cstr(names, name_at), value, size, info & 0xF, info >> 4, other, shndx))
    return out if found else None


def elf_code_relocations(
    data: bytes | memoryview, sections: list[Section], targets: frozenset[int]
) -> dict[int, frozenset[int]] | None:
    """For each section in ``targets`` (by index), the offsets in it of the relocations whose symbol is code:
    a function (STT_FUNC), or any symbol defined in an executable section (a section symbol plus an
    addend, as a linker may write for a local function). Those are words the loader fills with an address
    of this load's code, as nvlink writes a table of device function pointers (``__device__ fn_t const
    table[] = {f, g};``, NCCL's ``ncclDevFuncTable``) with R_CUDA_64 against the functions. None when a
    relocation table that names one of ``targets`` does not fit, or its symbol table does not."""
    out: dict[int, set[int]] = {}
    for sec in sections:
        if sec.type not in (SHT_REL, SHT_RELA) or sec.info not in targets:
            continue
        if sec.link >= len(sections) or sections[sec.link].type != SHT_SYMTAB or sec.nobits:
            return None
        symtab = sections[sec.link]
        step = sec.entsize or (_REL.size + (8 if sec.type == SHT_RELA else 0))
        if step < _REL.size:
            return None
        sym_step = symtab.entsize or _SYM.size
        if sym_step < _SYM.size:
            return None
        offsets = out.setdefault(sec.info, set())
        for k in range(sec.size // step):
            r_offset, r_info = _REL.unpack_from(data, sec.offset + k * step)
            symbol = r_info >> 32
            at = symtab.offset + symbol * sym_step
            if symbol == 0 or at + _SYM.size > symtab.offset + symtab.size:
                continue  # no symbol, or past the table: not a named function
            shndx = int.from_bytes(data[at + 6 : at + 8], "little")
            in_code = 0 < shndx < len(sections) and sections[shndx].flags & SHF_EXECINSTR
            if data[at + 4] & 0xF == STT_FUNC or in_code:  # st_info's type, st_shndx's section
                offsets.add(r_offset)
    return {index: frozenset(found) for index, found in out.items()}


def _cstr(table: bytes, at: int) -> str:
    """The NUL-terminated string at ``at`` of a string table ("" when out of range or unterminated)."""
    end = table.find(b"\0", at)
    if at <= 0 or end < 0:
        return ""
    return table[at:end].decode("utf-8", "replace")
