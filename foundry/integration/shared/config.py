"""A plugin's settings, read from the environment (engines start their workers or schedulers as child
processes, which inherit it). Each engine's variables carry its prefix (vLLM: FOUNDRY_VLLM_*, SGLang:
FOUNDRY_SGLANG_*); below, <E> stands for it.

    FOUNDRY_<E>_MODE          save | load | off (default off: the plugin installs nothing)
    FOUNDRY_<E>_ARCHIVE       the archive directory (required for save and load)
    FOUNDRY_<E>_REGION_BASE   the allocation region's base address (default 0x600000000000)
    FOUNDRY_<E>_REGION_SIZE   its size (default 512GB: virtual space, mapped only where used)
    FOUNDRY_<E>_THREADS       LOAD's graph builder threads (default 8)
    FOUNDRY_<E>_ALLOW_MISMATCH  comma-separated identity fields LOAD accepts knowingly (Foundry's
                              allow_mismatch: e.g. "driver")
    FOUNDRY_<E>_ALLOW_INEXACT comma-separated model classes the plugin refuses because LOAD was measured not
                              bit-identical to native with them (each engine's support.py), accepted knowingly
    FOUNDRY_<E>_REPORT        if set, the process that captures writes a JSON report of its start-up phases here
                              (on several GPUs rank 0 there, rank r in <stem>.rank<r><suffix> beside it)
    FOUNDRY_<E>_PACK_CACHES   1: SAVE packs the engine's compile and JIT caches into the archive, for a fresh
                              node (shared/caches.py; needs a signing key, since LOAD uses them only signed)
    FOUNDRY_<E>_WARM_UP       1/0: LOAD runs the warm-up the engine runs natively before its first request, or not
                              (what it runs, and its default: each engine's config.py)
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, TypeVar

import foundry

from .engine import Engine
from .errors import PluginConfigError

__all__ = ["DEFAULT_REGION_BASE", "DEFAULT_REGION_SIZE", "DEFAULT_THREADS", "EngineConfig", "Mode", "env_flag"]

DEFAULT_REGION_BASE = 0x600000000000
DEFAULT_REGION_SIZE = "512GB"
DEFAULT_THREADS = 8


class Mode(enum.Enum):
    """What the plugin does in this process tree."""

    OFF = "off"  # nothing: the engine starts as usual
    SAVE = "save"  # start as usual, capture the graphs with Foundry, write the archive
    LOAD = "load"  # start from the archive: no memory profiling, no kernel warm-up, no capture


@dataclass(frozen=True)
class EngineConfig:
    """The settings of one engine's plugin. Each engine subclasses it, naming itself in ``ENGINE``
    (``class PluginConfig(EngineConfig): ENGINE = VLLM``); the engine picks the variables and the messages."""

    ENGINE: ClassVar[Engine]

    mode: Mode
    archive: Path | None  # None only when mode is OFF
    region_base: int
    region_size: int
    threads: int
    allow_mismatch: tuple[str, ...]
    report: Path | None = None
    allow_inexact: tuple[str, ...] = ()  # model classes whose measured inexact LOAD is accepted knowingly
    pack_caches: bool = False  # SAVE: pack the engine's caches (LOAD uses an archive's caches whenever it may)
    warm_up: bool = False  # LOAD: run the engine's warm-up (FOUNDRY_<E>_WARM_UP; an engine's config may default it on)

    def __post_init__(self) -> None:
        if not isinstance(getattr(type(self), "ENGINE", None), Engine):
            raise TypeError(f"{type(self).__name__} names no engine: subclass EngineConfig and set ENGINE")

    @property
    def engine(self) -> Engine:
        return self.ENGINE

    @property
    def enabled(self) -> bool:
        return self.mode is not Mode.OFF

    def require_archive(self) -> Path:
        if self.archive is None:
            raise PluginConfigError(
                f"{self.ENGINE.var('MODE')}={self.mode.value} needs an archive: set {self.ENGINE.var('ARCHIVE')} to "
                "a directory"
            )
        return self.archive

    @classmethod
    def off(cls: type[C]) -> C:
        return cls(Mode.OFF, None, DEFAULT_REGION_BASE, foundry.parse_size(DEFAULT_REGION_SIZE), DEFAULT_THREADS, ())

    @classmethod
    def from_env(cls: type[C], environ: Mapping[str, str] | None = None) -> C:
        """Parses the engine's FOUNDRY_<E>_* variables. Raises PluginConfigError naming the variable at fault."""
        env = os.environ if environ is None else environ
        var = cls.ENGINE.var
        env_mode, env_archive = var("MODE"), var("ARCHIVE")
        raw_mode = env.get(env_mode, "").strip().lower() or Mode.OFF.value
        try:
            mode = Mode(raw_mode)
        except ValueError:
            choices = ", ".join(m.value for m in Mode)
            raise PluginConfigError(
                f"{env_mode}={env.get(env_mode)!r} is not one of {choices}; set one of them"
            ) from None
        if mode is Mode.OFF:
            return cls.off()
        archive_text = env.get(env_archive, "").strip()
        if not archive_text:
            raise PluginConfigError(
                f"{env_mode}={mode.value} needs {env_archive}: set it to the archive directory "
                f"({'it is created' if mode is Mode.SAVE else 'the one a SAVE run wrote'})"
            )
        archive = Path(archive_text).expanduser()
        if mode is Mode.LOAD and not archive.is_dir():
            raise PluginConfigError(
                f"{env_archive}={archive_text!r} is not a directory; LOAD needs the archive a SAVE run wrote "
                f"(run once with {env_mode}=save)"
            )
        env_report = var("REPORT")
        return cls(
            mode=mode,
            archive=archive,
            region_base=_int(env, var("REGION_BASE"), DEFAULT_REGION_BASE),
            region_size=_size(env, var("REGION_SIZE"), DEFAULT_REGION_SIZE),
            threads=_int(env, var("THREADS"), DEFAULT_THREADS, minimum=1),
            allow_mismatch=_names(env, var("ALLOW_MISMATCH")),
            allow_inexact=_names(env, var("ALLOW_INEXACT")),
            report=Path(env[env_report]).expanduser() if env.get(env_report, "").strip() else None,
            pack_caches=env_flag(env, var("PACK_CACHES")),
            warm_up=env_flag(env, var("WARM_UP"), default=cls.warm_up),  # the class's field default
        )


C = TypeVar("C", bound=EngineConfig)


def _names(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in env.get(name, "").split(",") if part.strip())


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


_FLAGS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def env_flag(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    """A plugin's on/off setting: unset or empty is ``default``; 1/0, true/false, yes/no, on/off; anything else is
    refused naming the variable."""
    text = env.get(name, "").strip().lower()
    if not text:
        return default
    if text not in _FLAGS:
        raise PluginConfigError(f"{name}={env[name]!r} is not 1 or 0 (true/false, yes/no, on/off); fix or unset it")
    return _FLAGS[text]


def _size(env: Mapping[str, str], name: str, default: str) -> int:
    text = env.get(name, "").strip() or default
    try:
        return foundry.parse_size(text)
    except (TypeError, ValueError) as exc:
        raise PluginConfigError(f"{name}={text!r}: {exc}; use a size such as 512GB") from None
