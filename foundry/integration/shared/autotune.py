"""Inductor's kernel choices by timing, made once: SAVE records them, LOAD makes the same ones without timing.

Inductor compiles a fused kernel with several launch configurations where it cannot tell the fastest ahead
(reductions above all: block sizes, warps), and at the kernel's first launch in a process it times them and keeps
the fastest (``CachingAutotuner.autotune_to_one_config`` in ``torch/_inductor/runtime/triton_heuristics.py``). A
reduction sums in another order under another configuration, so the choice moves the last bits of what the model
computes, and timing noise makes it a choice per process: five vLLM processes of one Gemma2 shape, same flags and
same compile cache, answered in four different ways, and their fingerprints, call by call, show every difference
arising in Inductor's kernels, none in an attention or a cuBLAS product given the same input (H200, b776e7e;
docs/DESIGN.md, "What identical to native is measured against").

The graphs SAVE captures hold SAVE's choices. What runs outside them under LOAD (prefills above the largest
captured size, vLLM's eager steps) would run LOAD's own. So SAVE records each kernel's choice, keyed by the
kernel's source hash (the name of its generated file, the same in every process that loads the same compiled
model) and the autotuner's place among that kernel's (a kernel two graphs call has two, which time apart: in the
Gemma2 row one such pair kept different configurations), and LOAD, when that autotuner would time its
configurations, takes SAVE's among them instead, timing none.
LOAD then computes what SAVE computed in every step, graph or not, and skips the timing. A kernel SAVE did not
record, or whose recorded configuration is not among its own, is timed as natively, and LOAD says which.

What is recorded is data: block sizes, warps and stages, matched against the configurations the kernel itself
offers; nothing read selects code to run.

Inductor keeps its own record of a choice, a ``.best_config`` file beside the kernel's generated file (its local
autotune cache, ``AutotuneCache.read_best`` in ``torch/_inductor/runtime/autotune_cache.py``), and a kernel that
finds one there is made with that configuration alone and times nothing. Under vLLM that file lies in the compile
cache every later process of the same model loads, and any of them may write it. SAVE and LOAD do not read it: a
SAVE that read a choice another process had timed recorded nothing for that kernel, and a LOAD that read one
written after SAVE ran another configuration than SAVE's graphs hold (2x H200, 8043097: SAVE with the compile cache
warm recorded no choice, its LOAD timed four of its own, and two LOADs that timed none answered unlike SAVE; a SAVE
that compiled cold recorded 8 choices, its LOAD took 4, timed none, by the counts read the rest from those files,
and answered unlike SAVE). So SAVE times every kernel of several configurations it runs, as a process with an
empty cache does, and LOAD takes SAVE's choice for each. What they write into that cache is left as Inductor
writes it (H200, 778a5c9: a SAVE compiling cold, its LOAD and LOAD again then answered alike).
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from .engine import Engine
from .errors import ArchiveMetadataError
from .hooks import when_imported, wrap

__all__ = ["CACHE_MODULE", "MODULE", "Choice", "KernelChoices", "Replay", "after_record", "cache_reads_declined",
           "forget", "missing", "natives_note", "record", "recorded", "replay"]  # fmt: skip

log = logging.getLogger(__name__)

MODULE = "torch._inductor.runtime.triton_heuristics"
CACHE_MODULE = "torch._inductor.runtime.autotune_cache"  # Inductor's local autotune cache: read by neither
MOST = 100_000  # kernels an archive may name: far above any model's (a few hundred), bounded all the same
_KEY = re.compile(r"[0-9A-Za-z_.-]{1,128}")
_CONFIG_NAME = re.compile(r"[A-Za-z_][0-9A-Za-z_]{0,63}")


@dataclass(frozen=True)
class Choice:
    """One kernel's configuration: its block sizes (``XBLOCK``, ``R0_BLOCK``, ...), warps and stages."""

    blocks: tuple[tuple[str, int], ...]
    num_warps: int
    num_stages: int

    @classmethod
    def of(cls, config: Any) -> Choice:
        """The choice a Triton ``Config`` makes (its integer keyword arguments: the block sizes)."""
        kwargs = getattr(config, "kwargs", {}) or {}
        blocks = tuple(sorted((str(k), int(v)) for k, v in kwargs.items() if type(v) is int))
        return cls(blocks, int(getattr(config, "num_warps", 0)), int(getattr(config, "num_stages", 0)))


Chosen = tuple[str, Choice]  # (kernel name, its configuration)


