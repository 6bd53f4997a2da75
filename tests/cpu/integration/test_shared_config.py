"""shared/config.py and shared/engine.py for an engine other than vLLM: its own variables, the same
validation, messages that name its variables, and no reading of another engine's."""

from __future__ import annotations

from pathlib import Path

import pytest

from foundry.integration.shared import Engine, EngineConfig, Mode, PluginConfigError
from foundry.integration.vllm import PluginConfig
from tests.support.fakeengine import SGLANG, SglangConfig, env


def test_engine_names_its_variables_and_metadata_file() -> None:
    assert SGLANG.var("MODE") == "FOUNDRY_SGLANG_MODE" and SGLANG.metadata_name == "sglang_plugin.json"
    assert SGLANG.fallback() == "Install SGLang 0.5.17, or run with FOUNDRY_SGLANG_MODE=off."
    for key in ("SGLang", "sg-lang", ""):
        with pytest.raises(ValueError, match="lower-case identifier"):
            Engine("SGLang", key, "0.5.17")


def test_every_setting_from_the_engines_own_variables(tmp_path: Path) -> None:
    environ = env(
        "Load",
        tmp_path,
        REGION_BASE="0x7f0000000000",
        REGION_SIZE="64GB",
        THREADS="4",
        ALLOW_MISMATCH="driver, ,gpu",
        REPORT=str(tmp_path / "r.json"),
    )
    config = SglangConfig.from_env(environ)
    assert config == SglangConfig(
        Mode.LOAD, tmp_path, 0x7F0000000000, 64 << 30, 4, ("driver", "gpu"), tmp_path / "r.json"
    )
    assert config.engine is SGLANG and config.enabled
    # vLLM's plugin reads none of them, and SGLang's reads none of vLLM's
    assert not PluginConfig.from_env(environ).enabled
    assert not SglangConfig.from_env({"FOUNDRY_VLLM_MODE": "save", "FOUNDRY_VLLM_ARCHIVE": str(tmp_path)}).enabled


def test_defaults_and_off(tmp_path: Path) -> None:
    config = SglangConfig.from_env(env("save", tmp_path / "new"))
    assert (config.region_base, config.region_size, config.threads, config.report) == (
        0x600000000000,
        512 << 30,
        8,
        None,
    )
    assert SglangConfig.from_env({}) == SglangConfig.off() and SglangConfig.off().archive is None
    assert SglangConfig.off() != PluginConfig.off()  # same values, another engine


@pytest.mark.parametrize(
    ("more", "message"),
    [
        ({"MODE": "replay"}, r"FOUNDRY_SGLANG_MODE='replay' is not one of off, save, load"),
        ({"ARCHIVE": " "}, r"FOUNDRY_SGLANG_MODE=save needs FOUNDRY_SGLANG_ARCHIVE"),
        ({"THREADS": "0"}, r"FOUNDRY_SGLANG_THREADS='0' is below 1"),
        ({"THREADS": "four"}, r"FOUNDRY_SGLANG_THREADS='four' is not an integer"),
        ({"REGION_BASE": "0xZZ"}, r"FOUNDRY_SGLANG_REGION_BASE='0xZZ' is not an integer"),
        ({"REGION_SIZE": "big"}, r"FOUNDRY_SGLANG_REGION_SIZE='big'.*512GB"),
    ],
)
def test_malformed_settings_name_the_engines_variable(more: dict[str, str], message: str) -> None:
    environ = {**env("save", "/tmp/a"), **{f"FOUNDRY_SGLANG_{k}": v for k, v in more.items()}}
    with pytest.raises(PluginConfigError, match=message):
        SglangConfig.from_env(environ)


def test_load_needs_an_existing_archive_and_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(PluginConfigError, match=r"not a directory.*run once with FOUNDRY_SGLANG_MODE=save"):
        SglangConfig.from_env(env("load", tmp_path / "absent"))


def test_require_archive_names_the_engines_variables() -> None:
    config = SglangConfig(Mode.SAVE, None, 0, 1, 1, ())
    with pytest.raises(
        PluginConfigError, match="FOUNDRY_SGLANG_MODE=save needs an archive: set FOUNDRY_SGLANG_ARCHIVE"
    ):
        config.require_archive()


def test_a_config_must_name_its_engine() -> None:
    with pytest.raises(TypeError, match="names no engine"):
        EngineConfig.off()
