"""Plain-text tables for reports people compare, and counted nouns in their sentences."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

__all__ = ["plural", "table"]


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` and the noun agreeing with it: ``1 edge``, ``2 edges`` (``nouns``: an irregular plural)."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], width: int | None = None) -> str:
    """Columns left-aligned for text, right-aligned for numbers. With ``width``, the last column is
    wrapped so that no line is longer (its continuation lines leave the other columns blank)."""
    cells = [[str(c) for c in row] for row in rows]
    numeric = [all(isinstance(row[i], int | float) for row in rows) and bool(rows) for i in range(len(headers))]
    if width is not None and headers:
        lead = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers[:-1])]
        room = max(width - sum(lead) - 2 * len(lead), len(headers[-1]), 20)
        wrapped: list[list[str]] = []
        for row in cells:
            parts = textwrap.wrap(row[-1], room, break_long_words=False, break_on_hyphens=False) or [""]
            wrapped.append([*row[:-1], parts[0]])
            wrapped += [[""] * (len(row) - 1) + [part] for part in parts[1:]]
        cells = wrapped
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        cols = zip(values, widths, numeric, strict=True)
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in cols).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out)