@dataclass(frozen=True)
class KernelChoices:
    """SAVE's choices: kernel key (its generated file's name, a hash of its source) -> one (kernel name, choice) per
    autotuner of that source, in the order they first timed.

    One generated kernel can have several autotuners in a process: each compiled graph that calls it makes its own
    (vLLM's first and last pieces share the norm of the pieces between them, say), and each times on its first
    launch, so two may keep different configurations. Graphs run in the same order in every process, so the
    autotuners of one kernel first time in the same order too: the N-th to time under LOAD takes the choice of the
    N-th in SAVE."""

    kernels: Mapping[str, tuple[Chosen, ...]] = field(default_factory=dict)

    def count(self) -> int:
        """How many autotuners chose (each kernel's autotuners counted apart)."""
        return sum(len(chosen) for chosen in self.kernels.values())

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {"kernel": key, "instance": i, "name": name, "blocks": dict(c.blocks), "num_warps": c.num_warps,
             "num_stages": c.num_stages}
            for key, chosen in sorted(self.kernels.items())
            for i, (name, c) in enumerate(chosen)
        ]  # fmt: skip

    @classmethod
    def from_json(cls, doc: Any) -> KernelChoices:
        """Reads what ``to_json`` wrote (None: an archive written before choices were recorded, which has none; an
        entry without ``instance``, as first written: the kernel's first autotuner); anything else is refused by
        name."""
        if doc is None:
            return cls()
        if not isinstance(doc, list) or len(doc) > MOST:
            raise _bad(f"is not a list of at most {MOST} kernels")
        found: dict[str, dict[int, Chosen]] = {}
        for entry in doc:
            problem = _entry_problem(entry)
            instance = entry.get("instance", 0) if problem is None else 0
            if problem is None and instance in found.get(entry["kernel"], {}):
                problem = "names its kernel twice"
            if problem:
                raise _bad(f"entry {str(entry)[:120]!r} {problem}")
            blocks = tuple(sorted((str(k), int(v)) for k, v in entry["blocks"].items()))
            chosen = (entry["name"], Choice(blocks, entry["num_warps"], entry["num_stages"]))
            found.setdefault(entry["kernel"], {})[instance] = chosen
        for key, by in found.items():
            if sorted(by) != list(range(len(by))):
                raise _bad(f"kernel {key!r} lists autotuners {sorted(by)[:8]}, not 0 to {len(by) - 1}")
        return cls({key: tuple(by[i] for i in range(len(by))) for key, by in found.items()})


_FIELDS = {"kernel", "name", "blocks", "num_warps", "num_stages"}


def _entry_problem(entry: Any) -> str | None:
    if not isinstance(entry, dict) or set(entry) - {"instance"} != _FIELDS:
        return "is not an object of kernel, instance, name, blocks, num_warps and num_stages"
    if "instance" in entry and not (type(entry["instance"]) is int and 0 <= entry["instance"] < MOST):
        return "has an instance that is not a count of the kernel's autotuners"
    if not isinstance(entry["kernel"], str) or not _KEY.fullmatch(entry["kernel"]):
        return "has a kernel key that is not a file name's hash"
    if not isinstance(entry["name"], str) or len(entry["name"]) > 200:
        return "has a name that is not a string of at most 200 characters"
    blocks = entry["blocks"]
    if not isinstance(blocks, dict) or len(blocks) > 8:
        return "has blocks that are not an object of at most 8 sizes"
    if not all(isinstance(k, str) and _CONFIG_NAME.fullmatch(k) and _count(v, 1 << 20) for k, v in blocks.items()):
        return "has a block size that is not a name and a positive integer"
    if not _count(entry["num_warps"], 64) or not _count(entry["num_stages"], 16):
        return "has warps or stages that are not small positive integers"
    return None


def _count(value: Any, most: int) -> bool:
    return type(value) is int and 0 < value <= most


def _bad(problem: str) -> ArchiveMetadataError:
    return ArchiveMetadataError(f"the archive's Inductor kernel choices: {problem}; the metadata was edited or "
                                "damaged. Run SAVE again.")  # fmt: skip


def _key(autotuner: Any) -> str | None:
    """The kernel's generated file's name (Inductor names it by a hash of its source, decorator included); where
    the autotuner was made without a file, a hash of the kernel function's source (the same in every process)."""
    key = getattr(autotuner, "kernel_hash", "") or ""
    if not key:
        source = getattr(getattr(autotuner, "fn", None), "src", None)
        key = "src-" + hashlib.sha256(source.encode()).hexdigest()[:48] if isinstance(source, str) and source else ""
    return key if _KEY.fullmatch(key) else None


