"""Graph metadata parsed with ``Parts`` (foundry.format.metadata): the parts an archive's graphs repeat
(region, identity, images) are checked once and reused for equal values, and a value that differs is
checked afresh, so a damaged one is still refused by name."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from foundry.errors import ArchiveCorruptError
from foundry.format import GraphMeta
from foundry.load.source import _Sources

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_archive" / "ew_bs32.json"


def _doc() -> dict[str, Any]:
    doc = json.loads(FIXTURE.read_text())
    doc.pop("digest", None)
    return doc


def test_equal_parts_are_parsed_once_and_give_what_the_plain_parse_gives() -> None:
    parts = _Sources()
    calls: list[str] = []
    real = parts.part

    def counting(kind: str, raw: Any, parse: Any) -> Any:
        return real(kind, raw, lambda v: (calls.append(kind), parse(v))[1])

    parts.part = counting  # type: ignore[method-assign]
    first = GraphMeta.from_json(_doc(), "a.json", parts)
    second = GraphMeta.from_json(_doc(), "b.json", parts)
    assert first == GraphMeta.from_json(_doc(), "a.json") and second == first
    assert sorted(calls) == ["identity", "images", "region"]  # the second graph's were reused
    assert second.region is first.region and second.identity is first.identity


@pytest.mark.parametrize(
    ("damage", "where"),
    [
        (lambda d: d["region"]["live"].append([1, "x"]), "region.live"),
        (lambda d: d["region"].__setitem__("granularity", -1), "region.granularity"),
        (lambda d: d["identity"].pop("driver_version", None) or d["identity"].clear(), "identity"),
    ],
)
def test_a_part_that_differs_from_the_kept_one_is_checked_and_refused(damage: Any, where: str) -> None:
    parts = _Sources()
    GraphMeta.from_json(_doc(), "good.json", parts)
    bad = copy.deepcopy(_doc())
    damage(bad)
    with pytest.raises(ArchiveCorruptError, match=r"bad\.json") as info:
        GraphMeta.from_json(bad, "bad.json", parts)
    assert where.split(".")[0] in str(info.value)
