"""The adapter's metadata file: round trip, refusal of missing or foreign files, fingerprint comparison."""

from __future__ import annotations

from pathlib import Path

import pytest

from foundry.integration.vllm import ArchiveMetadata, ArchiveMetadataError, ArchiveMismatchError, read_metadata
from foundry.integration.vllm.metadata import (
    METADATA_NAME,
    Fingerprint,
    GraphEntry,
    PhaseMark,
    check_fingerprint,
    write_metadata,
)
from foundry.schema.jsondocs import load_sealed
from tests.support.fakefoundry import forge_document, write_fake_manifest

OUT = 0x600000200000
FP = Fingerprint.of({"vllm": "0.26.0", "torch": "2.11.0+cu130", "model": "/m", "gpu": "NVIDIA H200"})


def sample() -> ArchiveMetadata:
    return ArchiveMetadata(
        fingerprint=FP,
        runner="v2",
        region_base=0x600000000000,
        region_size=512 << 30,
        kv_cache_bytes=40 << 30,
        num_gpu_blocks=18724,
        high_water=0x1234000,
        phases=(PhaseMark("init_device", 0x400000, ((0, 4096), (0x200000, 8192))), PhaseMark("load_model", 0x800000)),
        graphs=(
            GraphEntry("graph_000_t8.json", (("cg_mode", "FULL"), ("num_tokens", 8), ("num_reqs", 8)), OUT),
            GraphEntry("graph_001_t1.json", (("cg_mode", "FULL"), ("num_tokens", 1), ("num_reqs", None)), OUT),
        ),
        timings=(("capture_s", 1.5),),
    )


def _saved(archive: Path, meta: ArchiveMetadata) -> Path:
    """``meta`` written as SAVE writes it: the document, then a manifest listing it."""
    path = write_metadata(archive, meta)
    write_fake_manifest(archive, [METADATA_NAME], meta.region_base, meta.region_size, meta.high_water)
    return path


def test_round_trip(tmp_path: Path) -> None:
    meta = sample()
    path = _saved(tmp_path, meta)
    assert path == tmp_path / METADATA_NAME and not list(tmp_path.glob("*.tmp"))
    assert read_metadata(tmp_path) == meta
    assert meta.graphs[1].key_dict() == {"cg_mode": "FULL", "num_tokens": 1, "num_reqs": None}


def test_the_custom_all_reduces_registrations_round_trip_and_their_absence_reads_as_off(tmp_path: Path) -> None:
    import dataclasses

    from foundry.ranks.registrations import PeerRegistration

    meta = dataclasses.replace(sample(), custom_all_reduce=(PeerRegistration(3, (0x600000400000, 0x600000400200)),))
    for name, written in (("on", meta), ("off", sample())):
        (tmp_path / name).mkdir()
        _saved(tmp_path / name, written)
    assert read_metadata(tmp_path / "on") == meta
    assert read_metadata(tmp_path / "off").custom_all_reduce is None


def test_missing_metadata_says_to_run_save(tmp_path: Path) -> None:
    with pytest.raises(ArchiveMetadataError, match=r"no finished vLLM SAVE.*FOUNDRY_VLLM_MODE=save"):
        read_metadata(tmp_path)


@pytest.mark.parametrize("text", ["not json", "[]", '{"schema": 99}', '{"schema": 1, "fingerprint": {}}'])
def test_foreign_or_damaged_metadata_is_refused(tmp_path: Path, text: str) -> None:
    _saved(tmp_path, sample())
    (tmp_path / METADATA_NAME).write_text(text)  # not the bytes the manifest lists
    with pytest.raises(ArchiveMetadataError, match=r"vllm_plugin\.json: the document .* run SAVE again"):
        read_metadata(tmp_path)


def test_a_listed_document_of_an_older_schema_is_refused(tmp_path: Path) -> None:
    _saved(tmp_path, sample())
    forge_document(tmp_path, METADATA_NAME, lambda doc: doc.update(format_version=2))
    with pytest.raises(ArchiveMetadataError, match=r"format_version 2, this Foundry reads \[3, 4\].*run SAVE again"):
        read_metadata(tmp_path)


def test_a_phase_the_archive_lacks_is_named() -> None:
    with pytest.raises(ArchiveMetadataError, match="no start-up phase 'kv_cache'"):
        sample().phase("kv_cache")


def test_fingerprint_mismatch_lists_every_difference(tmp_path: Path) -> None:
    here = Fingerprint.of({"vllm": "0.26.1", "torch": "2.11.0+cu130", "model": "/m", "gpu": "NVIDIA H100", "new": 1})
    with pytest.raises(ArchiveMismatchError) as err:
        check_fingerprint(FP, here, tmp_path)
    text = str(err.value)
    assert "vllm: saved '0.26.0', here '0.26.1'" in text and "gpu: saved 'NVIDIA H200', here 'NVIDIA H100'" in text
    assert "new: saved None, here '1'" in text and "torch" not in text.split("Its graphs")[0].split(":", 1)[1]
    check_fingerprint(FP, FP, tmp_path)


def test_written_file_is_sealed_json(tmp_path: Path) -> None:
    write_metadata(tmp_path, sample())
    doc = load_sealed((tmp_path / METADATA_NAME).read_bytes(), METADATA_NAME)
    assert list(doc)[:2] == ["format", "format_version"] and doc["format"] == "foundry-vllm-plugin"
    assert doc["kv_cache"] == {"bytes": 40 << 30, "num_gpu_blocks": 18724}
    assert doc["phases"][0]["allocations"] == [[0, 4096], [0x200000, 8192]]


def test_the_fingerprint_names_expert_parallel(monkeypatch: pytest.MonkeyPatch) -> None:
    """An archive saved with expert parallel holds each rank's share of the experts: LOAD without it (or the other
    way round) is refused by name, before the GPU is touched."""
    import sys
    from types import SimpleNamespace

    from foundry.integration.vllm.fingerprint import describe
    from tests.support.fakevllm_config import make_config

    monkeypatch.setitem(
        sys.modules, "torch", SimpleNamespace(__version__="2.11.0", version=SimpleNamespace(cuda="13.0"))
    )
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(__version__="0.26.0"))
    plain = make_config(tp=2, disable_custom_all_reduce=True)
    expert = make_config(tp=2, disable_custom_all_reduce=True)
    expert.parallel_config.enable_expert_parallel = True
    saved, here = describe(expert, "Fake H200"), describe(plain, "Fake H200")
    assert saved.as_dict()["expert_parallel"] == "True"
    assert ("expert_parallel", "True", "False") in saved.differences(here)