def _name(autotuner: Any) -> str:
    meta = getattr(autotuner, "inductor_meta", None) or {}
    return str(meta.get("kernel_name") or getattr(getattr(autotuner, "fn", None), "__name__", "?"))[:200]


# ------------------------------------------------------------------------------------------------------ SAVE
_LOCK = threading.Lock()
_RECORDED: dict[str, list[Chosen]] = {}  # kernel key -> its autotuners' choices, in the order they first timed
_COUNTS: dict[str, int] = {}  # kernel key -> how many of its autotuners have timed in this process
# Set on an autotuner when it first times: its place among its kernel's. SAVE gives it once the autotuner has kept
# one configuration (``autotune_to_one_config``), LOAD when it would time them (``benchmark_all_configs``, which
# that method calls once, first thing). Inductor's other tuning (max-autotune, coordinate descent: vLLM turns them
# on for static compile sizes only, none by default) is neither recorded nor replayed.
_ORDINAL = "_foundry_autotuner_ordinal"


def _ordinal(autotuner: Any, key: str, counts: dict[str, int]) -> int | None:
    """This autotuner's place among its kernel's autotuners, in the order they first timed (given on its first
    timing, kept after); None where the autotuner takes no attribute (it is then treated as natively)."""
    ordinal = getattr(autotuner, _ORDINAL, None)
    if isinstance(ordinal, int):
        return ordinal
    ordinal = counts.get(key, 0)
    try:
        setattr(autotuner, _ORDINAL, ordinal)
    except (AttributeError, TypeError):
        return None
    counts[key] = ordinal + 1
    return ordinal


def record(engine: Engine) -> None:
    """SAVE, before the model first runs: every kernel's choice by timing is kept from now on (``recorded``), and
    no kernel takes one from Inductor's cache instead of timing."""
    when_imported(MODULE, lambda m: _wrap(m, "CachingAutotuner", "autotune_to_one_config", _recording, engine))
    _decline_cache(engine)


