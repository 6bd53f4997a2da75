"""The ``sglang.srt.plugins`` entry point. SGLang calls ``register()`` through ``load_plugins()`` once in each
process that loads plugins (the Engine's or HTTP server's process, and every scheduler process it spawns), then
applies the hooks registered.

Disabled (FOUNDRY_SGLANG_MODE unset or off) it returns at once and imports nothing. Enabled, it registers one
hook on the scheduler (patches.py), which puts the model runner's hooks in place in the scheduler process only.
SGLang logs an exception from a plugin and starts without it; so a malformed setting is raised here (for the
log) and again by that hook, which stops the scheduler with the message.
"""

from __future__ import annotations

import os

from ..shared.errors import PluginConfigError
from .config import Mode, PluginConfig
from .patches import register_entry

__all__ = ["register"]


def register() -> None:
    try:
        config = PluginConfig.from_env()
    except PluginConfigError as exc:
        register_entry(exc)
        raise
    if not config.enabled:
        return
    if config.mode is Mode.SAVE:
        # LOAD rebuilds every tensor itself; copying SAVE's live memory into the archive would only cost time.
        os.environ.setdefault("FOUNDRY_SNAPSHOT_LIMIT", "0")
    register_entry()
