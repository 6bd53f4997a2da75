"""The background loader's plan: which images load in which order, and what each graph waits for."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from foundry.load import Loader
from foundry.load.loader import _Pipeline


def _source(name: str, images: list[str], template: Any = None) -> Any:
    refs = [SimpleNamespace(sha256=sha, bytes=100) for sha in images]
    return SimpleNamespace(
        name=name, meta=SimpleNamespace(images=refs), archive_dir=Path("/a"), template=template, json_path=Path(name)
    )


def test_images_load_group_by_group_with_the_first_paths_group_first() -> None:
    shared = "s" * 64
    t1 = _source("t1", [shared, "a" * 64])
    t2 = _source("t2", [shared, "b" * 64])
    m1 = _source("m1", [shared, "c" * 64], template=t1)
    m2 = _source("m2", [shared, "d" * 64], template=t2)
    # Paths: m2 first (its group is wanted first), then t1, m1, t2.
    loader = Loader([m2, t1, m1, t2], defer_dedicated=True)
    assert [g.template.name for g in loader.groups] == ["t2", "t1"]
    sources, order, missing = _Pipeline(loader, 0, None).plan()  # type: ignore[arg-type]
    assert [s.name for s in sources] == ["t2", "m2", "t1", "m1"]
    assert list(order) == [shared, "b" * 64, "d" * 64, "a" * 64, "c" * 64]
    # A member waits for its template's images too (source_images includes them).
    assert missing[id(m2)] == {shared, "d" * 64, "b" * 64}
    assert missing[id(t1)] == {shared, "a" * 64}
