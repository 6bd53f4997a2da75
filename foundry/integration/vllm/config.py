"""The vLLM plugin's identity and settings: FOUNDRY_VLLM_MODE, FOUNDRY_VLLM_ARCHIVE, FOUNDRY_VLLM_REGION_BASE,
FOUNDRY_VLLM_REGION_SIZE, FOUNDRY_VLLM_THREADS, FOUNDRY_VLLM_ALLOW_MISMATCH, FOUNDRY_VLLM_REPORT,
FOUNDRY_VLLM_PACK_CACHES (what each means: shared/config.py). vLLM starts its engine core and workers as child
processes, which inherit them."""

from __future__ import annotations

from ..shared.config import EngineConfig, Mode
from ..shared.engine import Engine

__all__ = ["ENV_ARCHIVE", "ENV_MODE", "VLLM", "Mode", "PluginConfig"]

VLLM = Engine(name="vLLM", key="vllm", version="0.26.0", logger="vllm.foundry")

ENV_MODE = VLLM.var("MODE")
ENV_ARCHIVE = VLLM.var("ARCHIVE")


class PluginConfig(EngineConfig):
    ENGINE = VLLM
