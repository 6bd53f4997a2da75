"""SAVE: the module variables a saved graph's kernels may read, carried to LOAD.

A kernel may read ``__constant__``, ``__device__`` and ``__managed__`` variables of its own image. LOAD
loads a fresh copy of the image, whose variables hold their initial values, so a value the program
wrote (from the host: cuModuleGetGlobal or cuLibraryGetGlobal and a copy, cudaMemcpyToSymbol, cupy's
``get_global``, a library's module init; or from device code during warm-up) would be lost and the
graph would replay on the initial values, silently. So for every image a graph uses, SAVE enumerates
the variables the image defines from its bytes (foundry.images.module_variables), reads each one in
this process and in a fresh load of the same bytes (cuLibraryLoadData, read, unload: once per image
and process), and carries every variable whose bytes differ: its bytes go to the archive's
content-addressed store (``memory/<sha256>.bin``), and the graph's image entry lists it
(docs/FORMAT.md, "Module variables").

A pointer initialized in the image (``__device__ int *p = &x;``, a relocation the loader applies) holds
each load's own address of ``x``: where the fresh load holds an address inside one of its variables and
this process the same place in its own copy, the bytes count as equal. A word the image's relocations fill
with a code address (a table of device function pointers: NCCL's ``ncclDevFuncTable``, which every NCCL
collective kernel calls through) holds each load's own code, which no driver call locates: such words are
the loader's and are not compared. Writing SAVE's copy of them into LOAD's image sent NCCL's kernels into
the SAVE process's code (an illegal address on two H200s), so a variable that holds them is never carried.

Refused, before anything is written (errors name the image, the variable and the next step):
``VariablesUnknownError`` for an image whose variables cannot be enumerated; ``ModuleAddressError`` for
a value to carry that holds the address of module memory of this process (meaningless in another);
``VariableConflictError`` for one image loaded several times with different values; ``ModuleAddressError``
also for a variable whose code words the loader sets and whose other bytes the program changed (LOAD
writes a variable whole).
"""

from __future__ import annotations

import bisect
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

from foundry import kernels
from foundry._state import ProcessState
from foundry.errors import DriverError, ModuleAddressError, SaveError, VariableConflictError, VariablesUnknownError
from foundry.images import ImageFormat, ModuleVariables, module_variables
from foundry.native.driver import library_load, library_unload
from foundry.schema import VariableRef
from foundry.timing import Phases

from .varread import Reads, Value, add, locate, read_located, refresh

__all__ = ["Carried", "carried_variables"]

_WORD = 8  # device addresses are 64-bit, stored aligned
_MAX_DECISIONS = 1024  # images' outcomes kept (an engine's graphs use a few hundred images)


@dataclass(frozen=True)
class _Decision:
    """One image's outcome for the bytes its loads held: the variables to carry (``refs``, sorted by name,
    and their ``values``), and every variable of this process's copy as sorted (start, end, name) with the
    starts apart, to find a module address in any graph's carried values."""

    refs: tuple[VariableRef, ...]
    values: tuple[tuple[str, Value], ...]
    ranges: tuple[tuple[int, int, str], ...]
    starts: tuple[int, ...]


@dataclass
class _Variables:
    """By image SHA-256: what its bytes say it defines, and its variables in a fresh load (read once:
    the image's bytes never change); by registry index, where a load's variables are and what they
    held at the last save (read again at every save: the program may write them between saves); the
    outcome for each image and the versions of its loads it was worked out for, most recent last."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    scans: dict[str, ModuleVariables] = field(default_factory=dict)
    fresh: dict[str, dict[str, Value]] = field(default_factory=dict)
    reads: Reads = field(default_factory=Reads)
    decisions: OrderedDict[tuple[object, ...], _Decision] = field(default_factory=OrderedDict)


_STATE = ProcessState("save.variables", _Variables)


@dataclass(frozen=True)
class Carried:
    """What a graph carries: by image SHA-256, the variables LOAD must write (sorted by name), and the
    bytes of each, by their SHA-256, for the archive's store."""

    variables: dict[str, tuple[VariableRef, ...]]
    blobs: dict[str, bytes]


