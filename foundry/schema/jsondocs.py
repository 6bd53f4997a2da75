"""Archive JSON documents (docs/FORMAT.md, "JSON files"): the one dialect every archive file is written in
(``dump_json``), read back bounded (``load_json``), the ``format``/``format_version`` pair that opens each
(``check_format``), and the seal (``seal``, ``load_sealed``): a last ``digest`` key, the SHA-256 of every byte
before it. The fields inside a document are read with jsonfields.py."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from foundry.errors import ArchiveCorruptError, ArchiveForeignError, ArchiveVersionError

from .jsonfields import U32, At, field_int
from .jsontext import Parts, decode

__all__ = ["FIRST_SEALED_VERSION", "SEAL_KEY", "check_format", "dump_json", "load_json", "load_sealed", "seal"]


def load_json(data: bytes | bytearray, source: str, parts: Parts | None = None) -> Any:
    """Decode UTF-8 JSON; malformed text raises ``ArchiveCorruptError`` naming ``source``. ``parts``: see
    ``jsontext.decode``."""
    try:
        text = data.decode("utf-8")
        if text.startswith("\ufeff"):
            json.loads(text)  # refuses a byte-order mark with json's own message, which the decoder has not
        return decode(text, parts)
    except UnicodeDecodeError as exc:
        raise ArchiveCorruptError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:
        raise ArchiveCorruptError(f"{source}: not valid JSON: {exc}") from None
    except MemoryError:
        raise ArchiveCorruptError(
            f"{source}: its {len(data)} bytes of JSON decode to more than this process has memory for; it was "
            "damaged or made so, or load it where there is more memory"
        ) from None


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
    version = field_int(doc, "format_version", At(source), U32)
    if version not in versions:
        raise ArchiveVersionError(
            f"{source}: format_version {version}; this Foundry reads {fmt} version(s) "
            f"{', '.join(map(str, versions))}. Load it with the Foundry release that wrote it, or save again."
        )
    return doc


SEAL_KEY = "digest"
FIRST_SEALED_VERSION = 2  # of every sealed kind: graph metadata, manifest, region hint
_SEAL_LINE = b'  "digest": "'
_SEAL_END = b'"\n}\n'


def seal(obj: dict[str, Any]) -> bytes:
    """``dump_json(obj)`` with a last key ``digest``: the SHA-256 (hex) of every byte before the line
    that holds it. ``obj`` must not have the key itself."""
    if SEAL_KEY in obj:
        raise ValueError(f"a document to seal must not have a {SEAL_KEY!r} key")
    body = dump_json(obj)
    assert body.endswith(b"\n}\n")
    head = body[: -len(b"\n}\n")] + b",\n"
    return head + _SEAL_LINE + hashlib.sha256(head).hexdigest().encode() + _SEAL_END


def load_sealed(
    data: bytes | bytearray | memoryview,
    source: str,
    fmt: str | None = None,
    parts: Parts | None = None,
    proven: bool = False,
) -> Any:
    """The JSON document of sealed bytes (``seal``), its ``digest`` key removed, once the digest is
    proven to be that of the bytes before it; ``ArchiveCorruptError`` names ``source`` otherwise (the
    file was changed or damaged after it was written). With ``fmt``, an unsealed document that is not
    a Foundry ``fmt`` file at all raises ``ArchiveForeignError`` instead, and one of a version from
    before files were sealed ``ArchiveVersionError``. With ``parts``, the values of lines sealed bytes repeat
    are shared (``jsontext.decode``), and the caller must not change them. ``proven``: the bytes are proven
    already, by a hash that covers them (a graph bundle's, which the manifest states), so the digest is not
    computed again; everything else is checked as always."""
    try:
        data = bytes(data)
    except MemoryError:
        raise ArchiveCorruptError(f"{source}: {len(data)} bytes, more than this process has memory for") from None
    at = data.rfind(b"\n" + _SEAL_LINE)
    end = at + 1 + len(_SEAL_LINE) + 64
    if at < 0 or data[end:] != _SEAL_END:
        doc = load_json(data, source)  # a file that is not JSON at all says so first
        if fmt is not None and (not isinstance(doc, dict) or doc.get("format") != fmt):
            check_format(doc, fmt, (), source)  # raises ArchiveForeignError naming what was found
        version = doc.get("format_version") if isinstance(doc, dict) else None
        if isinstance(doc, dict) and SEAL_KEY not in doc and type(version) is int and version < FIRST_SEALED_VERSION:
            raise ArchiveVersionError(
                f"{source}: format version {version}, written by an older Foundry before archive files were "
                f"sealed (version {FIRST_SEALED_VERSION} on); this Foundry does not read it. Save the archive again."
            )
        if not isinstance(doc, dict) or SEAL_KEY not in doc:
            raise ArchiveCorruptError(
                f"{source}: no {SEAL_KEY!r} key at the end: the file was not written whole by Foundry, or was "
                "edited. Save it again."
            )
        raise ArchiveCorruptError(f"{source}: the {SEAL_KEY!r} key is not where SAVE writes it (the file was edited)")
    stated = data[at + 1 + len(_SEAL_LINE) : end].decode("ascii", "replace")
    actual = stated if proven else hashlib.sha256(data[: at + 1]).hexdigest()
    if stated != actual:
        raise ArchiveCorruptError(
            f"{source}: the file's bytes have SHA-256 {actual}, its {SEAL_KEY!r} says {stated}: it was changed or "
            "damaged after SAVE wrote it. Do not load it; save it again."
        )
    doc = load_json(data, source, parts)
    if not isinstance(doc, dict) or list(doc)[-1:] != [SEAL_KEY]:  # a repeated key would hide one
        raise ArchiveCorruptError(f"{source}: {SEAL_KEY!r} must be the last key, once")
    del doc[SEAL_KEY]
    return doc
