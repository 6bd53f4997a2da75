"""Graph JSONs decoded with the lines they repeat shared (foundry.schema.jsontext): a value whose text is the
kept one is handed out as the same object, and whatever the text, the document is the one decoding it whole
gives (the same values, spelled the same) or decoding it whole fails with its own message."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest

from foundry.errors import ArchiveCorruptError
from foundry.load.source import _Sources
from foundry.schema import GraphMeta
from foundry.schema.jsondocs import seal
from foundry.schema.jsontext import DECODER, SHARED_KEYS, decode

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_archive" / "ew_bs32.json"


def _doc() -> dict[str, Any]:
    doc = json.loads(FIXTURE.read_text())
    doc.pop("digest", None)
    return doc


def _text(doc: dict[str, Any]) -> str:
    return seal(doc).decode()


def _outcome(decoder: Any, text: str) -> str:
    """What decoding gives, spelled out (``json.dumps`` tells 1 from 1.0 and true), or its error."""
    try:
        return "doc " + json.dumps(decoder(text))
    except (ValueError, RecursionError) as exc:
        return f"error {type(exc).__name__}: {exc}"


def test_a_repeated_line_is_decoded_once_and_shared() -> None:
    parts = _Sources()
    first, second = _doc(), _doc()
    second["name"] = "other"
    a, b = decode(_text(first), parts), decode(_text(second), parts)
    for key in SHARED_KEYS:
        assert a[key] is b[key], key
    assert json.dumps(b) == json.dumps(DECODER.decode(_text(second)))
    assert list(b) == list(DECODER.decode(_text(second)))  # the keys in file order


def test_a_value_spelled_otherwise_is_its_own_value() -> None:
    parts = _Sources()
    decode(_text(_doc()), parts)
    text = _text(_doc()).replace('"granularity": 2097152', '"granularity": 2097152.0', 1)
    assert "2097152.0" in text
    doc = decode(text, parts)
    assert type(doc["region"]["granularity"]) is float
    assert _outcome(lambda t: decode(t, parts), text) == _outcome(DECODER.decode, text)


def test_kernels_spelled_otherwise_are_checked_afresh_and_refused() -> None:
    """The kernels of a graph are taken as parsed before only where their text was the same: an attribute
    written 0.0 (equal to the 0 kept) is refused by name, as the graph read alone is."""
    parts = _Sources()
    GraphMeta.from_json(decode(_text(_doc()), parts), "good.json", parts)
    bad = _doc()
    bad["functions"][0]["attrs"][0] = float(bad["functions"][0]["attrs"][0])
    with pytest.raises(ArchiveCorruptError, match=r"bad\.json: key 'functions\[0\]\.attrs\[0\]': expected an integer"):
        GraphMeta.from_json(decode(_text(bad), parts), "bad.json", parts)
    with pytest.raises(ArchiveCorruptError, match=r"alone\.json: key 'functions\[0\]\.attrs\[0\]'"):
        GraphMeta.from_json(json.loads(_text(bad)), "alone.json")


def test_a_line_inside_another_value_is_not_taken_for_the_top_level_one() -> None:
    parts = _Sources()
    text = _text(_doc())
    decode(text, parts)  # the region's text is kept
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith('  "region": '))
    region = lines[at]
    lines[at] = '  "wrapped": {"x": 1,\n' + region + '\n  "y": 2},'
    nested = "\n".join(lines)
    doc = decode(nested, parts)
    assert "region" not in doc and doc["wrapped"]["region"]["size"] > 0
    assert _outcome(lambda t: decode(t, parts), nested) == _outcome(DECODER.decode, nested)


def test_a_repeated_key_decodes_as_json_decodes_it() -> None:
    """A key twice: the later value, at the first one's place, as ``json`` reads it."""
    parts = _Sources()
    text = _text(_doc())
    decode(text, parts)
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith('  "region": '))
    for other in (lines[at].replace('"size": ', '"size": 1', 1), lines[at]):
        twice = "\n".join([*lines[: at + 1], other, *lines[at + 1 :]])
        assert _outcome(lambda t: decode(t, parts), twice) == _outcome(DECODER.decode, twice)


@pytest.mark.parametrize(
    "damage",
    [
        lambda t: t.replace("]]", "]", 1),  # the region line no longer closes
        lambda t: t.replace('"functions": [', '"functions": [,', 1),
        lambda t: t.replace('"identity": {', '"identity": {NaN, ', 1),
        lambda t: t.replace(",\n", "\n", 3),
    ],
)
def test_a_damaged_line_fails_with_the_whole_texts_error(damage: Any) -> None:
    parts = _Sources()
    decode(_text(_doc()), parts)
    text = damage(_text(_doc()))
    outcome = _outcome(lambda t: decode(t, parts), text)
    assert outcome.startswith("error") and outcome == _outcome(DECODER.decode, text)


def test_edited_texts_decode_as_they_do_whole() -> None:
    """Random edits (characters in and out, lines repeated and swapped, in the shared lines and around them):
    every text decodes to what decoding it whole gives, or fails with the same error."""
    rng = random.Random(7)
    base = [_text(_doc())]
    other = _doc()
    other["functions"] = list(reversed(other["functions"]))
    base.append(_text(other))
    snippets = ['"region": ', '\n  "region": ', ",\n", "{", "}", "[", "]", '"', "1.0", "true", " ", "\n", ","]
    parts = _Sources()
    shared = 0
    for _ in range(3000):
        text = rng.choice(base)
        for _ in range(rng.randint(0, 3)):
            lines = text.split("\n")
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            pick = rng.randrange(4)
            if pick == 0:
                k = rng.randrange(len(text))
                text = text[:k] + rng.choice(snippets) + text[k:]
            elif pick == 1:
                k = rng.randrange(len(text))
                text = text[:k] + text[k + rng.randint(1, 4) :]
            elif pick == 2:
                text = "\n".join([*lines[:j], lines[i], *lines[j:]])
            else:
                lines[i], lines[j] = lines[j], lines[i]
                text = "\n".join(lines)
        got = _outcome(lambda t: decode(t, parts), text)
        assert got == _outcome(DECODER.decode, text), text
        kept = parts.parts.get("text:region")
        if got.startswith("doc") and kept is not None:
            shared += decode(text, parts).get("region") is kept[1]
    assert shared > 300  # the shared path answered for many of them


def test_without_parts_nothing_is_shared() -> None:
    text = _text(_doc())
    assert decode(text)["region"] is not decode(text)["region"]
    assert copy.deepcopy(decode(text)) == DECODER.decode(text)
