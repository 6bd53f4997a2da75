"""`foundry verify PATH`: check an archive (or one graph .json) before running it (docs/TRUST.md).

Needs neither a GPU nor torch: the checks read files only. The identity check compares with this
machine when a CUDA driver and GPU are visible (skipped, and said so, otherwise). Exit status: 0 when
every check that ran passed, 1 when a check found a problem, 2 when verification could not start
(no such path, a directory without a manifest, an unreadable key or identity file), as for
`foundry inspect`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import textwrap
from typing import Any

from foundry.errors import ArchiveCorruptError, ArchiveError, FoundryError
from foundry.schema import Identity
from foundry.schema.jsondocs import load_json
from foundry.storage import read_regular
from foundry.tables import plural, table
from foundry.trust import KEY_ENV, configured_key
from foundry.verify import Check, Report, verify_archive

from .target import EXIT_CANNOT_START, archive_target

__all__ = ["add_parser", "render"]

EXIT_OK = 0
EXIT_PROBLEMS = 1
TABLE_WIDTH = 100  # the report's widest line (a path longer than it is not broken)


def current_identity() -> tuple[Identity | None, str]:
    """This machine's identity, or None and why it is unavailable: the current CUDA context's device, else
    device 0 asked of the driver directly (a CLI process has no context); never raises."""
    try:
        from foundry.native.machine import current_identity as from_context

        return from_context(), ""
    except Exception:  # any failure only means "no CUDA context here"; the driver is tried next
        pass
    try:
        from foundry.native.machine import device_zero_identity

        return device_zero_identity(), ""
    except (OSError, FoundryError) as exc:
        return None, f"no CUDA driver and GPU visible to compare with ({exc})"


IDENTITY_FILES = (
    "give a JSON file that holds an identity (an identity object, a graph JSON, a manifest or `foundry inspect "
    "--json` output)"
)


def _identity_from_file(path: str) -> Identity:
    """An ``identity`` object read from a JSON file: the object itself, or a document holding it under
    ``identity`` (a graph JSON, a manifest, or `foundry inspect --json` output). Read as an archive's own
    files are (a regular file, bounded): ``ArchiveCorruptError`` says why not and what to give."""
    data = read_regular(path, "identity file", follow=True, next_step=IDENTITY_FILES)
    try:
        doc = load_json(data, path)
        if isinstance(doc, dict) and isinstance(doc.get("identity"), dict):
            doc = doc["identity"]
        return Identity.from_json(doc, path)
    except ArchiveError as exc:
        raise ArchiveCorruptError(f"the identity file {exc}; {IDENTITY_FILES}") from None


def _with_reason(report: Report, check: Check, reason: str) -> Report:
    checks = tuple(
        dataclasses.replace(c, reason=reason) if c.check == check and c.status == "skipped" else c
        for c in report.checks
    )
    return dataclasses.replace(report, checks=checks)


def _wrap(text: str, first: str, rest: str) -> list[str]:
    return textwrap.wrap(
        text, TABLE_WIDTH, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False, break_long_words=False
    )


def render(report: Report) -> str:
    """The human report: what was checked, a table of the checks, the problems grouped by check, notes,
    and the one-line verdict last."""
    what = "archive" if report.mode == "archive" else "graph"
    counts = f"{plural(report.graphs, 'graph')}, {plural(report.images, 'image')}"
    lines = [f"foundry verify: {report.target} ({what}: {counts})", ""]
    rows = [[c.check.value, c.status.upper() if c.status == "failed" else c.status, c.problems, c.reason]
            for c in report.checks]  # fmt: skip
    lines += [table(["check", "result", "problems", "note"], rows, width=TABLE_WIDTH), ""]
    for result in report.checks:
        problems = report.problems_of(result.check)
        if problems:
            lines.append(f"{result.check.value}: {plural(result.problems, 'problem')}")
            for p in problems:  # each message names its file, as LOAD's errors do
                lines += _wrap(f"{p.kind.value}: {p.message}", "  ", "      ")
            lines.append("")
    if report.notes:
        lines.append("notes:")
        for n in report.notes:
            lines += textwrap.wrap(
                n, TABLE_WIDTH, initial_indent="  - ", subsequent_indent="    ", break_on_hyphens=False
            )
        lines.append("")
    lines.append(report.verdict)
    return "\n".join(lines)


def _fail(args: argparse.Namespace, message: str) -> int:
    """Verification could not start: the message on stderr and, with ``--json``, an object on stdout too, so
    that whoever reads the JSON always gets one (``ok`` false, ``error`` the message; docs/TRUST.md)."""
    if args.json:
        print(json.dumps({"target": args.path, "ok": False, "error": message}, indent=2))
    print(f"foundry verify: {message}", file=sys.stderr)
    return EXIT_CANNOT_START


def _run(args: argparse.Namespace) -> int:
    try:
        path = archive_target(args.path)
    except ValueError as exc:
        return _fail(args, str(exc))
    try:
        key = configured_key(args.key)
    except ArchiveError as exc:
        return _fail(args, str(exc))
    identity: Identity | None = None
    why = "--no-identity was given"
    if args.identity:
        try:
            identity = _identity_from_file(args.identity)
        except ArchiveError as exc:
            return _fail(args, str(exc))
    elif not args.no_identity:
        identity, why = current_identity()
    report = verify_archive(path, key, identity)
    if identity is None:
        report = _with_reason(report, Check.IDENTITY, why)
    if args.json:
        print(json.dumps(report.to_json(), indent=2, default=str))
    else:
        print(render(report))
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "verify",
        description=(
            "Check an archive (its directory, its graph_manifest.json, or one graph's .json) before running it: "
            "checksums and seals, foreign files, kernels, module variables, templates, pointers, the machine it was "
            "saved on, the "
            "signature. Needs neither a GPU nor torch. Exit status 0: every check that ran passed; 1: problems "
            "found; 2: verification could not start."
        ),
        help="check an archive or a graph .json before running it: checksums, kernels, templates, pointers, "
        "identity, signature (no GPU needed)",
    )
    p.add_argument("path", help="archive directory (with graph_manifest.json) or a graph .json")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--key", metavar="FILE", help=f"signing key file to check the signature with (default: ${KEY_ENV})")
    p.add_argument(
        "--identity",
        metavar="FILE",
        help="compare with the identity in this JSON file (an identity object, or a graph JSON, manifest or "
        "`foundry inspect --json` output holding one) instead of this machine's",
    )
    p.add_argument("--no-identity", action="store_true", help="skip the identity check")
    p.set_defaults(func=_run)
