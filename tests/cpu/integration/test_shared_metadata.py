"""shared/metadata.py, fingerprint.py, outputs.py, hooks.py and capture.py for an engine other than vLLM:
its own metadata file with its own values, and refusals that name that engine and its variables."""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from foundry.archive import MANIFEST_NAME, read_manifest, write_manifest
from foundry.errors import ArchiveSignatureError
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
from foundry.schema import RecordRef
from foundry.schema.jsondocs import load_sealed
from foundry.storage import sha256_bytes
from tests.support.fakeengine import FILE, SGLANG, SglangMetadata
from tests.support.fakefoundry import FakeFoundry, FakeTensor, forge_document, write_fake_manifest

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


def _saved(archive: Path, meta: SglangMetadata) -> Path:
    """``meta`` written as SAVE writes it: the document, then a manifest listing it (and stating the region)."""
    api = FakeFoundry(base=meta.region_base, size=meta.region_size, high=meta.high_water)
    path = FILE.write(archive, meta, api)
    api.save_manifest(archive, documents=[FILE.name])
    return path


def test_the_engines_file_round_trips_its_own_values(tmp_path: Path) -> None:
    path = _saved(tmp_path, sample())
    assert path == tmp_path / "sglang_plugin.json" and not list(tmp_path.glob("*.tmp"))
    doc = load_sealed(path.read_bytes(), str(path))  # sealed as every archive JSON file is
    assert doc["format"] == "foundry-sglang-plugin" and doc["format_version"] == 4
    assert "region" not in doc  # the manifest's: the archive states it once (docs/FORMAT.md)
    assert doc["memory_pool"] == {"max_total_tokens": 123456} and "runner" not in doc
    assert FILE.read(tmp_path, FakeFoundry()) == sample()
    _saved(tmp_path, sample(max_total_tokens=7))  # replaces the whole file
    assert FILE.read(tmp_path).max_total_tokens == 7


@pytest.mark.parametrize("base", [0x600000000000, 0x700000000000])
def test_an_older_documents_copy_of_the_region_is_read_and_must_be_the_manifests(tmp_path: Path, base: int) -> None:
    """Format version 3 kept the region beside the manifest's: such a document still reads, its copy held to the
    manifest's (a copy naming another range comes from another save, and is refused by name)."""
    meta = sample()
    _saved(tmp_path, meta)

    def older(doc: dict[str, Any]) -> None:
        doc.update(format_version=3, region={"base": base, "size": meta.region_size, "high_water": 0x5000000})

    forge_document(tmp_path, FILE.name, older)
    if base == meta.region_base:
        assert FILE.read(tmp_path) == dataclasses.replace(meta, high_water=0x5000000)  # as it was read then
    else:
        with pytest.raises(ArchiveMetadataError, match=r"region \(base 0x700000000000 .* is not the manifest's"):
            FILE.read(tmp_path)


