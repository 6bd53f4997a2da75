"""shared/metadata.py, fingerprint.py, outputs.py, hooks.py and capture.py for an engine other than vLLM:
its own metadata file with its own values, and refusals that name that engine and its variables."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from foundry.integration.shared import (
    ArchiveMetadata,
    ArchiveMetadataError,
    ArchiveMismatchError,
    Fingerprint,
    GraphEntry,
    PatchTargetError,
    PhaseMark,
    UnsupportedConfigError,
    config_digest,
    foundry_capture,
    software_fields,
    wrap,
)
from foundry.integration.shared.outputs import shape_of
from tests.support.fakeengine import FILE, SGLANG, SglangMetadata
from tests.support.fakefoundry import FakeFoundry, FakeTensor

FP = Fingerprint.of({"sglang": "0.5.17", "torch": "2.11.0", "gpu": "NVIDIA H100"})


def sample(**changes: Any) -> SglangMetadata:
    values: dict[str, Any] = {
        "fingerprint": FP,
        "region_base": 0x600000000000,
        "region_size": 512 << 30,
        "high_water": 0x4000000,
        "phases": (PhaseMark("load_model", 0x400000, ((0, 4096),)),),
        "graphs": (GraphEntry("g0000.json", (("bs", 8),), 0x600000200000, {"tuple": ["tensor", None]}),),
        "max_total_tokens": 123456,
        **changes,
    }
    return SglangMetadata(**values)


def test_the_engines_file_round_trips_its_own_values(tmp_path: Path) -> None:
    path = FILE.write(tmp_path, sample())
    assert path == tmp_path / "sglang_plugin.json" and not list(tmp_path.glob("*.tmp"))
    doc = json.loads(path.read_text())
    assert doc["memory_pool"] == {"max_total_tokens": 123456} and "runner" not in doc
    assert FILE.read(tmp_path) == sample()
    FILE.write(tmp_path, sample(max_total_tokens=7))  # replaces the whole file
    assert FILE.read(tmp_path).max_total_tokens == 7


def test_a_missing_file_names_the_engine_and_its_variables(tmp_path: Path) -> None:
    (tmp_path / "vllm_plugin.json").write_text("{}")  # another engine's archive
    message = r"no finished SGLang SAVE.*FOUNDRY_SGLANG_MODE=save.*FOUNDRY_SGLANG_ARCHIVE"
    with pytest.raises(ArchiveMetadataError, match=message):
        FILE.read(tmp_path)


@pytest.mark.parametrize("damage", ["no engine values", "schema", "not an object"])
def test_a_damaged_or_foreign_file_is_refused(tmp_path: Path, damage: str) -> None:
    doc = sample().to_json()
    if damage == "no engine values":
        del doc["memory_pool"]
    elif damage == "schema":
        doc["schema"] = 1
    (tmp_path / FILE.name).write_text(json.dumps([] if damage == "not an object" else doc))
    with pytest.raises(ArchiveMetadataError, match=r"not a SGLang adapter metadata file.*run SAVE again"):
        FILE.read(tmp_path)


def test_engine_values_may_not_replace_the_common_ones() -> None:
    @dataclass(frozen=True)
    class Clashing(ArchiveMetadata):
        def engine_json(self) -> dict[str, Any]:
            return {"region": 0}

    with pytest.raises(ValueError, match=r"writes \['region'\]"):
        Clashing(FP, 0, 1, 0, (), ()).to_json()


def test_a_fingerprint_mismatch_lists_each_difference_and_what_to_do(tmp_path: Path) -> None:
    here = Fingerprint.of({"sglang": "0.5.18", "torch": "2.11.0", "gpu": "NVIDIA H200", "tp": 1})
    with pytest.raises(ArchiveMismatchError) as err:
        FILE.check_fingerprint(FP, here, tmp_path)
    text = str(err.value)
    assert "sglang: saved '0.5.17', here '0.5.18'" in text and "gpu: saved 'NVIDIA H100', here 'NVIDIA H200'" in text
    assert "tp: saved None, here '1'" in text and "torch:" not in text
    assert "Start SGLang with the settings it was saved with" in text and "FOUNDRY_SGLANG_MODE=save" in text
    FILE.check_fingerprint(FP, FP, tmp_path)


def test_software_fields_and_config_digest() -> None:
    torch = SimpleNamespace(__version__="2.11.0+cu130", version=SimpleNamespace(cuda="13.0"))
    fields = software_fields(torch, "NVIDIA H100")
    assert list(fields) == ["torch", "cuda", "foundry", "gpu"] and fields["cuda"] == "13.0"
    assert config_digest({"a": 1, "b": [2]}) == config_digest({"b": [2], "a": 1}) != config_digest({"a": 2})
    assert len(config_digest({"path": Path("/m")})) == 16


def test_an_output_of_another_type_is_refused_naming_the_engines_variable() -> None:
    assert shape_of((FakeTensor(1), [None, FakeTensor(2)]), "g", SGLANG) == {
        "tuple": ["tensor", {"list": [None, "tensor"]}]
    }
    with pytest.raises(UnsupportedConfigError, match=r"the graph for bs=8 returns a dict.*FOUNDRY_SGLANG_MODE=off"):
        shape_of({"logits": FakeTensor(1)}, "the graph for bs=8", SGLANG)


def test_a_missing_hook_target_names_the_engine_and_its_version() -> None:
    scheduler = type("Scheduler", (), {})
    with pytest.raises(PatchTargetError, match=r"SGLang has no Scheduler\.run.*\(0\.5\.17\).*FOUNDRY_SGLANG_MODE=off"):
        wrap(scheduler, "run", lambda f: f, SGLANG)


def test_capture_routing_for_a_module_that_is_not_there_names_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    absent = foundry_capture("sglang_runner_not_imported_foundry", FakeFoundry(), SGLANG)
    with pytest.raises(PatchTargetError, match=r"SGLang's capture is not where SGLang 0\.5\.17 has it"), absent:
        pass
    monkeypatch.setitem(sys.modules, "sglang_runner_foundry", ModuleType("sglang_runner_foundry"))
    without_torch = foundry_capture("sglang_runner_foundry", FakeFoundry(), SGLANG)
    with pytest.raises(PatchTargetError, match="does not use torch"), without_torch:
        pass
