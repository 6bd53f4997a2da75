"""Decoding archive JSON text: one decoder for every file, and, for a reader of many graph files, the lines
they repeat decoded once.

SAVE writes each top-level key of a graph JSON on a line of its own (``jsondocs.dump_json``), and the graphs
of an archive repeat some of those lines byte for byte: the allocation region (most of a small graph's file),
the machine identity, the images, and often the kernels. ``decode`` with ``Parts`` decodes such a value once
while its text stays the same and hands every file that same decoded value, which a reader's ``Parts`` then
knows by identity. Equal text is the same value spelled the same way, so nothing is taken that decoding the
file whole would refuse or read otherwise.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any, NoReturn, Protocol, TypeVar

__all__ = ["DECODER", "SHARED_KEYS", "Parts", "decode"]

T = TypeVar("T")


class Parts(Protocol):
    """What a reader of many graph JSONs keeps of the parts they repeat (an archive's graphs share their
    region, machine identity, images and often kernels): ``parse(raw)`` once, and for a later ``raw`` the same
    as the one kept under ``kind``, the value it gave. Never for a value merely equal to it: ``4.0`` and
    ``true`` equal ``4`` and ``1`` in Python, and the format refuses them where it takes an integer."""

    def part(self, kind: str, raw: str, parse: Callable[[str], T]) -> T:
        """For a ``raw`` text equal to the one kept (texts are equal only when they are the same characters)."""
        ...

    def same(self, kind: str, raw: Any, parse: Callable[[Any], T]) -> T:
        """For a ``raw`` that is the very object kept (``decode`` hands files whose text of a value is the same
        that one object): no value spelled otherwise is ever taken for it."""
        ...


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not allowed in archive JSON")


DECODER = json.JSONDecoder(parse_constant=_no_constant)
"""The decoder of every archive file, shared between threads as ``json.loads`` shares its own."""

SHARED_KEYS = ("functions", "images", "region", "identity")
"""The top-level keys of a graph JSON whose value ``decode`` shares between files that spell it alike, in the
order SAVE writes them."""
_HEADS = tuple((key, f'\n  "{key}": ') for key in SHARED_KEYS)
# In place of a shared value while the rest of a text is decoded: a string no file holds (none can know it).
_STANDIN = "\0" + secrets.token_hex(16)
_STANDIN_TEXT = json.dumps(_STANDIN)


def decode(text: str, parts: Parts | None = None) -> Any:
    """``DECODER.decode(text)``. With ``parts``, the value of a ``SHARED_KEYS`` line (one complete object or
    list, written as SAVE writes it) whose text is the one ``parts`` kept under ``text:<key>`` is taken as
    decoded then, one object for all such files: the caller must not change the values of the document.

    Why this is the text's own document: the rest of the text is decoded with a stand-in string in place of
    each such value, right after the value's own key. Where the stand-in comes out as the value of that key at
    the top level, the value text stood there as one whole value (it decodes alone, and neither it nor the
    stand-in can run into the text beside it), so decoding the text whole gives that value there and
    everything else as decoded. Anything else (a line not as SAVE writes it, a key repeated, a text that does
    not decode) is decoded whole, and fails with that decoding's own error."""
    if parts is None:
        return DECODER.decode(text)
    pieces: list[str] = []
    shared: dict[str, Any] = {}
    done = 0
    try:
        for key, head in _HEADS:  # in the order SAVE writes them; a line out of that order is decoded with the rest
            start = text.find(head, done) + len(head)
            end = text.find(",\n", start)
            if start >= len(head) and end > start and text[start] in "{[":
                shared[key] = parts.part("text:" + key, text[start:end], DECODER.decode)
                pieces += (text[done:start], _STANDIN_TEXT)
                done = end
        pieces.append(text[done:])
        doc = DECODER.decode("".join(pieces))
    except (ValueError, RecursionError):
        return DECODER.decode(text)
    if type(doc) is not dict or any(doc.get(key) != _STANDIN for key in shared):
        return DECODER.decode(text)
    doc.update(shared)
    return doc
