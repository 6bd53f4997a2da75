"""The SGLang plugin when off, and how its hooks land when on: with SGLang absent (this CPU tier has neither
SGLang nor torch) it imports, imports nothing of SGLang or torch and registers nothing unless
FOUNDRY_SGLANG_MODE asks it to; on, it puts one hook on the scheduler in every process and the model runner's
hooks only where the scheduler builds the model, each once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from foundry.integration.sglang.patches import ENTRY, MODEL_HOOKS
from foundry.integration.sglang.plugin import register
from tests.support.fakesglang import server_args

REPO = Path(__file__).resolve().parents[3]

PROBE = """
import json, sys
import foundry.integration.sglang as plugin
plugin.register()
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("vllm", "sglang", "torch"))
print(json.dumps({"heavy": heavy, "env": sys.modules["os"].environ.get("FOUNDRY_SNAPSHOT_LIMIT")}))
"""


def _probe(env: dict[str, str]) -> dict[str, Any]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("FOUNDRY_VLLM_", "FOUNDRY_SGLANG_"))}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env={**clean, **env}, cwd=REPO, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout)


def test_disabled_plugin_imports_nothing_heavy() -> None:
    assert _probe({})["heavy"] == []
    assert _probe({"FOUNDRY_SGLANG_MODE": "off"})["heavy"] == []


def test_another_engines_settings_leave_the_sglang_plugin_inert(tmp_path: Path) -> None:
    assert _probe({"FOUNDRY_VLLM_MODE": "save", "FOUNDRY_VLLM_ARCHIVE": str(tmp_path / "a")})["heavy"] == []


def test_off_registers_nothing_and_sglang_starts_as_usual(sglang_engines: Any) -> None:
    fake = sglang_engines.prepare("off")
    runner = fake.start_scheduler(server_args())
    registry = fake.module("sglang.srt.plugins.hook_registry").HookRegistry
    assert registry._hooks == {}
    assert "profile" in fake.trace.events and fake.trace.events.count("torch.capture") == 3 * 4 + 4
    assert fake.memory.calls == [] and runner.decode_cuda_graph_runner is not None


def test_on_the_plugin_hooks_the_scheduler_first_and_the_model_runner_in_the_scheduler(sglang_engines: Any) -> None:
    fake = sglang_engines.prepare("save")
    fake.module("sglang.srt.plugins").load_plugins()  # the Engine's process: it never builds the model
    registry = fake.module("sglang.srt.plugins.hook_registry").HookRegistry
    assert list(registry._hooks) == [ENTRY] and registry._patched == {ENTRY}
    fake.start_scheduler(server_args())
    assert set(registry._hooks) == {ENTRY, *MODEL_HOOKS} == registry._patched


def test_hooks_land_once_however_often_sglang_loads_the_plugin(sglang_engines: Any) -> None:
    fake = sglang_engines.prepare("save")
    plugins = fake.module("sglang.srt.plugins")
    plugins.load_plugins()
    register()  # a second load (SGLang guards load_plugins; an embedding program may call register itself)
    registry = fake.module("sglang.srt.plugins.hook_registry").HookRegistry
    registry.apply_hooks()
    fake.start_scheduler(server_args())
    assert all(len(hooks) == 1 for hooks in registry._hooks.values())
    assert fake.memory.calls.count("set_region") == 1 and fake.memory.calls.count("save_manifest") == 1


def test_save_turns_off_foundry_state_snapshots_unless_set(tmp_path: Path) -> None:
    env = {"FOUNDRY_SGLANG_MODE": "save", "FOUNDRY_SGLANG_ARCHIVE": str(tmp_path)}
    probe = PROBE.replace("plugin.register()", "import foundry.integration.sglang.plugin as p; p.register_entry = "
                          "lambda *a: None; p.register()")  # fmt: skip
    for name, value in (("", "0"), ("1000", "1000")):
        env["FOUNDRY_SNAPSHOT_LIMIT"] = name
        clean = {k: v for k, v in os.environ.items() if not k.startswith("FOUNDRY_")}
        out = subprocess.run(
            [sys.executable, "-c", probe], env={**clean, **{k: v for k, v in env.items() if v}}, cwd=REPO,
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        assert json.loads(out.stdout)["env"] == value


def test_the_entry_point_is_declared_for_sglangs_plugin_group() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["sglang.srt.plugins"] == {"foundry": "foundry.integration.sglang:register"}
