"""The shape of what a graph hands back: an engine's graphs return a tensor, or a (nested) tuple or list of
tensors and Nones (vLLM's piecewise graphs do), and the code that runs after them indexes into exactly that
shape.

Foundry saves the tensors flat, in depth-first order (``foundry.CUDAGraph.save``'s ``output_tensors``);
the adapter keeps the shape beside them as JSON (``"tensor"``, ``null``, ``{"tuple": [...]}``,
``{"list": [...]}``) and rebuilds it over the loaded tensors.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .engine import Engine
from .errors import ArchiveMetadataError, UnsupportedConfigError

__all__ = ["MAX_DEPTH", "as_flat", "rebuild", "shape_of", "shape_problem", "tensor_count"]

TENSOR = "tensor"
MAX_DEPTH = 32  # tuples and lists in tuples and lists: engines return one or two levels


def shape_of(obj: Any, where: str, engine: Engine) -> Any:
    """The JSON shape of ``obj``. Anything but tensors, Nones, tuples and lists is refused, naming ``where``:
    LOAD could not hand it back; so is nesting deeper than ``MAX_DEPTH``, which LOAD refuses."""
    shape = _shape(obj, where, engine)
    if shape_problem(shape) is not None:
        raise UnsupportedConfigError(
            f"{where} returns tuples or lists nested more than {MAX_DEPTH} deep, which the Foundry adapter does not "
            f"hand back at LOAD: report this with the model's name, or use {engine.var('MODE')}=off"
        )
    return shape


def shape_problem(shape: Any) -> str | None:
    """Why ``shape`` is not one ``shape_of`` writes, or None. Iterative, so a document nested deeply fails
    here with a message rather than in a recursion."""
    stack = [(shape, 0)]
    while stack:
        item, depth = stack.pop()
        if item is None or (isinstance(item, str) and item == TENSOR):
            continue
        if isinstance(item, dict) and len(item) == 1:
            ((kind, items),) = item.items()
            if kind in ("tuple", "list") and isinstance(items, list):
                if depth >= MAX_DEPTH:
                    return f"nests tuples and lists more than {MAX_DEPTH} deep"
                stack.extend((x, depth + 1) for x in items)
                continue
        return f"holds {item!r:.80}, which is not {TENSOR!r}, null, or a tuple or list of them"
    return None


def tensor_count(shape: Any) -> int:
    """How many tensors a shape ``shape_problem`` accepts holds."""
    count, stack = 0, [shape]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(*item.values())
        elif item is not None:
            count += 1
    return count


def _shape(obj: Any, where: str, engine: Engine) -> Any:
    if obj is None:
        return None
    if hasattr(obj, "data_ptr"):
        return TENSOR
    if isinstance(obj, tuple):
        return {"tuple": [_shape(x, where, engine) for x in obj]}
    if isinstance(obj, list):
        return {"list": [_shape(x, where, engine) for x in obj]}
    raise UnsupportedConfigError(
        f"{where} returns a {type(obj).__name__}, which the Foundry adapter cannot hand back at LOAD (it keeps "
        f"tensors, tuples and lists of them): report this with the model's name, or use {engine.var('MODE')}=off"
    )


def as_flat(outputs: Any) -> list[Any]:
    """What ``foundry.CUDAGraph.finish_one_graph_load`` returned, as the flat list of tensors it stands for."""
    if outputs is None:
        return []
    if isinstance(outputs, list | tuple):
        return list(outputs)
    return [outputs]


def rebuild(shape: Any, tensors: list[Any], where: str) -> Any:
    """``shape`` filled with ``tensors`` in order; a count that does not match is an archive error."""
    it = iter(tensors)
    try:
        out = _fill(shape, it)
    except (StopIteration, KeyError, TypeError, ValueError):
        raise ArchiveMetadataError(
            f"{where}: the saved output shape {shape!r} does not match the {len(tensors)} tensors the graph holds; "
            "the archive is damaged. Run SAVE again."
        ) from None
    if next(it, None) is not None:
        raise ArchiveMetadataError(
            f"{where}: the graph holds more tensors than its saved output shape {shape!r}; the archive is damaged. "
            "Run SAVE again."
        )
    return out


def _fill(shape: Any, it: Iterator[Any]) -> Any:
    if shape is None:
        return None
    if shape == TENSOR:
        return next(it)
    if isinstance(shape, dict) and len(shape) == 1:
        ((kind, items),) = shape.items()
        filled = [_fill(s, it) for s in items]
        if kind == "tuple":
            return tuple(filled)
        if kind == "list":
            return filled
    raise ValueError(shape)
