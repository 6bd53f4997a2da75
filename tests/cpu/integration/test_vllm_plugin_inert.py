"""With vLLM absent (this CPU tier has neither vLLM nor torch): the plugin imports, imports nothing of
vLLM or torch, and does nothing unless FOUNDRY_VLLM_MODE asks it to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from foundry.integration.shared.hooks import _FINDER
from foundry.integration.vllm import PluginConfigError, register
from foundry.integration.vllm.patches import TARGETS

REPO = Path(__file__).resolve().parents[3]

PROBE = """
import json, sys
import foundry.integration.vllm as plugin
plugin.register()
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("vllm", "sglang", "torch"))
hooked = [sorted(f.pending) for f in sys.meta_path if type(f).__name__ == "_PostImport" and f.pending]
print(json.dumps({"heavy": heavy, "hooked": hooked}))
"""


def _probe(env: dict[str, str]) -> dict[str, list[str]]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("FOUNDRY_VLLM_", "FOUNDRY_SGLANG_"))}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env={**clean, **env}, cwd=REPO, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout)


def test_disabled_plugin_imports_nothing_heavy_and_hooks_nothing() -> None:
    assert _probe({}) == {"heavy": [], "hooked": []}
    assert _probe({"FOUNDRY_VLLM_MODE": "off"}) == {"heavy": [], "hooked": []}


def test_another_engines_settings_leave_the_vllm_plugin_inert(tmp_path: Path) -> None:
    sglang = {"FOUNDRY_SGLANG_MODE": "save", "FOUNDRY_SGLANG_ARCHIVE": str(tmp_path / "a")}
    assert _probe(sglang) == {"heavy": [], "hooked": []}


def test_enabled_plugin_waits_for_vllm_instead_of_importing_it(tmp_path: Path) -> None:
    result = _probe({"FOUNDRY_VLLM_MODE": "save", "FOUNDRY_VLLM_ARCHIVE": str(tmp_path / "a")})
    assert result["heavy"] == []
    assert result["hooked"] == [sorted(TARGETS)]


def test_register_in_process_with_mode_unset_leaves_import_machinery_alone() -> None:
    before = list(sys.meta_path)
    register()
    assert sys.meta_path == before and not _FINDER.pending


def test_a_malformed_mode_stops_vllm_with_a_message_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOUNDRY_VLLM_MODE", "restore")
    with pytest.raises(PluginConfigError, match=r"FOUNDRY_VLLM_MODE='restore' is not one of off, save, load"):
        register()


def test_save_turns_off_foundry_state_snapshots_unless_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FOUNDRY_VLLM_MODE", "save")
    monkeypatch.setenv("FOUNDRY_VLLM_ARCHIVE", str(tmp_path))
    register()
    assert os.environ["FOUNDRY_SNAPSHOT_LIMIT"] == "0"
    monkeypatch.setenv("FOUNDRY_SNAPSHOT_LIMIT", "1000")
    register()
    assert os.environ["FOUNDRY_SNAPSHOT_LIMIT"] == "1000"


def test_the_entry_point_is_declared_for_vllms_plugin_group() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["vllm.general_plugins"] == {"foundry": "foundry.integration.vllm:register"}
