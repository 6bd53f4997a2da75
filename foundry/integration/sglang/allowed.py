"""The eager steps the SGLang plugin calls at LOAD: the SGLang functions SAVE can record for SGLang 0.5.17
between the segments of a breakable prefill graph (breaks.py), and what each takes, as SAVE writes it.

An archive's metadata names each step's function as ``module:attribute`` and lists its arguments. The
archive is data: LOAD imports and calls only a function on this list, found by the list's own names, and
only with arguments that fit it: each parameter given once, by position or keyword as Python would bind it,
every required one given, each value of a kind the parameter takes (a tensor of the segment before the step,
by index; a bool; a non-negative int; None where the parameter allows it). Anything else is refused, naming
the step and what it says, before anything is imported. SAVE checks its steps against the same list, so it
never writes one LOAD would refuse.

SGLang 0.5.17's breakable prefill graphs break at attention (``RadixAttention.forward`` calls
``breakable_unified_attention_with_output``, which is ``eager_on_graph(True)(unified_attention_with_output)``),
so the step's function is ``radix_attention.unified_attention_with_output``: query, key, value, output,
save_kv_cache, layer_id by position, the rest keyword-only. A model whose steps call anything else is
refused at SAVE (prefill graphs off, decode graphs still saved).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = ["ATTENTION", "STEPS", "Param", "Signature", "allowed_name", "step_problem"]

TENSOR, NONE, BOOL, INT = "tensor", "none", "bool", "int"
_MAX_INT = 2**63 - 1


@dataclass(frozen=True)
class Param:
    """A parameter: its name and the kinds of value it takes."""

    name: str
    kinds: frozenset[str]


def _p(name: str, *kinds: str) -> Param:
    return Param(name, frozenset(kinds))


@dataclass(frozen=True)
class Signature:
    """What a function takes: ``positional`` parameters in order (positional or keyword), the first
    ``required`` of which must be given, then optional ``keyword``-only ones."""

    positional: tuple[Param, ...]
    required: int
    keyword: tuple[Param, ...] = ()

    def problem(self, args: list[Any], kwargs: dict[str, Any]) -> str | None:
        """Why ``args`` and ``kwargs`` (encoded as SAVE writes them) do not bind to this signature, or None."""
        if len(args) > len(self.positional):
            return f"passes {len(args)} arguments by position; the function takes at most {len(self.positional)}"
        bound = {p.name: (p, v) for p, v in zip(self.positional, args, strict=False)}
        by_name = {p.name: p for p in (*self.positional, *self.keyword)}
        for name, value in kwargs.items():
            param = by_name.get(name)
            if param is None:
                return f"passes keyword {name!r:.60}, which the function does not take"
            if name in bound:
                return f"passes {name!r} twice"
            bound[name] = (param, value)
        missing = [p.name for p in self.positional[: self.required] if p.name not in bound]
        if missing:
            return f"does not pass {missing}"
        for name, (param, value) in bound.items():
            kind = _kind(value)
            if kind not in param.kinds:
                return f"passes {value!r:.80} as {name}, which takes {' or '.join(sorted(param.kinds))}"
        return None


_MAYBE_TENSOR = (TENSOR, NONE)
ATTENTION = "sglang.srt.layers.radix_attention:unified_attention_with_output"
STEPS: Mapping[str, Signature] = MappingProxyType(
    {
        ATTENTION: Signature(
            positional=(
                _p("query", TENSOR),
                _p("key", *_MAYBE_TENSOR),
                _p("value", *_MAYBE_TENSOR),
                _p("output", TENSOR),
                _p("save_kv_cache", BOOL),
                _p("layer_id", INT),
            ),
            required=6,
            keyword=(
                _p("use_mha_companion", BOOL),
                _p("key_value_num_tokens", INT, NONE),
                _p("q_rope", *_MAYBE_TENSOR),
                _p("k_rope", *_MAYBE_TENSOR),
                _p("sinks", *_MAYBE_TENSOR),
                _p("cos_sin_cache", *_MAYBE_TENSOR),
                _p("is_neox", BOOL, NONE),
                _p("llama_4_scaling", *_MAYBE_TENSOR),
                _p("topk_indices", *_MAYBE_TENSOR),
            ),
        ),
    }
)
"""The functions LOAD may call, by ``module:attribute``, with what each takes."""


def _kind(value: Any) -> str | None:
    """The kind of an encoded argument (breaks.py writes ``{"v": scalar}`` or ``{"t": index}``), or None."""
    if not isinstance(value, dict) or len(value) != 1:
        return None
    ((tag, item),) = value.items()
    if tag == "t":
        return TENSOR if type(item) is int else None
    if tag != "v":
        return None
    if item is None:
        return NONE
    if type(item) is bool:
        return BOOL
    if type(item) is int and 0 <= item <= _MAX_INT:
        return INT
    return None


def step_problem(doc: Any, tensors: int) -> str | None:
    """Why ``doc`` is not an eager step SAVE writes for a segment whose outputs are ``tensors`` tensors, or
    None. Reads ``doc`` only: nothing is imported or called."""
    if not isinstance(doc, dict) or set(doc) != {"fn", "args", "kwargs"}:
        return "is not described as SAVE describes one (fn, args, kwargs)"
    name, args, kwargs = doc["fn"], doc["args"], doc["kwargs"]
    signature = STEPS.get(name) if isinstance(name, str) else None
    if signature is None:
        return (
            f"names {name!r:.120}, which is not an SGLang function the Foundry adapter calls (it calls only "
            f"{', '.join(sorted(STEPS))})"
        )
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        return f"calls {name} but lists its arguments in a form SAVE does not write"
    problem = signature.problem(args, kwargs)
    if problem:
        return f"calls {name} but {problem}"
    # SAVE numbers the tensors of a step in the order it passes them: 0, 1, ... up to the segment's outputs.
    indices = [v["t"] for v in (*args, *kwargs.values()) if "t" in v]
    if indices != list(range(tensors)):
        return (
            f"calls {name} but passes tensors {indices[:8]} of the {tensors} the segment before it holds, not each "
            "in order"
        )
    return None


def allowed_name(fn: Any) -> str | None:
    """``module:attribute`` of the listed function ``fn`` is, looked up in SGLang's loaded modules, or None."""
    for name in STEPS:
        module, attribute = name.split(":", 1)
        if getattr(sys.modules.get(module), attribute, None) is fn:
            return name
    return None
