"""The SGLang plugin's identity and settings: FOUNDRY_SGLANG_MODE, FOUNDRY_SGLANG_ARCHIVE,
FOUNDRY_SGLANG_REGION_BASE, FOUNDRY_SGLANG_REGION_SIZE, FOUNDRY_SGLANG_THREADS, FOUNDRY_SGLANG_ALLOW_MISMATCH,
FOUNDRY_SGLANG_REPORT (what each means: shared/config.py). SGLang starts its scheduler (which holds the model)
as a spawned child process, which inherits them."""

from __future__ import annotations

from ..shared.config import EngineConfig, Mode
from ..shared.engine import Engine

__all__ = ["ENV_ARCHIVE", "ENV_MODE", "SGLANG", "Mode", "PluginConfig"]

SGLANG = Engine(name="SGLang", key="sglang", version="0.5.17", logger="sglang.srt.foundry")

ENV_MODE = SGLANG.var("MODE")
ENV_ARCHIVE = SGLANG.var("ARCHIVE")


class PluginConfig(EngineConfig):
    ENGINE = SGLANG