def carried_variables(
    images: Mapping[str, Mapping[int, kernels.ImageRecord]],
    formats: Mapping[str, ImageFormat],
    device: tuple[int, int] | None = None,
    phases: Phases | None = None,
) -> Carried:
    """The variables to carry for a graph whose kernels come from ``images`` (image SHA-256 -> registry
    index -> record, of the loads they come from; ``formats`` each image's format; ``device`` the compute
    capability whose code the driver loaded: only that code's variables can be read). Reads device
    memory; writes nothing. ``phases`` gets the parts' times (``variables.read``, ``variables.decide``)
    and counters (``variables.*``).

    Every call reads every variable of every load again. What follows from an image's bytes (compared
    with a fresh load) is worked out once per image and versions of its loads, not per graph: graphs of
    other batch sizes launch kernels of other images (a GEMM library picks its kernels by shape), so
    their sets of images differ while each image's bytes stay the same. Only the values to carry are
    then checked for module addresses, against the variables of every image the graph uses."""
    with _span(phases, "variables.read"):
        for sha, records in images.items():
            _add_loads(sha, records, formats[sha], device)
        read = refresh(_STATE.get().reads, (index for records in images.values() for index in records), phases)
        live = {sha: _live(sha, records, read) for sha, records in images.items()}
    with _span(phases, "variables.decide"):
        decisions = {
            sha: _decision(sha, images[sha], formats[sha], device, values, versions, phases)
            for sha, (values, versions) in live.items()
        }
        blobs: dict[str, bytes] = {}
        for sha, decision in decisions.items():
            for ref, (name, value) in zip(decision.refs, decision.values, strict=True):
                _refuse_addresses(sha, name, value, decisions)
                blobs[ref.sha256] = value.data
    return Carried({sha: d.refs for sha, d in decisions.items()}, blobs)


def _decision(
    sha: str,
    records: Mapping[int, kernels.ImageRecord],
    fmt: ImageFormat,
    device: tuple[int, int] | None,
    values: dict[str, Value],
    versions: tuple[tuple[int, int], ...],
    phases: Phases | None,
) -> _Decision:
    """The image's outcome for the bytes its loads hold (``values``; the loads and their ``versions``):
    worked out once, then kept (the last ``_MAX_DECISIONS``)."""
    key = (device, sha, fmt, versions)
    state = _STATE.get()
    with state.lock:
        known = state.decisions.get(key)
        if known is not None:
            state.decisions.move_to_end(key)
    if known is not None:
        _count(phases, "variables.decisions_reused")
        return known
    fresh = _fresh(sha, *next(iter(records.items())), fmt, device) if values else {}
    declared = _scan(sha, *next(iter(records.items())), fmt, device).variables if values else {}
    code = {name: declared[name].code_words for name in values if name in declared and declared[name].code_words}
    carried = tuple(
        (name, values[name])
        for name in sorted(values)
        if _differs(values[name], fresh.get(name), values, fresh, code.get(name, frozenset()))
    )
    for name, _ in carried:
        if name in code:
            _refuse_code_words(sha, name, code[name])
    refs = tuple(VariableRef(name, len(v.data), hashlib.sha256(v.data).hexdigest()) for name, v in carried)
    ranges = tuple(sorted((v.address, v.address + len(v.data), name) for name, v in values.items()))
    decision = _Decision(refs, carried, ranges, tuple(r[0] for r in ranges))
    _count(phases, "variables.decisions_made")
    with state.lock:
        state.decisions[key] = decision
        while len(state.decisions) > _MAX_DECISIONS:
            state.decisions.popitem(last=False)
    return decision


def _span(phases: Phases | None, name: str) -> AbstractContextManager[None]:
    return nullcontext() if phases is None else phases.span(name)


