"""The eager steps between the segments of SGLang's breakable CUDA graphs.

SGLang's ``breakable`` backend (``runner_backend_utils/breakable_cuda_graph``) captures one forward as a
sequence of ``torch.cuda.CUDAGraph`` segments. A function decorated with ``eager_on_graph`` (attention:
``radix_attention.unified_attention_with_output``) ends the current segment when it is called during capture,
runs once eagerly, and starts the next segment; what replay must do in its place is kept as a closure,
``replay_fn``, over four cells: ``captured_inner`` (the undecorated function), ``captured_args`` and
``captured_kwargs`` (the call's arguments, tensors as non-owning views of the graph pool), and
``captured_output`` (what the call returned). ``BreakableCUDAGraph.replay`` replays segment 0, calls break 0,
replays segment 1, and so on. The attention step reads the batch from SGLang's forward context, which the
prefill runner sets at replay, so the arguments are all it carries.

SAVE describes each step as JSON: the function by a module attribute that holds it, and the arguments with
every tensor replaced by its index among the tensors of the step (which Foundry saves as the outputs of the
segment before it, so LOAD gets them back at SAVE's addresses). LOAD calls the function with the rebuilt
arguments. The function must be one the plugin lists (allowed.py), and the arguments ones it takes: SAVE
refuses any other step, and LOAD refuses a description naming any other before it imports anything (the
metadata's check at start-up does so before the GPU is touched; ``rebuild`` checks again). A step that
returns tensors is refused: its result lives in memory PyTorch's caching allocator handed out between two
segments, which nothing at LOAD would keep from being handed out again.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..shared.errors import ArchiveMetadataError, ArchiveMismatchError, PatchTargetError, UnsupportedConfigError
from .allowed import STEPS, allowed_name, step_problem
from .config import SGLANG

__all__ = ["Step", "describe", "rebuild"]

CELLS = ("captured_inner", "captured_args", "captured_kwargs", "captured_output")
PREFILL_OFF = (
    "decode graphs still work with prefill eager: start SGLang with --cuda-graph-backend-prefill disabled "
    "(Engine: cuda_graph_backend_prefill='disabled'), or use FOUNDRY_SGLANG_MODE=off"
)


def _cells(replay_fn: Any) -> dict[str, Any]:
    code = getattr(replay_fn, "__code__", None)
    closure = getattr(replay_fn, "__closure__", None) or ()
    names = getattr(code, "co_freevars", ())
    cells = {name: cell.cell_contents for name, cell in zip(names, closure, strict=False)}
    missing = [c for c in CELLS if c not in cells]
    if missing:
        raise PatchTargetError(
            f"a breakable CUDA graph's eager step is not the closure SGLang {SGLANG.version} makes (no {missing} among "
            f"{list(names)}): install SGLang {SGLANG.version}, or {PREFILL_OFF}"
        )
    return cells


def _module_attribute(fn: Any) -> str | None:
    """``module:attribute`` of an SGLang module attribute holding ``fn`` (its own module first)."""
    first = sys.modules.get(str(getattr(fn, "__module__", "")))
    modules = [first] if first is not None else []
    modules += [m for name, m in list(sys.modules.items()) if name.startswith("sglang.") and m is not first]
    for module in modules:
        for attribute, value in list(vars(module).items()):
            if value is fn:
                return f"{module.__name__}:{attribute}"
    return None


def _encode(value: Any, tensors: list[Any], where: str) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return {"v": value}
    if hasattr(value, "data_ptr"):
        if not getattr(value, "is_cuda", True):
            raise UnsupportedConfigError(
                f"{where} passes a tensor on {value.device}, which the Foundry adapter cannot carry to LOAD (it carries"
                f" device tensors at SAVE's addresses); {PREFILL_OFF}"
            )
        tensors.append(value)
        return {"t": len(tensors) - 1}
    if isinstance(value, tuple | list):
        return {type(value).__name__: [_encode(v, tensors, where) for v in value]}
    raise UnsupportedConfigError(
        f"{where} passes a {type(value).__name__}, which the Foundry adapter cannot carry to LOAD (it carries "
        f"tensors, numbers, strings, None, tuples and lists); {PREFILL_OFF}"
    )


def describe(replay_fn: Any, where: str, names: dict[int, str]) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """(the JSON description of one eager step, the tensors it reads and writes, in the order it names them).
    ``names`` caches function names by id across the steps of one SAVE."""
    cells = _cells(replay_fn)
    fn = cells["captured_inner"]
    label = getattr(fn, "__qualname__", repr(fn))
    if cells["captured_output"] is not None:
        raise UnsupportedConfigError(
            f"{where}: the eager step {label} returns a {type(cells['captured_output']).__name__}, kept in memory "
            f"allocated between two captured segments, which LOAD cannot keep reserved; {PREFILL_OFF}"
        )
    name = names.get(id(fn)) or allowed_name(fn)
    if name is None:
        found = _module_attribute(fn)
        if found is None:
            raise UnsupportedConfigError(
                f"{where}: the eager step {label} is no attribute of an SGLang module (a method of one model "
                f"object), which LOAD cannot find again; {PREFILL_OFF}"
            )
        raise UnsupportedConfigError(
            f"{where}: the eager step {found} is not one the Foundry adapter calls at LOAD (it calls only "
            f"{', '.join(sorted(STEPS))}, the attention step of SGLang {SGLANG.version}); {PREFILL_OFF}"
        )
    names[id(fn)] = name
    tensors: list[Any] = []
    args = [_encode(v, tensors, f"{where}, {label}") for v in cells["captured_args"]]
    kwargs = {str(k): _encode(v, tensors, f"{where}, {label}({k}=)") for k, v in cells["captured_kwargs"].items()}
    doc = {"fn": name, "args": args, "kwargs": kwargs}
    problem = step_problem(doc, len(tensors))
    if problem:  # what LOAD would refuse
        raise UnsupportedConfigError(
            f"{where}: the eager step {problem}, which the Foundry adapter does not carry to LOAD; {PREFILL_OFF}"
        )
    return doc, tuple(tensors)


@dataclass(frozen=True)
class Step:
    """One eager step at LOAD: SGLang's function, called with the tensors at SAVE's addresses."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def __call__(self) -> None:
        self.fn(*self.args, **self.kwargs)


