"""Strict readers of JSON values (the documents themselves, their dialect and seal: jsondocs.py).

Each reader takes an ``At`` (the file and the key path being read) and raises
``ArchiveCorruptError`` naming both when a value is missing or of the wrong type or range. Booleans
are never accepted as integers. Keys a reader does not ask for are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from itertools import chain
from typing import Any, NoReturn

from foundry.errors import ArchiveCorruptError

from .jsontext import Parts  # the readers of documents take it (jsondocs.py)

__all__ = [
    "I32",
    "I64",
    "U32",
    "U64",
    "At",
    "Parts",
    "field",
    "field_int",
    "field_relpath",
    "field_sha256",
    "field_str",
    "get_int",
    "get_int_items",
    "get_int_list",
    "get_int_rows",
    "get_list",
    "get_obj",
    "get_opt_str",
    "get_relpath",
    "get_sha256",
    "get_str",
    "ints_within",
    "is_sha256",
    "relative_path_problem",
]

U32 = (0, 2**32 - 1)
U64 = (0, 2**64 - 1)
I32 = (-(2**31), 2**31 - 1)
I64 = (-(2**63), 2**63 - 1)

_SHA256 = re.compile(r"[0-9a-f]{64}")


def is_sha256(value: object) -> bool:
    """True for a lower-case hex SHA-256 string."""
    return isinstance(value, str) and _SHA256.fullmatch(value) is not None


class At:
    """A place in a JSON document: ``source`` (usually a file name) and a key path.

    A place below another holds its parent and its own step (a key, or a list index), and spells its path
    out only when it is asked for, on failure: readers take a place for every value they read (graph
    metadata holds thousands), and almost none of them fail."""

    __slots__ = ("_step", "_up", "source")

    def __init__(self, source: str, path: str = "") -> None:
        self.source = source
        self._up: At | None = None
        self._step: str | int = path  # with no parent: the whole path

    @property
    def path(self) -> str:
        """The key path: keys joined with ``.``, list indices as ``[i]`` (empty: the top level)."""
        if self._up is None:
            return str(self._step)
        up = self._up.path
        if type(self._step) is int:
            return f"{up}[{self._step}]"
        return f"{up}.{self._step}" if up else str(self._step)

    def key(self, name: str) -> At:
        sub = At.__new__(At)
        sub.source, sub._up, sub._step = self.source, self, name
        return sub

    def index(self, i: int) -> At:
        sub = At.__new__(At)
        sub.source, sub._up, sub._step = self.source, self, i
        return sub

    def fail(self, problem: str) -> NoReturn:
        path = self.path
        where = f"key {path!r}" if path else "top level"
        raise ArchiveCorruptError(f"{self.source}: {where}: {problem}")

    def __repr__(self) -> str:
        return f"At({self.source!r}, {self.path!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, At) and (self.source, self.path) == (other.source, other.path)

    def __hash__(self) -> int:
        return hash((self.source, self.path))


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


_INT = frozenset({int})
_LIST = frozenset({list})


def ints_within(values: Collection[Any], lo: int, hi: int) -> bool:
    """Whether every one of ``values`` is an integer (never a bool) in ``lo..hi``: the fast paths' test, run in
    C with no Python step per value (graph metadata holds thousands of them)."""
    return {*map(type, values)} <= _INT and (not values or (lo <= min(values) and max(values) <= hi))


def get_int_list(value: Any, at: At, length: int | None = None, bounds: tuple[int, int] = U64) -> tuple[int, ...]:
    """A list of integers, checked with a fast path (``ints_within``); the slow path only runs to name the
    offending element."""
    items = get_list(value, at, length)
    if ints_within(items, *bounds):
        return tuple(items)
    for i, v in enumerate(items):
        get_int(v, at.index(i), bounds)
    raise AssertionError("unreachable")  # pragma: no cover - the loop above raised


def get_int_items(value: Any, at: At, bounds: tuple[int, int] = U64) -> tuple[tuple[str, int], ...]:
    """An object of integers, as its ``(key, value)`` pairs in file order; checked like ``get_int_list``."""
    obj = get_obj(value, at)
    if ints_within(obj.values(), *bounds):
        return tuple(obj.items())
    for k, v in obj.items():
        get_int(v, at.key(k), bounds)
    raise AssertionError("unreachable")  # pragma: no cover - the loop above raised


def get_int_rows(value: Any, at: At, columns: tuple[tuple[int, int], ...]) -> tuple[tuple[int, ...], ...]:
    """A list of fixed-width integer rows, ``columns`` giving each column's bounds."""
    rows = get_list(value, at)
    width = len(columns)
    if {*map(type, rows)} <= _LIST and {*map(len, rows)} <= {width}:
        flat = list(chain.from_iterable(rows))
        if {*map(type, flat)} <= _INT and all(
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


def relative_path_problem(name: str, parents: bool = False, bare: bool = False) -> str | None:
    """Why ``name`` is not an archive path (relative, no NUL, no ``..``), or None. With ``parents``,
    ``..`` may lead the path (a manifest lists graphs saved beside its archive that way; such a file is
    only ever read to prefetch its metadata, silently, never trusted: see load.startup); with ``bare``,
    it must be a file name alone."""
    if "/" not in name and name not in ("", ".", "..") and "\0" not in name:
        return None  # a plain file name: what an archive names most
    if not name or "\0" in name:
        return "is empty or holds a NUL byte"
    if name.startswith("/"):
        return "is an absolute path"
    # PurePosixPath(name).parts, without building the object (LOAD checks thousands of these at start-up).
    parts = tuple(p for p in name.split("/") if p and p != ".")
    if bare and (len(parts) != 1 or parts[0] in (".", "..")):
        return "is not a bare file name"
    if parents:
        while parts and parts[0] == "..":
            parts = parts[1:]
    if ".." in parts:
        return "leaves the directory it is relative to ('..')"
    return None


def get_relpath(value: Any, at: At, parents: bool = False, bare: bool = False) -> str:
    """An archive path (``relative_path_problem``): refused before anything opens it."""
    name = get_str(value, at)
    problem = relative_path_problem(name, parents, bare)
    if problem:
        at.fail(f"{name!r:.120} {problem}; archive paths are names relative to the archive")
    return name


def get_sha256(value: Any, at: At) -> str:
    if not is_sha256(value):
        at.fail(f"expected a lower-case hex SHA-256, found {value!r:.80}")
    return str(value)


def field(obj: dict[str, Any], name: str, at: At) -> tuple[Any, At]:
    """``obj[name]`` and its place; a missing key raises ``ArchiveCorruptError`` naming it."""
    if name not in obj:
        at.key(name).fail("missing")
    return obj[name], at.key(name)


# Readers of one key of an object, each the reader of the same name applied to ``field(obj, name, at)``: a
# value it accepts is returned as it is, at once; any other goes to that reader, which refuses it with its
# message (graph metadata is thousands of such keys, and a place built for each costs more than the checks).


def field_int(obj: dict[str, Any], name: str, at: At, bounds: tuple[int, int] = U64) -> int:
    value = obj.get(name)
    if type(value) is int and bounds[0] <= value <= bounds[1]:
        return value
    return get_int(*field(obj, name, at), bounds)


def field_str(obj: dict[str, Any], name: str, at: At) -> str:
    value = obj.get(name)
    if type(value) is str:
        return value
    return get_str(*field(obj, name, at))


def field_sha256(obj: dict[str, Any], name: str, at: At) -> str:
    value = obj.get(name)
    if type(value) is str and _SHA256.fullmatch(value) is not None:
        return value
    return get_sha256(*field(obj, name, at))


def field_relpath(obj: dict[str, Any], name: str, at: At, parents: bool = False, bare: bool = False) -> str:
    value = obj.get(name)
    if type(value) is str and relative_path_problem(value, parents, bare) is None:
        return value
    return get_relpath(*field(obj, name, at), parents, bare)
