"""Strict readers of JSON values, and the one JSON dialect every archive file is written in.

Each reader takes an ``At`` (the file and the key path being read) and raises
``ArchiveCorruptError`` naming both when a value is missing or of the wrong type or range. Booleans
are never accepted as integers. Keys a reader does not ask for are ignored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, NoReturn

from foundry.errors import ArchiveCorruptError, ArchiveForeignError, ArchiveVersionError

__all__ = [
    "I32",
    "I64",
    "U32",
    "U64",
    "At",
    "check_format",
    "dump_json",
    "field",
    "get_int",
    "get_int_list",
    "get_int_rows",
    "get_list",
    "get_obj",
    "get_opt_str",
    "get_sha256",
    "get_str",
    "is_sha256",
    "load_json",
]

U32 = (0, 2**32 - 1)
U64 = (0, 2**64 - 1)
I32 = (-(2**31), 2**31 - 1)
I64 = (-(2**63), 2**63 - 1)

_SHA256 = re.compile(r"[0-9a-f]{64}")


def is_sha256(value: object) -> bool:
    """True for a lower-case hex SHA-256 string."""
    return isinstance(value, str) and _SHA256.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class At:
    """A place in a JSON document: ``source`` (usually a file name) and a key path."""

    source: str
    path: str = ""

    def key(self, name: str) -> At:
        return At(self.source, f"{self.path}.{name}" if self.path else name)

    def index(self, i: int) -> At:
        return At(self.source, f"{self.path}[{i}]")

    def fail(self, problem: str) -> NoReturn:
        where = f"key {self.path!r}" if self.path else "top level"
        raise ArchiveCorruptError(f"{self.source}: {where}: {problem}")


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def get_obj(value: Any, at: At) -> dict[str, Any]:
    if not isinstance(value, dict):
        at.fail(f"expected an object, found {_kind(value)}")
    return value


def get_list(value: Any, at: At, length: int | None = None) -> list[Any]:
    if not isinstance(value, list):
        at.fail(f"expected a list, found {_kind(value)}")
    if length is not None and len(value) != length:
        at.fail(f"expected {length} elements, found {len(value)}")
    return value


def get_int(value: Any, at: At, bounds: tuple[int, int] = U64) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        at.fail(f"expected an integer, found {_kind(value)}")
    lo, hi = bounds
    if not lo <= value <= hi:
        at.fail(f"{value} is outside {lo}..{hi}")
    return value


def get_int_list(value: Any, at: At, length: int | None = None, bounds: tuple[int, int] = U64) -> tuple[int, ...]:
    """A list of integers, checked with a fast path (graph metadata holds thousands of them); the
    slow path only runs to name the offending element."""
    items = get_list(value, at, length)
    lo, hi = bounds
    if all(type(v) is int and lo <= v <= hi for v in items):
        return tuple(items)
    for i, v in enumerate(items):
        get_int(v, at.index(i), bounds)
    raise AssertionError("unreachable")  # pragma: no cover - the loop above raised


def get_int_rows(value: Any, at: At, columns: tuple[tuple[int, int], ...]) -> tuple[tuple[int, ...], ...]:
    """A list of fixed-width integer rows, ``columns`` giving each column's bounds."""
    rows = get_list(value, at)
    width = len(columns)
    if all(type(r) is list and len(r) == width for r in rows):
        flat = [v for r in rows for v in r]
        if all(type(v) is int for v in flat) and all(
            not flat or (lo <= min(flat[k::width]) and max(flat[k::width]) <= hi) for k, (lo, hi) in enumerate(columns)
        ):
            return tuple(map(tuple, rows))
    for i, row in enumerate(rows):  # slow path: find and name the first bad value
        row_at = at.index(i)
        get_list(row, row_at, width)
        for k, v in enumerate(row):
            get_int(v, row_at.index(k), columns[k])
    raise AssertionError("unreachable")  # pragma: no cover - the loop above raised


def get_str(value: Any, at: At) -> str:
    if not isinstance(value, str):
        at.fail(f"expected a string, found {_kind(value)}")
    return value


def get_opt_str(value: Any, at: At) -> str | None:
    return None if value is None else get_str(value, at)


def get_sha256(value: Any, at: At) -> str:
    if not is_sha256(value):
        at.fail(f"expected a lower-case hex SHA-256, found {value!r:.80}")
    return str(value)


def field(obj: dict[str, Any], name: str, at: At) -> tuple[Any, At]:
    """``obj[name]`` and its place; a missing key raises ``ArchiveCorruptError`` naming it."""
    sub = at.key(name)
    if name not in obj:
        sub.fail("missing")
    return obj[name], sub


def load_json(data: bytes | bytearray, source: str) -> Any:
    """Decode UTF-8 JSON; malformed text raises ``ArchiveCorruptError`` naming ``source``."""
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise ArchiveCorruptError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:
        raise ArchiveCorruptError(f"{source}: not valid JSON: {exc}") from None


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not allowed in archive JSON")


def dump_json(obj: Any) -> bytes:
    """The archive JSON dialect: UTF-8, key order as given, an object's top-level keys one per line
    (two-space indent) with each value compact on its line, trailing newline. Not fully indented:
    ``json`` encodes indented output in Python, and SAVE writes a JSON per graph (measured: the
    indented encoding cost more than the rest of writing a decoder's 67 graph files)."""
    if not isinstance(obj, dict) or not obj:
        return (_compact(obj) + "\n").encode("utf-8")
    lines = ",\n".join(f"  {_compact(str(k))}: {_compact(v)}" for k, v in obj.items())
    return ("{\n" + lines + "\n}\n").encode("utf-8")


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(", ", ": "))


def check_format(doc: Any, fmt: str, versions: tuple[int, ...], source: str) -> dict[str, Any]:
    """Check the ``format``/``format_version`` pair that opens every archive JSON file.

    Raises ``ArchiveForeignError`` if ``doc`` is not an object whose ``format`` is ``fmt``,
    ``ArchiveVersionError`` for a ``format_version`` not in ``versions``, and
    ``ArchiveCorruptError`` for a missing or non-integer ``format_version``. Returns ``doc``.
    """
    if not isinstance(doc, dict) or "format" not in doc:
        raise ArchiveForeignError(f"{source}: not a Foundry {fmt!r} file: no 'format' key")
    if doc["format"] != fmt:
        raise ArchiveForeignError(f"{source}: 'format' is {doc['format']!r:.80}, expected {fmt!r}")
    value, at = field(doc, "format_version", At(source))
    version = get_int(value, at, U32)
    if version not in versions:
        raise ArchiveVersionError(
            f"{source}: format_version {version}; this Foundry reads {fmt} version(s) "
            f"{', '.join(map(str, versions))}. Load it with the Foundry release that wrote it, or save again."
        )
    return doc