def _decode(value: dict[str, Any], tensors: tuple[Any, ...]) -> Any:
    """An argument ``step_problem`` accepted: a tensor by index, or a value."""
    ((kind, item),) = value.items()
    return tensors[item] if kind == "t" else item


def rebuild(doc: Any, tensors: tuple[Any, ...], where: str) -> Step:
    """The step ``describe`` wrote, over ``tensors`` (the outputs of the segment before it, as loaded): its
    function, one the plugin lists (allowed.py), found by the list's own name, and its arguments, checked
    against what that function takes before anything is imported."""
    if not isinstance(doc, dict):
        raise ArchiveMetadataError(f"{where}: no eager step is described for this segment; run SAVE again")
    problem = step_problem(doc, len(tensors))
    if problem:
        raise ArchiveMetadataError(
            f"{where}: the eager step {problem}: the archive's metadata was edited or damaged. Run SAVE again."
        )
    name = next(n for n in STEPS if n == doc["fn"])  # the list's string: nothing of the archive is imported
    module_name, attribute = name.split(":", 1)
    try:
        fn = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError):
        fn = None
    if not callable(fn):
        raise ArchiveMismatchError(
            f"{where}: the eager step {name} SAVE recorded is not in this SGLang: the archive was saved with "
            "another SGLang. Start with SAVE's SGLang, or run SAVE again."
        )
    return Step(
        fn,
        tuple(_decode(v, tensors) for v in doc["args"]),
        {str(k): _decode(v, tensors) for k, v in doc["kwargs"].items()},
    )
