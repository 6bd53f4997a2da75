"""Graph metadata parsed with ``Parts`` (foundry.schema.graphmeta): the parts an archive's graphs repeat
(region, identity, images, kernels) are checked once and reused for the same text, and a value spelled
otherwise is checked afresh, so a damaged one is still refused by name, and so is one merely equal to the
kept one (``4.0`` for ``4``, ``true`` for ``1``), as verify and the plain parse refuse it."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from foundry import _state
from foundry.errors import ArchiveCorruptError
from foundry.load import preflight
from foundry.load.source import _Sources, read_sources
from foundry.schema import GraphMeta
from foundry.schema.jsondocs import load_sealed
from foundry.verify import verify_archive
from tests.support.archive_damage import edit_doc, relist
from tests.support.verify_archives import build_archive

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_archive" / "ew_bs32.json"


def _doc() -> dict[str, Any]:
    doc = json.loads(FIXTURE.read_text())
    doc.pop("digest", None)
    return doc


def test_parts_of_the_same_text_are_parsed_once_and_give_what_the_plain_parse_gives() -> None:
    parts = _Sources()
    calls: list[str] = []
    real = parts.same

    def counting(kind: str, raw: Any, parse: Any) -> Any:
        return real(kind, raw, lambda v: (calls.append(kind), parse(v))[1])

    parts.same = counting  # type: ignore[method-assign]
    data = FIXTURE.read_bytes()
    first = GraphMeta.from_json(load_sealed(data, "a.json", parts=parts), "a.json", parts)
    second = GraphMeta.from_json(load_sealed(data, "b.json", parts=parts), "b.json", parts)
    assert first == GraphMeta.from_json(_doc(), "a.json") and second == first
    assert sorted(calls) == ["functions", "identity", "images", "region"]  # the second graph's were reused
    assert second.region is first.region and second.identity is first.identity and second.images is first.images


EQUAL_BUT_SPELLED_OTHERWISE: list[tuple[Callable[[dict[str, Any]], object], str]] = [
    (lambda d: d["region"].update(granularity=float(d["region"]["granularity"])), "region.granularity"),
    (lambda d: d["region"]["events"][0].__setitem__(1, True), "region.events[0][1]"),
    (lambda d: d["identity"].update(sm_count=float(d["identity"]["sm_count"])), "identity.sm_count"),
    (lambda d: [v.update(bytes=float(v["bytes"])) for v in d["images"].values()], "images"),
]


@pytest.mark.parametrize(("edit", "where"), EQUAL_BUT_SPELLED_OTHERWISE)
def test_a_part_equal_to_the_kept_one_but_spelled_otherwise_is_checked_afresh(
    edit: Callable[[dict[str, Any]], object], where: str
) -> None:
    parts = _Sources()
    GraphMeta.from_json(load_sealed(FIXTURE.read_bytes(), "good.json", parts=parts), "good.json", parts)
    bad = _doc()
    edit(bad)
    assert bad == _doc()  # equal as Python values: what a cache comparing values would take
    with pytest.raises(ArchiveCorruptError, match=r"bad\.json.*expected an integer") as info:
        GraphMeta.from_json(bad, "bad.json", parts)
    assert where.split(".")[0].split("[")[0] in str(info.value)


@pytest.mark.parametrize(("edit", "where"), EQUAL_BUT_SPELLED_OTHERWISE[:2])
def test_load_refuses_what_verify_refuses_after_a_graph_that_spelled_it_right(
    tmp_path: Path, edit: Callable[[dict[str, Any]], object], where: str
) -> None:
    """LOAD's metadata cache, kept across an archive's graphs: graph_1's region equal to graph_0's as values
    but not as integers (the archive sealed and listed again, as a forger would) is refused by LOAD as by
    verify and the preflight."""
    _state.reset_all()
    arch = build_archive(tmp_path / "arch")
    edit_doc(arch / "graph_1.json", edit)
    relist(arch / "graph_1.json")
    paths = [arch / "graph_0.json", arch / "graph_1.json"]
    assert not verify_archive(arch).ok
    with pytest.raises(ArchiveCorruptError, match="expected an integer"):
        preflight(paths)
    _state.reset_all()
    with pytest.raises(ArchiveCorruptError, match=r"graph_1\.json.*expected an integer"):
        read_sources(paths, lazy=True)


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
