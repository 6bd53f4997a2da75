"""The ``vllm.general_plugins`` entry point. vLLM calls ``register()`` once in every process it starts
(front-end, engine core, workers), before it resolves the worker class.

Disabled (FOUNDRY_VLLM_MODE unset or off) it returns at once and imports nothing. Enabled, it only asks to
be told when vLLM's worker and model-runner modules are imported, and patches them then (patches.py); it
does not import vLLM itself, so the front-end process pays nothing.
"""

from __future__ import annotations

import os

from ..shared.hooks import when_imported
from .config import Mode, PluginConfig
from .patches import TARGETS

__all__ = ["register"]


def register() -> None:
    config = PluginConfig.from_env()  # raises PluginConfigError, which stops vLLM with its message
    if not config.enabled:
        return
    if config.mode is Mode.SAVE:
        # LOAD rebuilds every tensor itself; copying SAVE's live memory into the archive would only cost time.
        os.environ.setdefault("FOUNDRY_SNAPSHOT_LIMIT", "0")
    for module_name, install in TARGETS.items():
        when_imported(module_name, install)
