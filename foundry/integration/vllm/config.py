"""The vLLM plugin's identity and settings: FOUNDRY_VLLM_MODE, FOUNDRY_VLLM_ARCHIVE, FOUNDRY_VLLM_REGION_BASE,
FOUNDRY_VLLM_REGION_SIZE, FOUNDRY_VLLM_THREADS, FOUNDRY_VLLM_ALLOW_MISMATCH, FOUNDRY_VLLM_REPORT,
FOUNDRY_VLLM_PACK_CACHES (what each means: shared/config.py), and vLLM's own:

    FOUNDRY_VLLM_WARM_UP      1 (default; or true/yes/on): LOAD runs the warm-up vLLM runs natively before its first
                              request (the profile's forward passes, then its kernel warm-up), without measuring
                              memory or capturing: kernels that settle state at their first launch settle it
                              before serving, on the shapes native settles it on (Inductor's kernels take SAVE's
                              choices whenever they first launch, shared/autotune.py; vLLM's own autotuned Triton
                              kernels and FlashInfer's do not); 0: LOAD skips both, and its first requests pay
                              those first launches

vLLM starts its engine core and workers as child processes, which inherit them."""

from __future__ import annotations

import dataclasses

from ..shared.config import EngineConfig, Mode
from ..shared.engine import Engine

__all__ = ["ENV_ARCHIVE", "ENV_MODE", "ENV_WARM_UP", "VLLM", "Mode", "PluginConfig"]

VLLM = Engine(name="vLLM", key="vllm", version="0.26.0", logger="vllm.foundry")

ENV_MODE = VLLM.var("MODE")
ENV_ARCHIVE = VLLM.var("ARCHIVE")
ENV_WARM_UP = VLLM.var("WARM_UP")


@dataclasses.dataclass(frozen=True)
class PluginConfig(EngineConfig):
    ENGINE = VLLM

    warm_up: bool = True
