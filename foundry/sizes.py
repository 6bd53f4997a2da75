"""Human-readable sizes."""

from __future__ import annotations

import re

__all__ = ["format_size", "parse_size"]

_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}  # fmt: skip
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(size: int | str) -> int:
    """Bytes in ``size``: an int, ``"0x..."``, or a number with a binary unit (``"16GB"`` = 16 GiB).

    Units are powers of 1024 whether or not they carry an ``i``, as GPU memory is sized that way.
    """
    if isinstance(size, bool):
        raise TypeError("a size must be an int or a string such as '16GB', not a bool")
    if isinstance(size, int):
        if size < 0:
            raise ValueError(f"size {size} is negative")
        return size
    if not isinstance(size, str):
        raise TypeError(f"a size must be an int or a string such as '16GB', not {type(size).__name__}")
    text = size.strip()
    if text.lower().startswith("0x"):
        return int(text, 16)
    match = _PATTERN.match(text)
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS:
        raise ValueError(f"cannot parse size {size!r}: use a number with an optional unit (B, KB, MB, GB, TB)")
    return int(float(match.group(1)) * _UNITS[unit])


def format_size(n: int) -> str:
    """``1.5 GiB`` style rendering for reports."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
