"""The adapter's settings, read from the environment (vLLM starts its engine core and workers as child
processes, which inherit it).

    FOUNDRY_VLLM_MODE          save | load | off (default off: the plugin installs nothing)
    FOUNDRY_VLLM_ARCHIVE       the archive directory (required for save and load)
    FOUNDRY_VLLM_REGION_BASE   the allocation region's base address (default 0x600000000000)
    FOUNDRY_VLLM_REGION_SIZE   its size (default 512GB: virtual space, mapped only where used)
    FOUNDRY_VLLM_THREADS       LOAD's graph builder threads (default 8)
    FOUNDRY_VLLM_ALLOW_MISMATCH  comma-separated identity fields LOAD accepts knowingly (Foundry's
                               allow_mismatch: e.g. "driver")
    FOUNDRY_VLLM_REPORT        if set, the worker writes a JSON report of its start-up phases to this file
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import foundry

from ..shared.engine import Engine
from ..shared.errors import PluginConfigError

__all__ = ["ENV_ARCHIVE", "ENV_MODE", "Mode", "PluginConfig"]

VLLM = Engine(name="vLLM", key="vllm", version="0.26.0")

ENV_MODE = "FOUNDRY_VLLM_MODE"
ENV_ARCHIVE = "FOUNDRY_VLLM_ARCHIVE"
ENV_REGION_BASE = "FOUNDRY_VLLM_REGION_BASE"
ENV_REGION_SIZE = "FOUNDRY_VLLM_REGION_SIZE"
ENV_THREADS = "FOUNDRY_VLLM_THREADS"
ENV_ALLOW = "FOUNDRY_VLLM_ALLOW_MISMATCH"
ENV_REPORT = "FOUNDRY_VLLM_REPORT"

DEFAULT_REGION_BASE = 0x600000000000
DEFAULT_REGION_SIZE = "512GB"
DEFAULT_THREADS = 8


class Mode(enum.Enum):
    """What the plugin does in this process tree."""

    OFF = "off"  # nothing: vLLM starts as usual
    SAVE = "save"  # start as usual, capture decode graphs with Foundry, write the archive
    LOAD = "load"  # start from the archive: no memory profiling, no kernel warm-up, no capture


@dataclass(frozen=True)
class PluginConfig:
    mode: Mode
    archive: Path | None  # None only when mode is OFF
    region_base: int
    region_size: int
    threads: int
    allow_mismatch: tuple[str, ...]
    report: Path | None = None

    @property
    def enabled(self) -> bool:
        return self.mode is not Mode.OFF

    def require_archive(self) -> Path:
        if self.archive is None:
            raise PluginConfigError(f"{ENV_MODE}={self.mode.value} needs an archive: set {ENV_ARCHIVE} to a directory")
        return self.archive

    @classmethod
    def off(cls) -> PluginConfig:
        return cls(Mode.OFF, None, DEFAULT_REGION_BASE, foundry.parse_size(DEFAULT_REGION_SIZE), DEFAULT_THREADS, ())

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PluginConfig:
        """Parses the FOUNDRY_VLLM_* variables. Raises PluginConfigError naming the variable at fault."""
        env = os.environ if environ is None else environ
        raw_mode = env.get(ENV_MODE, "").strip().lower() or Mode.OFF.value
        try:
            mode = Mode(raw_mode)
        except ValueError:
            choices = ", ".join(m.value for m in Mode)
            raise PluginConfigError(
                f"{ENV_MODE}={env.get(ENV_MODE)!r} is not one of {choices}; set one of them"
            ) from None
        if mode is Mode.OFF:
            return cls.off()
        archive_text = env.get(ENV_ARCHIVE, "").strip()
        if not archive_text:
            raise PluginConfigError(
                f"{ENV_MODE}={mode.value} needs {ENV_ARCHIVE}: set it to the archive directory "
                f"({'it is created' if mode is Mode.SAVE else 'the one a SAVE run wrote'})"
            )
        archive = Path(archive_text).expanduser()
        if mode is Mode.LOAD and not archive.is_dir():
            raise PluginConfigError(
                f"{ENV_ARCHIVE}={archive_text!r} is not a directory; LOAD needs the archive a SAVE run wrote "
                f"(run once with {ENV_MODE}=save)"
            )
        return cls(
            mode=mode,
            archive=archive,
            region_base=_int(env, ENV_REGION_BASE, DEFAULT_REGION_BASE),
            region_size=_size(env, ENV_REGION_SIZE, DEFAULT_REGION_SIZE),
            threads=_int(env, ENV_THREADS, DEFAULT_THREADS, minimum=1),
            allow_mismatch=tuple(s.strip() for s in env.get(ENV_ALLOW, "").split(",") if s.strip()),
            report=Path(env[ENV_REPORT]).expanduser() if env.get(ENV_REPORT, "").strip() else None,
        )


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text, 0)
    except ValueError:
        raise PluginConfigError(f"{name}={text!r} is not an integer (decimal or 0x-hex); fix or unset it") from None
    if value < minimum:
        raise PluginConfigError(f"{name}={text!r} is below {minimum}; fix or unset it")
    return value


def _size(env: Mapping[str, str], name: str, default: str) -> int:
    text = env.get(name, "").strip() or default
    try:
        return foundry.parse_size(text)
    except (TypeError, ValueError) as exc:
        raise PluginConfigError(f"{name}={text!r}: {exc}; use a size such as 512GB") from None