def _count(phases: Phases | None, name: str, n: int = 1) -> None:
    if phases is not None:
        phases.count(name, n)


def _scan(
    sha: str, index: int, record: kernels.ImageRecord, fmt: ImageFormat, device: tuple[int, int] | None
) -> ModuleVariables:
    """What the image defines, read from its bytes once per process (they never change)."""
    state = _STATE.get()
    with state.lock:
        scan = state.scans.get(sha)
    if scan is None:
        scan = module_variables(kernels.image_bytes(index, record), fmt, device)
        with state.lock:
            state.scans[sha] = scan
    if not scan.complete:
        raise VariablesUnknownError(
            f"kernel image {sha} ({record.size} bytes), which a saved graph uses, cannot be "
            f"read whole, so SAVE cannot tell which module variables its kernels read: {scan.problem}. Install "
            "what the message names (the 'lz4' and 'zstandard' packages decompress fatbin entries) and save again.",
            image=sha,
        )
    return scan


def _add_loads(
    sha: str, records: Mapping[int, kernels.ImageRecord], fmt: ImageFormat, device: tuple[int, int] | None
) -> None:
    """Plans the reads of the image's loads that a graph's kernels come from, where not done before (a load's
    variables stay where they are while it is loaded)."""
    if not records:
        return
    reads = _STATE.get().reads
    scan = _scan(sha, *next(iter(records.items())), fmt, device)
    for index, record in records.items():
        if not record.loaded:
            raise SaveError(
                f"kernel image {sha} ({record.kind} {record.handle:#x}) was unloaded, but a saved graph launches its "
                "kernels: save the graph while the image is loaded"
            )
        with reads.lock:
            known = index in reads.readings
        if not known:
            add(reads, index, locate(record.handle, record.kind == "library", scan))


def _live(
    sha: str,
    records: Mapping[int, kernels.ImageRecord],
    read: Mapping[int, tuple[dict[str, Value], int]],
) -> tuple[dict[str, Value], tuple[tuple[int, int], ...]]:
    """The image's variables in this process, from each load the graph's kernels come from (which
    must agree: LOAD loads the image once), and (registry index, version) of each load's bytes, from what
    ``refresh`` read (``read``)."""
    out: dict[str, Value] = {}
    first: dict[str, int] = {}
    versions = []
    for index, record in records.items():
        values, version = read[index]
        versions.append((index, version))
        for name, value in values.items():
            seen = out.get(name)
            if seen is None:
                out[name], first[name] = value, record.handle
            elif seen.data != value.data:
                raise VariableConflictError(
                    f"kernel image {sha} is loaded twice ({first[name]:#x} and {record.handle:#x}) and the saved "
                    f"graph launches kernels of both, but module variable {name} holds different bytes in each; "
                    "LOAD loads an image once, so it can hold one of them. Load the image once, or write the "
                    "same value into both before capturing.",
                    image=sha,
                    variable=name,
                )
    return out, tuple(versions)


def _fresh(
    sha: str, index: int, record: kernels.ImageRecord, fmt: ImageFormat, device: tuple[int, int] | None
) -> dict[str, Value]:
    """The image's variables as a fresh load of its bytes holds them (the load is gone afterwards:
    its addresses only serve to recognize pointers into it)."""
    state = _STATE.get()
    with state.lock:
        cached = state.fresh.get(sha)
    if cached is not None:
        return cached
    scan = _scan(sha, index, record, fmt, device)
    try:
        handle = library_load(record.data)
    except DriverError as exc:
        raise VariablesUnknownError(
            f"kernel image {sha} ({record.size} bytes) defines module variables, but loading it a second time, to "
            f"read their initial values, failed ({exc}); SAVE cannot tell which of them the program changed. "
            "Report this with the image (foundry inspect lists it).",
            image=sha,
        ) from exc
    try:
        out = read_located(locate(handle, True, scan))
    finally:
        library_unload(handle)
    with state.lock:
        state.fresh[sha] = out
    return out


