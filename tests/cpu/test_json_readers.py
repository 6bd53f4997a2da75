"""The strict JSON readers' fast paths (foundry.schema.jsonfields): a place (``At``) spells its key path only
when a value is refused, and the one-key readers (``field_int`` and the like) and ``ints_within`` take exactly
what the plain readers take; a refusal names the same key, deep in a graph's metadata too."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from foundry.errors import ArchiveCorruptError
from foundry.load.source import _Sources
from foundry.schema import GraphMeta
from foundry.schema.jsonfields import (
    I32,
    U32,
    U64,
    At,
    field,
    field_int,
    field_relpath,
    field_sha256,
    field_str,
    get_int,
    get_relpath,
    get_sha256,
    get_str,
    ints_within,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_archive" / "ew_bs32.json"
SHA = "ab" * 32
U64_TEXT = f"0..{U64[1]}"


def _doc() -> dict[str, Any]:
    doc = json.loads(FIXTURE.read_text())
    doc.pop("digest", None)
    return doc


def _first_image(d: dict[str, Any]) -> str:
    return next(iter(d["images"]))


def test_a_place_spells_its_path_as_keys_and_indices() -> None:
    top = At("f.json")
    assert top.path == "" and top.index(0).path == "[0]"
    deep = top.key("region").key("events").index(3).index(2)
    assert deep.path == "region.events[3][2]" and deep.source == "f.json"
    assert At("f.json", "identity").key("sm_count").path == "identity.sm_count"
    with pytest.raises(ArchiveCorruptError, match=r"^f\.json: key 'region\.events\[3\]\[2\]': bad$"):
        deep.fail("bad")
    with pytest.raises(ArchiveCorruptError, match=r"^f\.json: top level: bad$"):
        top.fail("bad")


VALUES = [0, 1, -1, U32[1] + 1, U64[1], U64[1] + 1, True, False, 1.0, None, "", "x", "a/b", "../x", "/x", ".", "a\0b",
          SHA, SHA.upper(), [], {}]  # fmt: skip
READERS = [
    (field_int, lambda v, at: get_int(v, at), ()),
    (field_int, lambda v, at: get_int(v, at, U32), (U32,)),
    (field_str, get_str, ()),
    (field_sha256, get_sha256, ()),
    (field_relpath, get_relpath, ()),
    (field_relpath, lambda v, at: get_relpath(v, at, bare=True), (False, True)),
    (field_relpath, lambda v, at: get_relpath(v, at, parents=True), (True,)),
]


def _outcome(read: Any) -> str:
    try:
        return f"value {read()!r} {type(read()).__name__}"
    except ArchiveCorruptError as exc:
        return f"refused {exc}"


@pytest.mark.parametrize(("fast", "plain", "extra"), READERS)
def test_one_key_readers_take_and_refuse_what_the_plain_readers_do(fast: Any, plain: Any, extra: tuple) -> None:
    at = At("f.json").key("outer")
    for value in VALUES:
        obj: dict[str, Any] = {"k": copy.deepcopy(value)}
        got = _outcome(lambda: fast(obj, "k", at, *extra))  # noqa: B023 - called at once
        assert got == _outcome(lambda: plain(*field(obj, "k", at))), value  # noqa: B023
    with pytest.raises(ArchiveCorruptError, match=r"^f\.json: key 'outer\.k': missing$"):
        fast({}, "k", at, *extra)


def test_ints_within_is_the_per_value_rule() -> None:
    cases = [[], [0], [1, 2, 3], [True], [1, False], [1.0], [0, -1], [2**31 - 1], [2**31], [-(2**31)], [None], ["1"]]
    for values in cases:
        expected = all(type(v) is int and I32[0] <= v <= I32[1] for v in values)
        assert ints_within(values, *I32) is expected, values
        assert ints_within(dict(enumerate(values)).values(), *I32) is expected, values


def _images_variables(d: dict[str, Any]) -> None:
    d["format_version"] = 3  # from which on every image states its variables
    for image in d["images"].values():
        image.setdefault("variables", [])
    del d["images"][_first_image(d)]["variables"]


def _variable_name(d: dict[str, Any]) -> None:
    d["images"][_first_image(d)]["variables"] = [{"name": "", "bytes": 4, "sha256": SHA}]


def _set(*path: Any) -> Any:
    """A damage: the value at ``path[:-1]`` set to ``path[-1]`` (a key missing when it is ``_GONE``)."""

    def damage(d: dict[str, Any]) -> None:
        *keys, last, value = path
        for k in keys:
            d = d[k]
        if value is _GONE:
            del d[last]
        else:
            d[last] = value

    return damage


_GONE = object()


def _outputs_bad_shape_no_strides(d: dict[str, Any]) -> None:
    d["outputs"][0]["shape"] = [-1]
    del d["outputs"][0]["strides"]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_set("region", "events", 1, 2, -1), f"key 'region.events[1][2]': -1 is outside {U64_TEXT}"),
        (_set("functions", 1, "attrs", 6, True), "key 'functions[1].attrs[6]': expected an integer, found bool"),
        (_set("functions", 0, "name", ""), "key 'functions[0].name': empty kernel name"),
        (_images_variables, "key 'images.{sha}.variables': missing"),
        (_variable_name, "key 'images.{sha}.variables[0].name': a variable name must be non-empty"),
        (_set("stats", "nodes", "2"), "key 'stats.nodes': expected an integer, found str"),
        (_set("outputs", 0, "shape", 0, -1), f"key 'outputs[0].shape[0]': -1 is outside 0..{2**63 - 1}"),
        (_set("outputs", 0, "nbytes", _GONE), "key 'outputs[0].nbytes': missing"),
        (_set("outputs", 0, "strides", [1]), "key 'outputs[0].strides': expected 2 elements, found 1"),
        (_outputs_bad_shape_no_strides, "key 'outputs[0].strides': missing"),  # keys before values, as before
        (_set("record", "sha256", SHA.upper()), "key 'record.sha256': expected a lower-case hex SHA-256"),
        (_set("record", "file", "a/b"), "key 'record.file': 'a/b' is not a bare file name"),
        (_set("template", "json", "../t.json"), "key 'template.json': '../t.json' leaves the directory"),
        (_set("events", U32[1] + 1), f"key 'events': {U32[1] + 1} is outside 0..{U32[1]}"),
        (_set("name", _GONE), "key 'name': missing"),
        (_set("topology", 7), "key 'topology': expected a lower-case hex SHA-256, found 7"),
        (_set("identity", "compute_capability", 1, 1.5), "key 'identity.compute_capability[1]': expected an integer"),
        (_set("identity", "sm_count", None), "key 'identity.sm_count': expected an integer, found null"),
    ],
)
def test_a_value_refused_deep_in_a_graph_is_named_by_its_key(damage: Any, message: str) -> None:
    """Alone and after a good graph kept its parts: the message names the file and the key path exactly."""
    bad = _doc()
    damage(bad)
    expected = "bad.json: " + message.format(sha=_first_image(bad))
    for parts in (None, _Sources()):
        if parts is not None:
            GraphMeta.from_json(_doc(), "good.json", parts)
        with pytest.raises(ArchiveCorruptError) as info:
            GraphMeta.from_json(copy.deepcopy(bad), "bad.json", parts)
        assert str(info.value).startswith(expected), (str(info.value), expected)