def test_a_missing_file_names_the_engine_and_its_variables(tmp_path: Path) -> None:
    (tmp_path / "vllm_plugin.json").write_text("{}")  # another engine's archive
    message = r"no finished SGLang SAVE.*FOUNDRY_SGLANG_MODE=save.*FOUNDRY_SGLANG_ARCHIVE"
    with pytest.raises(ArchiveMetadataError, match=message):
        FILE.read(tmp_path)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("no engine values", r"not a SGLang adapter metadata file.*run SAVE again"),
        ("version", r"format_version 2, this Foundry reads \[3, 4\].*run SAVE again"),
        ("format", r"is not SGLang's metadata \(format 'foundry-vllm-plugin'.*run SAVE again"),
        ("graph path", r"graph '\.\./elsewhere/g\.json' is not a graph file SAVE names.*Run SAVE again"),
        ("absolute graph path", r"graph '/etc/passwd\.json' is not a graph file SAVE names"),
        ("graph twice", r"graph 'g0000\.json' is not a graph file SAVE names \(.*named once"),
        ("batch key", r"graph 'g0000\.json' has a batch key .* holding more than numbers"),
        ("output shape", r"graph 'g0000\.json' has an output shape that holds \{'dict'"),
    ],
)
def test_a_foreign_or_edited_document_is_refused_by_what_it_says(tmp_path: Path, damage: str, message: str) -> None:
    """Sealed and listed again, as a forger without a key would: the plugin's own checks refuse it."""
    _saved(tmp_path, sample())

    def edit(doc: dict[str, Any]) -> None:
        graph = doc["graphs"][0]
        if damage == "no engine values":
            del doc["memory_pool"]
        elif damage == "version":
            doc["format_version"] = 2
        elif damage == "format":
            doc["format"] = "foundry-vllm-plugin"
        elif damage == "graph path":
            graph["json"] = "../elsewhere/g.json"
        elif damage == "absolute graph path":
            graph["json"] = "/etc/passwd.json"
        elif damage == "graph twice":
            doc["graphs"].append(dict(graph))
        elif damage == "batch key":
            graph["key"]["bs"] = [8]
        else:
            graph["outputs"] = {"dict": ["tensor"]}

    forge_document(tmp_path, FILE.name, edit)
    with pytest.raises(ArchiveMetadataError, match=message):
        FILE.read(tmp_path)


@pytest.mark.parametrize("damage", ["edited", "truncated", "unlisted", "no manifest", "not sealed"])
def test_a_document_the_manifest_does_not_vouch_for_is_refused_by_name(tmp_path: Path, damage: str) -> None:
    path = _saved(tmp_path, sample())
    data = path.read_bytes()
    if damage == "edited":  # one byte of a value, the file's length kept
        path.write_bytes(data.replace(b"123456", b"654321"))
        message = r"sglang_plugin\.json: the document's content SHA-256 is .* the archive lists"
    elif damage == "truncated":
        path.write_bytes(data[:-10])
        message = r"sglang_plugin\.json: the document is \d+ bytes, the archive says"
    elif damage == "unlisted":  # as an older Foundry wrote it: the manifest lists no document
        write_fake_manifest(tmp_path, [])
        message = r"sglang_plugin\.json: the manifest .* does not list this document: the archive was saved by an older"
    elif damage == "no manifest":  # SAVE stopped between the document and the manifest
        (tmp_path / MANIFEST_NAME).unlink()
        message = r"no graph_manifest\.json: not a Foundry archive, or SAVE did not finish"
    else:  # plain JSON, as before documents were sealed, listed with its own size and hash
        plain = json.dumps({"format": FILE.format, **sample().to_json()}).encode()
        path.write_bytes(plain)
        manifest = read_manifest(tmp_path)
        listed = RecordRef(FILE.name, len(plain), sha256_bytes(plain))
        write_manifest(tmp_path, dataclasses.replace(manifest, documents=(listed,)))
        message = r"sglang_plugin\.json: no 'digest' key at the end"
    with pytest.raises(ArchiveMetadataError, match=rf"SGLang metadata cannot be used \(.*{message}.*run SAVE again"):
        FILE.read(tmp_path)


def test_a_signed_archive_whose_metadata_changed_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "foundry.key"
    key.write_bytes(b"a signing key of thirty-two byte")
    monkeypatch.setenv("FOUNDRY_SIGNING_KEY", str(key))
    archive = tmp_path / "archive"
    _saved(archive, sample())  # signed, as SAVE signs with a key configured
    assert FILE.read(archive) == sample()
    forge_document(archive, FILE.name, lambda doc: doc["memory_pool"].update(max_total_tokens=1))
    with pytest.raises(ArchiveSignatureError, match=r"is not signed, and signing key"):
        FILE.read(archive)


def test_engine_values_may_not_replace_the_common_ones() -> None:
    @dataclass(frozen=True)
    class Clashing(ArchiveMetadata):
        def engine_json(self) -> dict[str, Any]:
            return {"phases": 0}

    with pytest.raises(ValueError, match=r"writes \['phases'\]"):
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
