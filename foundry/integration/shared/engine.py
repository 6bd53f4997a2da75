"""Which engine a plugin serves: its name in messages, the prefix of its environment variables, the
metadata document it writes into Foundry's archive, and the engine version the plugin was written for."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Engine"]


@dataclass(frozen=True)
class Engine:
    name: str  # as users write it: "vLLM", "SGLang"
    key: str  # lower-case identifier: FOUNDRY_<KEY>_* variables, <key>_plugin.json
    version: str  # the engine release whose hook points the plugin uses
    logger: str = ""  # the logger the plugin writes to, under the engine's own (its handlers print it)

    def __post_init__(self) -> None:
        if not self.key.isidentifier() or self.key != self.key.lower():
            raise ValueError(f"engine key {self.key!r} must be a lower-case identifier, such as 'vllm'")

    def var(self, suffix: str) -> str:
        """The name of one of the plugin's environment variables: ``var("MODE")`` -> ``FOUNDRY_VLLM_MODE``."""
        return f"FOUNDRY_{self.key.upper()}_{suffix}"

    @property
    def metadata_name(self) -> str:
        return f"{self.key}_plugin.json"

    def fallback(self) -> str:
        """The next step when the installed engine is not the one the plugin hooks."""
        return f"Install {self.name} {self.version}, or run with {self.var('MODE')}=off."