def _recording(original: Any) -> Any:
    def autotune_to_one_config(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        key, launchers = _key(self), getattr(self, "launchers", None) or []
        added = False
        if key is not None and len(launchers) == 1:
            with _LOCK:
                chosen = _RECORDED.setdefault(key, [])
                # an autotuner made to time again keeps its place and its first choice
                if getattr(self, _ORDINAL, None) is None and _ordinal(self, key, _COUNTS) is not None:
                    chosen.append((_name(self), Choice.of(launchers[0].config)))
                    added = True
        if added:
            _tell(_AFTER_RECORD[0])
        return result

    return autotune_to_one_config


_AFTER_RECORD: list[Callable[[], None] | None] = [None]


def after_record(callback: Callable[[], None] | None) -> None:
    """SAVE, once its archive is written: ``callback`` runs after each choice recorded from then on (a kernel
    first launched while serving), which the archive does not hold."""
    _AFTER_RECORD[0] = callback


def _tell(callback: Callable[[], None] | None) -> None:
    # On the thread that launches the kernel: what the callback reports must never stop the launch.
    if callback is None:
        return
    try:
        callback()
    except Exception as e:  # a report that cannot be written is logged; the kernel still runs
        log.warning("Foundry: the kernel choices' report could not be updated: %s", e)


def recorded() -> KernelChoices:
    """The choices made so far in this process."""
    with _LOCK:
        return KernelChoices({key: tuple(chosen) for key, chosen in _RECORDED.items() if chosen})


def natives_note(count: int, environ: Mapping[str, str]) -> str | None:
    """What SAVE tells the user when kernels chose by timing: LOAD replays SAVE's choices, but two native processes
    each time their own, so they can differ from each other (and from SAVE) in the last bits, unless Inductor's
    deterministic mode keeps it from timing where the choice moves numerics (torch 2.11: then native cold, native
    warm, SAVE and LOAD of the Gemma2 row answered alike, H200, docs/DESIGN.md)."""
    if count == 0 or environ.get("TORCHINDUCTOR_DETERMINISTIC") == "1":
        return None
    return (
        f"{count} Inductor kernel launch configurations were chosen by timing; LOAD takes SAVE's, so it computes "
        "what this process computed, but native processes choose their own and may differ from it in the last bits. "
        "Set TORCHINDUCTOR_DETERMINISTIC=1 in native, SAVE and LOAD alike to compare them bit for bit"
    )


# ------------------------------------------------------------------------------------------------------ LOAD
@dataclass
class Replay:
    """LOAD: SAVE's choices, and what happened to each autotuner that would have timed its configurations."""

    choices: KernelChoices
    replayed: int = 0
    timed: list[str] = field(default_factory=list)  # not recorded by SAVE: timed as natively
    unmatched: list[str] = field(default_factory=list)  # recorded, but not among the kernel's configurations
    counts: dict[str, int] = field(default_factory=dict)  # kernel key -> its autotuners that have timed so far
    # Runs after each autotuner that would have timed, once set (LOAD, once its graphs are installed: kernels
    # first launched while serving are reported too).
    on_change: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    def summary(self) -> dict[str, Any]:
        return {"replayed": self.replayed, "timed": sorted(self.timed)[:20], "timed_count": len(self.timed),
                "unmatched": sorted(self.unmatched)[:20], "unmatched_count": len(self.unmatched),
                "cache_reads_declined": cache_reads_declined()}  # fmt: skip


_REPLAY: Replay | None = None


def replay(choices: KernelChoices, engine: Engine) -> Replay:
    """LOAD, before the model first runs: each autotuner SAVE recorded takes SAVE's configuration when it would time
    them; returns the record of what happened (filled in as kernels first run)."""
    global _REPLAY
    _REPLAY = Replay(choices)
    when_imported(MODULE, lambda m: _wrap(m, "CachingAutotuner", "benchmark_all_configs", _replaying, engine))
    _decline_cache(engine)
    return _REPLAY


def _replaying(original: Any) -> Any:
    def benchmark_all_configs(self: Any, *args: Any, **kwargs: Any) -> Any:
        state, key = _REPLAY, _key(self)
        if state is None:
            return original(self, *args, **kwargs)
        launchers = list(getattr(self, "launchers", None) or [])
        with _LOCK:
            ordinal = _ordinal(self, key, state.counts) if key is not None else None
        recorded = state.choices.kernels.get(key, ()) if key is not None else ()
        label = _name(self) if not ordinal else f"{_name(self)} #{ordinal}"
        if ordinal is None or ordinal >= len(recorded):
            with _LOCK:
                state.timed.append(label)
            _tell(state.on_change)
            return original(self, *args, **kwargs)
        saved = recorded[ordinal][1]
        chosen = [launcher for launcher in launchers if Choice.of(launcher.config) == saved]
        if len(chosen) != 1:
            with _LOCK:
                state.unmatched.append(label)
            _tell(state.on_change)
            return original(self, *args, **kwargs)
        with _LOCK:
            state.replayed += 1
        _tell(state.on_change)
        # The timings Inductor keeps the least of: SAVE's configuration first, none of the others run.
        return {launcher: 0.0 if launcher is chosen[0] else float("inf") for launcher in launchers}

    return benchmark_all_configs


# ------------------------------------------------------------------------------------- Inductor's own cache
_DECLINED = [0]  # reads of Inductor's local autotune cache this process declined (a kernel then times, or replays)


def _decline_cache(engine: Engine) -> None:
    when_imported(CACHE_MODULE, lambda module: _wrap(module, "AutotuneCache", "read_best", _declining, engine))


def _declining(original: Any) -> Any:
    def read_best(self: Any, *args: Any, **kwargs: Any) -> Any:
        # None is the cache's own answer for a kernel it holds no choice for: Inductor then keeps every
        # configuration, and the kernel times them (SAVE) or takes SAVE's (LOAD) at its first launch.
        with _LOCK:
            _DECLINED[0] += 1
        return None

    return read_best


def cache_reads_declined() -> int:
    """How many kernels this process kept from taking a configuration out of Inductor's local autotune cache."""
    with _LOCK:
        return _DECLINED[0]


_MISSING: list[str] = []  # what this torch lacks of the autotuner: nothing recorded or replayed there


def forget() -> None:
    """Drops what this process recorded, replays and missed (tests: one Python process plays several engines)."""
    global _REPLAY
    with _LOCK:
        _RECORDED.clear()
        _COUNTS.clear()
        _MISSING.clear()
        _DECLINED[0] = 0
        _AFTER_RECORD[0] = None
        _REPLAY = None


def missing() -> list[str]:
    """The autotuner's methods this torch does not have (its kernels then choose by timing, as natively, or take
    Inductor's cached choice)."""
    return list(_MISSING)


def _wrap(module: ModuleType, cls: str, method: str, make: Any, engine: Engine) -> None:
    owner = getattr(module, cls, None)
    if owner is None or getattr(owner, method, None) is None:
        name = f"{module.__name__}.{cls}.{method}"
        if name not in _MISSING:  # SAVE and LOAD each ask for the cache's
            _MISSING.append(name)
        return
    wrap(owner, method, make, engine)
