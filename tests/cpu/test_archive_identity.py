"""Identity: JSON round trip, strict reading, comparison messages."""

from __future__ import annotations

from typing import Any

import pytest

from foundry.errors import ArchiveCorruptError
from foundry.schema import Identity, compare
from foundry.schema.identity import IDENTITY_FIELDS
from tests.support.samples import sample_identity


def test_json_round_trip() -> None:
    ident = sample_identity(torch_version=None)
    doc = ident.to_json()
    assert doc == {
        "gpu_name": "NVIDIA H100 80GB HBM3",
        "sm_count": 132,
        "compute_capability": [9, 0],
        "driver_version": 12080,
        "cuda_runtime_version": "12.8",
        "torch_version": None,
        "foundry_version": "0.1.0",
    }
    assert Identity.from_json(doc) == ident


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("gpu_name", None, "key 'gpu_name': expected a string, found null"),
        ("sm_count", True, "key 'sm_count': expected an integer, found bool"),
        ("sm_count", -1, "outside"),
        ("compute_capability", [9, 0, 1], "expected 2 elements"),
        ("compute_capability", [9, "0"], r"compute_capability\[1\]"),
        ("driver_version", 1.5, "float"),
        ("torch_version", 2, "torch_version"),
    ],
)
def test_from_json_rejects_bad_values(key: str, value: Any, needle: str) -> None:
    doc = sample_identity().to_json()
    doc[key] = value
    with pytest.raises(ArchiveCorruptError, match=needle):
        Identity.from_json(doc)


def test_from_json_names_a_missing_key() -> None:
    doc = sample_identity().to_json()
    del doc["foundry_version"]
    with pytest.raises(ArchiveCorruptError, match="key 'foundry_version': missing"):
        Identity.from_json(doc)
    with pytest.raises(ArchiveCorruptError, match="expected an object"):
        Identity.from_json([1, 2])


def test_identical_identities_do_not_mismatch() -> None:
    assert compare(sample_identity(), sample_identity()) == []


def test_mismatch_messages_name_both_values_and_the_consequence() -> None:
    saved = sample_identity()
    current = sample_identity(
        gpu_name="NVIDIA A100-SXM4-80GB",
        sm_count=108,
        compute_capability=(8, 0),
        driver_version=12040,
        torch_version="2.6.0",
    )
    found = {m.field: m for m in compare(saved, current)}
    assert list(found) == ["gpu_name", "sm_count", "compute_capability", "driver_version", "torch_version"]
    gpu = found["gpu_name"].message
    assert "NVIDIA H100 80GB HBM3" in gpu and "NVIDIA A100-SXM4-80GB" in gpu
    assert "may not run" in gpu and "occupancy" in gpu
    assert "9.0" in found["compute_capability"].message and "8.0" in found["compute_capability"].message
    assert "12080" in str(found["driver_version"]) and "12040" in str(found["driver_version"])
    assert "graph and module behaviour may differ" in found["driver_version"].message
    torch = found["torch_version"].message
    assert "'2.7.0'" in torch and "'2.6.0'" in torch and "allocation order" in torch
    assert found["sm_count"].saved == 132 and found["sm_count"].current == 108


def test_unknown_versions_never_mismatch() -> None:
    saved = sample_identity(torch_version=None, cuda_runtime_version="12.8")
    current = sample_identity(torch_version="2.6.0", cuda_runtime_version=None)
    assert compare(saved, current) == []
    assert [m.field for m in compare(sample_identity(), sample_identity(cuda_runtime_version="13.0"))] == [
        "cuda_runtime_version"
    ]


def test_ignore() -> None:
    current = sample_identity(driver_version=1, foundry_version="0.2.0")
    assert [m.field for m in compare(sample_identity(), current, frozenset({"driver_version"}))] == ["foundry_version"]
    assert compare(sample_identity(), current, frozenset(IDENTITY_FIELDS)) == []
    with pytest.raises(ValueError, match="gpu_model"):
        compare(sample_identity(), current, frozenset({"gpu_model"}))