def _differs(
    value: Value,
    fresh: Value | None,
    live: Mapping[str, Value],
    loaded: Mapping[str, Value],
    code: frozenset[int] = frozenset(),
) -> bool:
    """Whether a fresh load would hold other bytes: compared word by word, where a word the fresh load
    (``loaded``) holds as an address inside one of its variables must be the same place in this
    process's copy (``live``) of that variable, and the words at ``code`` (byte offsets from the start:
    code addresses the loader sets in each load) are not compared."""
    if fresh is None:
        return True  # not in a fresh load at all: nothing there would hold the value
    if value.data == fresh.data:
        return False
    if len(value.data) != len(fresh.data) or value.address % _WORD != fresh.address % _WORD:
        return True
    data, initial = _without(value.data, code), _without(fresh.data, code)
    if data == initial:
        return False
    for start in range(-(value.address % _WORD), len(data), _WORD):
        lo, hi = max(start, 0), min(start + _WORD, len(data))
        if data[lo:hi] == initial[lo:hi]:
            continue
        if (lo, hi) != (start, start + _WORD):
            return True  # a partial word at either end differs
        moved = _translate(int.from_bytes(initial[lo:hi], "little"), loaded, live)
        if moved is None or moved != int.from_bytes(data[lo:hi], "little"):
            return True
    return False


def _without(data: bytes, code: frozenset[int]) -> bytes:
    """``data`` with the 8-byte words at ``code`` (byte offsets) zeroed."""
    if not code:
        return data
    out = bytearray(data)
    for at in code:
        out[at : at + _WORD] = bytes(len(out[at : at + _WORD]))
    return bytes(out)


def _refuse_code_words(sha: str, name: str, code: frozenset[int]) -> None:
    """Refuses to carry a variable that holds code addresses the loader sets (``code``: their byte offsets)."""
    first = min(code)
    raise ModuleAddressError(
        f"module variable {name} of kernel image {sha} holds {len(code)} code address(es) that every load of the "
        f"image sets to its own code (the first at byte offset {first}: a table of device function pointers), and "
        "the program changed other bytes of it. LOAD writes a carried variable whole, which would send those calls "
        "into this process's code. Keep the function-pointer table in a variable of its own, and the values the "
        "program writes in another.",
        image=sha,
        variable=name,
        offset=first,
    )


def _translate(address: int, loaded: Mapping[str, Value], live: Mapping[str, Value]) -> int | None:
    """The place in this process's copy of the variable that ``address`` points into in the fresh load
    (None: not an address of its variables)."""
    for name, v in loaded.items():
        if v.address <= address <= v.address + len(v.data) and name in live:
            return live[name].address + (address - v.address)
    return None


def _refuse_addresses(sha: str, name: str, value: Value, images: Mapping[str, _Decision]) -> None:
    """Refuses a value to carry that holds, in an aligned word, an address of a module variable of this
    process (of any image the graph uses: ``images``, each with its variables' ranges)."""
    data = value.data
    for start in range(-(value.address % _WORD) % _WORD, len(data) - _WORD + 1, _WORD):
        word = int.from_bytes(data[start : start + _WORD], "little")
        for image, decision in images.items():
            at = bisect.bisect_right(decision.starts, word) - 1
            if at < 0 or word > decision.ranges[at][1]:
                continue
            target = decision.ranges[at][2]
            where = "" if image == sha else f" of image {image}"
            raise ModuleAddressError(
                f"module variable {name} of kernel image {sha} holds at byte offset {start} the address "
                f"{word:#x}, inside module variable {target}{where} of this process. Module memory is placed "
                "anew in every process, so LOAD cannot carry that value. Keep the variable at its initial value "
                "(the image's own initializer is relocated by every load), or pass the address as a kernel "
                "argument, or put the pointed-to data in memory allocated inside the allocation region.",
                image=sha,
                variable=name,
                offset=start,
            )
