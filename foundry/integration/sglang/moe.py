"""Expert parallel's lazy state in SGLang (ep_size = tp_size, the standard dispatcher; support.py refuses the
rest): each MoE layer's ``StandardDispatcher`` makes its map of global to local expert IDs on its first
dispatch. Natively that is the first warm-up forward of capture, so the map would lie in memory capture's
warm-up allocated, read there by the graphs; LOAD runs no warm-up, and its first eager forward would make a
second map elsewhere. Built here instead, by the dispatcher's own code, at the same step of start-up in SAVE
and in LOAD (before capture, before LOAD hands over the graphs), the map lies at one address that the graphs and
the eager forwards share, with the bytes SGLang writes into it.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..shared.errors import PatchTargetError
from .config import SGLANG

__all__ = ["DISPATCHER", "TOPK", "build_expert_maps"]

DISPATCHER = "sglang.srt.layers.moe.token_dispatcher.standard"
TOPK = "sglang.srt.layers.moe.topk"


def _needs_map(dispatcher: Any, kind: type) -> bool:
    """Whether ``dispatcher`` (any attribute value of a module) is a standard dispatcher that maps experts to
    local ones and has not made its map yet."""
    return (
        isinstance(dispatcher, kind)
        and (getattr(dispatcher, "moe_ep_size", 1) or 1) > 1
        and not getattr(dispatcher, "skip_local_expert_mapping", False)
        and getattr(dispatcher, "local_expert_mapping", None) is None
    )


def build_expert_maps(model: Any) -> int:
    """Has every standard dispatcher of ``model`` (a torch module) that maps experts to local ones make its map
    now, by dispatching an empty batch; returns how many did. A dispatcher that makes none where SGLang
    0.5.17's does is refused (PatchTargetError): the graphs would read a map LOAD never made."""
    import torch

    kind = importlib.import_module(DISPATCHER).StandardDispatcher
    topk_output = importlib.import_module(TOPK).StandardTopKOutput
    made = 0
    for module in model.modules():
        dispatcher: Any = getattr(module, "dispatcher", None)
        if not _needs_map(dispatcher, kind):
            continue
        # No row: nothing is computed, and no memory is taken but the map's (an empty tensor takes none).
        ids = torch.empty((0, 1), dtype=torch.int32, device="cuda")
        weights = torch.empty((0, 1), dtype=torch.float32, device="cuda")
        dispatcher.dispatch(weights, topk_output(topk_weights=weights, topk_ids=ids, router_logits=weights))
        if dispatcher.local_expert_mapping is None:
            raise PatchTargetError(
                f"SGLang's {type(dispatcher).__name__} made no expert map on its first dispatch, which SGLang "
                f"{SGLANG.version} does: expert parallel is not where the adapter has it. {SGLANG.fallback()}"
            )
        made += 1
    return made
