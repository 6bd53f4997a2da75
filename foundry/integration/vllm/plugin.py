"""The ``vllm.general_plugins`` entry point. vLLM calls ``register()`` once in every process it starts
(front-end, engine core, workers), before it resolves the worker class.

Disabled (FOUNDRY_VLLM_MODE unset or off) it returns at once and imports nothing. Enabled, it asks to be told
when vLLM's worker and model-runner modules are imported, and patches them then (patches.py); it does not import
vLLM's worker itself, so the front-end process pays nothing for it. Under LOAD it also seeds vLLM's model-info
cache from the archive's caches where it has no entry (caches.seed_model_info): vLLM's front end resolves the
model's class right after, and on a miss inspects it in a subprocess (20-23 s on a fresh node).
"""

from __future__ import annotations

import os

from ..shared.hooks import when_imported
from .caches import seed_model_info
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
    if config.mode is Mode.LOAD:
        seed_model_info(config)
