"""The SGLang plugin's identity and settings: FOUNDRY_SGLANG_MODE, FOUNDRY_SGLANG_ARCHIVE,
FOUNDRY_SGLANG_REGION_BASE, FOUNDRY_SGLANG_REGION_SIZE, FOUNDRY_SGLANG_THREADS, FOUNDRY_SGLANG_ALLOW_MISMATCH,
FOUNDRY_SGLANG_REPORT, FOUNDRY_SGLANG_PACK_CACHES (what each means: shared/config.py), and SGLang's own:

    FOUNDRY_SGLANG_WARM_UP    1 (or true/yes/on): once the graphs are SGLang's, LOAD replays the smallest prefill
                              graph on SGLang's own dummy batch, so that the kernels its eager steps launch (the
                              attention between segments) load at start-up, as native capture's warm-up loads
                              them, and not in the first request (default: H200, Qwen3-MoE shape, the first
                              request 0.07 s against 0.96 s without it and 0.08 s natively, for 0.7 s more at
                              start-up; logprobs identical); 0: it does not

SGLang starts its scheduler (which holds the model) as a spawned child process, which inherits them."""

from __future__ import annotations

import dataclasses

from ..shared.config import EngineConfig, Mode
from ..shared.engine import Engine

__all__ = ["ENV_ARCHIVE", "ENV_MODE", "ENV_WARM_UP", "SGLANG", "Mode", "PluginConfig"]

SGLANG = Engine(name="SGLang", key="sglang", version="0.5.17", logger="sglang.srt.foundry")

ENV_MODE = SGLANG.var("MODE")
ENV_ARCHIVE = SGLANG.var("ARCHIVE")
ENV_WARM_UP = SGLANG.var("WARM_UP")


@dataclasses.dataclass(frozen=True)
class PluginConfig(EngineConfig):
    ENGINE = SGLANG

    warm_up: bool = True
