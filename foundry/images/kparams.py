"""The parameters each kernel of a CUDA ELF image (a cubin) takes, read from the image's own metadata: the
``.nv.info.<kernel>`` section's EIATTR_KPARAM_INFO records (attribute 0x17), and the EIATTR_KPARAM_INFO_V2
records (0x45) ptxas writes instead for a kernel whose parameters pass 4 KiB. It is the list the driver
reports with cuFuncGetParamInfo, which SAVE records in each kernel node and LOAD holds every node to; with
it ``foundry verify`` finds, without a GPU, a node LOAD would refuse.

NVIDIA documents neither record. Their layout here is the one ptxas writes (13.5: sm_80, sm_90, sm_100 and
sm_120 alike; nvcc's cubins of tests/fixtures/images too), which tests/fixtures/kparams/ holds with the PTX
it was made from: a section is a run of attributes, each a format byte (1: no value, 2: a byte, 3: a 16-bit
value, 4: a 16-bit length and that many bytes) and an attribute byte; a KPARAM_INFO value is u32 index,
u16 ordinal, u16 offset and a u32 whose top 14 bits are the size; a V2 value is u32 index, u16 ordinal,
u16 offset, u16 size and u16 flags. Strict, never raising: a section that does not parse, or ordinals that
are not 0 to n-1 once each, make the kernel's list "not known" (None), never guessed.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from .elf import Section

__all__ = ["KernelParams", "elf_kernel_params", "params_reach", "params_span"]

KernelParams = tuple[tuple[int, int], ...]
"""(offset, size) of each parameter in ordinal order, as cuFuncGetParamInfo reports them."""

_INFO_PREFIX = ".nv.info."
_NVAL, _BVAL, _HVAL, _SVAL = 1, 2, 3, 4
_KPARAM_INFO, _KPARAM_INFO_V2, _CBANK_PARAM_SIZE = 0x17, 0x45, 0x19
_V1 = struct.Struct("<IHHI")
_V2 = struct.Struct("<IHHHH")


def params_span(params: KernelParams) -> int:
    """The end of the last byte any parameter occupies."""
    return max((offset + size for offset, size in params), default=0)


def params_reach(params: KernelParams) -> int:
    """The shortest ``extra`` buffer a node may give the kernel: one byte into the parameter placed last (a
    launcher may fill a trailing argument storage only in part, as NCCL's kernels are launched), 0 without
    parameters. csrc/codec_params.c holds LOAD to the same rule."""
    return max((offset + 1 for offset, _ in params), default=0)


def elf_kernel_params(data: bytes | memoryview, sections: list[Section]) -> Mapping[str, KernelParams | None]:
    """Each kernel that has a ``.nv.info.<kernel>`` section, with its parameter list (None where the section
    cannot be read with certainty). A kernel without such a section is not in the result."""
    out: dict[str, KernelParams | None] = {}
    for sec in sections:
        if sec.name.startswith(_INFO_PREFIX) and not sec.nobits and len(sec.name) > len(_INFO_PREFIX):
            out[sec.name[len(_INFO_PREFIX) :]] = _section_params(bytes(data[sec.offset : sec.offset + sec.size]))
    return out


def _section_params(b: bytes) -> KernelParams | None:
    by_ordinal: dict[int, tuple[int, int]] = {}
    declared = 0  # EIATTR_CBANK_PARAM_SIZE: the parameters' bytes, where the section states it
    at = 0
    while at < len(b):
        if at + 4 > len(b):
            return None
        fmt, attr = b[at], b[at + 1]
        if fmt in (_NVAL, _BVAL, _HVAL):
            if fmt == _HVAL and attr == _CBANK_PARAM_SIZE:
                declared = int.from_bytes(b[at + 2 : at + 4], "little")
            at += 4
            continue
        if fmt != _SVAL:
            return None
        size = int.from_bytes(b[at + 2 : at + 4], "little")
        value = b[at + 4 : at + 4 + size]
        if len(value) != size:
            return None
        at += 4 + size
        if attr == _KPARAM_INFO and size == _V1.size:
            _, ordinal, offset, word = _V1.unpack(value)
            param = (offset, word >> 18)
        elif attr == _KPARAM_INFO_V2 and size == _V2.size:
            _, ordinal, offset, length, _ = _V2.unpack(value)
            param = (offset, length)
        elif attr in (_KPARAM_INFO, _KPARAM_INFO_V2):
            return None  # a record of a layout not known here
        else:
            continue
        if ordinal in by_ordinal:
            return None
        by_ordinal[ordinal] = param
    if sorted(by_ordinal) != list(range(len(by_ordinal))):
        return None
    params = tuple(by_ordinal[i] for i in range(len(by_ordinal)))
    if declared and params_span(params) != declared:
        return None  # the records do not account for the parameter bytes the section states
    return params
