"""Part of the ``kernels`` check of ``foundry verify``: each kernel node gives its kernel the parameters the
kernel takes, as the kernel's image states them (images/kparams.py: what cuFuncGetParamInfo reports). LOAD
holds every node to the driver's list before the driver sees it (csrc/codec_params.c) and refuses a node
that differs, since the driver would read past its arguments; this finds such a node without a GPU.

In kernelParams mode the node's table must be the kernel's list (count, offsets, sizes); an ``extra`` buffer
must reach into the last parameter (images/kparams.py ``params_reach``: a launcher may fill a trailing
argument storage only in part, as NCCL's kernels are launched). A kernel whose image holds only PTX (the driver lays its
parameters out when it compiles it), or whose metadata cannot be read with certainty, is not checked, and a
note says how many nodes that left; so is a kernel whose ELF code has no ``.nv.info.<kernel>`` section,
which ptxas writes for every kernel (only images made by other tools lack it).
"""

from __future__ import annotations

from collections.abc import Mapping

from foundry.images import ImageFormat, KernelParams, params_reach, params_span
from foundry.records import ArgMode, KernelNode, iter_nodes

from .findings import Findings, GraphUnderCheck, ImageInfo
from .report import Check, ProblemKind

__all__ = ["check_kernel_params", "note_unchecked"]

ALTERED = "The archive was altered or saved by another Foundry: run SAVE again"


def check_kernel_params(graph: GraphUnderCheck, images: Mapping[str, ImageInfo], found: Findings) -> tuple[int, int]:
    """Checks the kernel nodes of ``graph`` LOAD would build from its own files (a member: those its delta
    overrides; the others are its template's, checked with the template). Returns how many nodes were left
    unchecked because their image is PTX, and because their kernel's metadata cannot be read."""
    record = graph.effective
    if record is None:
        return 0, 0
    ptx = unreadable = 0
    for path, node in iter_nodes(record):
        if not isinstance(node, KernelNode) or (graph.delta is not None and path[0] not in graph.overridden):
            continue
        functions = graph.functions_at(path)
        if node.function_index >= len(functions):
            continue  # the files check reports the index
        fn = functions[node.function_index]
        info = images.get(fn.image)
        if info is None or not info.sound:
            continue  # the files check reports the image
        if info.detected == ImageFormat.PTX:
            ptx += 1
            continue
        if fn.name not in info.params:
            continue
        takes = info.params[fn.name]
        if takes is None:
            unreadable += 1
            continue
        problem = _mismatch(node, takes)
        if problem is not None:
            where = ("override of " if graph.delta is not None else "") + "kernel node " + " > ".join(map(str, path))
            found.add(
                Check.KERNELS,
                ProblemKind.MISMATCH,
                graph.json_path,
                f"{graph.label}: {where} (kernel {fn.name}): {problem}; LOAD refuses the node. {ALTERED}",
            )
    return ptx, unreadable


def note_unchecked(ptx: int, unreadable: int, found: Findings) -> None:
    """The note on kernel nodes ``check_kernel_params`` could not check, if any."""
    parts = []
    if ptx:
        parts.append(f"{ptx} whose image is PTX only (the driver lays its parameters out)")
    if unreadable:
        parts.append(f"{unreadable} whose kernel's parameter metadata in its image cannot be read with certainty")
    if parts:
        found.note(
            f"kernel nodes not checked against their kernels' parameters: {' and '.join(parts)}; LOAD checks "
            "them against the driver's list"
        )


def _mismatch(node: KernelNode, takes: KernelParams) -> str | None:
    if node.arg_mode == ArgMode.EXTRA:
        if len(node.args) >= params_reach(takes):
            return None
        return (
            f"its `extra` argument buffer holds {len(node.args)} bytes, but the kernel's {len(takes)} parameters "
            f"{_listed(takes)} (offset:size, as its image states them) span {params_span(takes)} and the buffer "
            "ends before the last of them begins"
        )
    if tuple(node.params) == takes:
        return None
    return (
        f"the kernel takes {len(takes)} parameters {_listed(takes)} (offset:size, as its image states them), the "
        f"record gives it {len(node.params)} {_listed(node.params)}"
    )


def _listed(params: KernelParams) -> str:
    shown = " ".join(f"{offset}:{size}" for offset, size in params[:8])
    return f"[{shown}{' ...' if len(params) > 8 else ''}]"
