"""FOUNDRY_VLLM_* parsing: defaults, required archive, and a message naming the variable at fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from foundry.integration.vllm import Mode, PluginConfig, PluginConfigError


def test_unset_or_off_is_disabled_with_defaults() -> None:
    for env in ({}, {"FOUNDRY_VLLM_MODE": ""}, {"FOUNDRY_VLLM_MODE": " OFF "}):
        config = PluginConfig.from_env(env)
        assert config.mode is Mode.OFF and not config.enabled and config.archive is None


def test_save_with_every_setting(tmp_path: Path) -> None:
    config = PluginConfig.from_env(
        {
            "FOUNDRY_VLLM_MODE": "Save",
            "FOUNDRY_VLLM_ARCHIVE": str(tmp_path / "new"),
            "FOUNDRY_VLLM_REGION_BASE": "0x7f0000000000",
            "FOUNDRY_VLLM_REGION_SIZE": "64GB",
            "FOUNDRY_VLLM_THREADS": "4",
            "FOUNDRY_VLLM_ALLOW_MISMATCH": "driver, ",
            "FOUNDRY_VLLM_REPORT": str(tmp_path / "r.json"),
        }
    )
    assert config == PluginConfig(
        Mode.SAVE, tmp_path / "new", 0x7F0000000000, 64 << 30, 4, ("driver",), tmp_path / "r.json"
    )


def test_defaults_for_save(tmp_path: Path) -> None:
    config = PluginConfig.from_env({"FOUNDRY_VLLM_MODE": "save", "FOUNDRY_VLLM_ARCHIVE": str(tmp_path)})
    assert (config.region_base, config.region_size, config.threads) == (0x600000000000, 512 << 30, 8)
    assert config.require_archive() == tmp_path


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"FOUNDRY_VLLM_MODE": "save"}, "needs FOUNDRY_VLLM_ARCHIVE"),
        ({"FOUNDRY_VLLM_MODE": "load", "FOUNDRY_VLLM_ARCHIVE": "/nonexistent/a"}, "is not a directory"),
        ({"FOUNDRY_VLLM_MODE": "save", "FOUNDRY_VLLM_ARCHIVE": "/tmp/a", "FOUNDRY_VLLM_THREADS": "0"}, "below 1"),
        ({"FOUNDRY_VLLM_MODE": "save", "FOUNDRY_VLLM_ARCHIVE": "/tmp/a", "FOUNDRY_VLLM_THREADS": "x"}, "integer"),
        ({"FOUNDRY_VLLM_MODE": "save", "FOUNDRY_VLLM_ARCHIVE": "/tmp/a", "FOUNDRY_VLLM_REGION_SIZE": "big"}, "512GB"),
        ({"FOUNDRY_VLLM_MODE": "replay"}, "not one of off, save, load"),
    ],
)
def test_malformed_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(PluginConfigError, match=message):
        PluginConfig.from_env(env)


def test_configs_are_values() -> None:
    a, b = PluginConfig.off(), PluginConfig.off()
    assert a == b and hash(a) == hash(b)
    with pytest.raises(AttributeError):
        a.mode = Mode.SAVE  # type: ignore[misc]
