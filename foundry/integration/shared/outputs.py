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

__all__ = ["as_flat", "rebuild", "shape_of"]

TENSOR = "tensor"


def shape_of(obj: Any, where: str, engine: Engine) -> Any:
    """The JSON shape of ``obj``. Anything but tensors, Nones, tuples and lists is refused, naming ``where``:
    LOAD could not hand it back."""
    if obj is None:
        return None
    if hasattr(obj, "data_ptr"):
        return TENSOR
    if isinstance(obj, tuple):
        return {"tuple": [shape_of(x, where, engine) for x in obj]}
    if isinstance(obj, list):
        return {"list": [shape_of(x, where, engine) for x in obj]}
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
