"""`foundry verify PATH`: check an archive (or one graph .json) before running it (docs/TRUST.md).

Needs neither a GPU nor torch: the checks read files only. The identity check compares with this
machine when a CUDA driver and GPU are visible (skipped, and said so, otherwise). Exit status: 0 when
every check that ran passed, 1 when a check found a problem, 2 when verification could not start
(no such path, a directory without a manifest, an unreadable key or identity file), as for
`foundry inspect`.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from foundry import __version__
from foundry.errors import ArchiveError, FoundryError
from foundry.format import KEY_ENV, Identity, configured_key, load_json
from foundry.tables import plural, table
from foundry.verify import Check, Report, verify_archive

from .target import EXIT_CANNOT_START, archive_target

__all__ = ["add_parser", "render"]

EXIT_OK = 0
EXIT_PROBLEMS = 1
TABLE_WIDTH = 100  # the report's widest line (a path longer than it is not broken)


def _identity_from_driver() -> Identity:
    """This machine's identity read straight from the driver (device 0 of the visible ones), for a CLI
    process that has no CUDA context. Raises FoundryError or OSError when there is no driver or GPU."""
    from foundry.native import call, device_identity, driver_version

    call("cuInit", 0)
    device = ctypes.c_int()
    call("cuDeviceGet", ctypes.byref(device), 0)
    name, sms, capability = device_identity(device.value)
    return Identity(name, sms, capability, driver_version(), None, None, __version__)


def current_identity() -> tuple[Identity | None, str]:
    """This machine's identity, or None and why it is unavailable. Tries foundry.native.machine (a process
    with a current CUDA context), then the driver directly; never raises."""
    try:
        from foundry.native import current_identity as from_context

        return from_context(), ""
    except Exception:  # any failure only means "no CUDA context here"; the driver is tried next
        pass
    try:
        return _identity_from_driver(), ""
    except (OSError, FoundryError) as exc:
        return None, f"no CUDA driver and GPU visible to compare with ({exc})"


def _identity_from_file(path: str) -> Identity:
    """An ``identity`` object read from a JSON file: the object itself, or a document holding it under
    ``identity`` (a graph JSON, a manifest, or `foundry inspect --json` output)."""
    doc = load_json(Path(path).read_bytes(), path)
    if isinstance(doc, dict) and isinstance(doc.get("identity"), dict):
        doc = doc["identity"]
    return Identity.from_json(doc, path)


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
    lines = [f"foundry verify: {report.target} ({what}: {report.graphs} graphs, {report.images} images)", ""]
    rows = [[c.check.value, c.status.upper() if c.status == "failed" else c.status, c.problems, c.reason]
            for c in report.checks]  # fmt: skip
    lines += [table(["check", "result", "problems", "note"], rows, width=TABLE_WIDTH), ""]
    for result in report.checks:
        problems = report.problems_of(result.check)
        if problems:
            lines.append(f"{result.check.value}: {plural(result.problems, 'problem')}")
            for p in problems:
                lines += _wrap(f"{p.kind.value}: {p.path}: {p.message}", "  ", "      ")
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


def _fail(message: str) -> int:
    print(f"foundry verify: {message}", file=sys.stderr)
    return EXIT_CANNOT_START


def _run(args: argparse.Namespace) -> int:
    try:
        path = archive_target(args.path)
    except ValueError as exc:
        return _fail(str(exc))
    try:
        key = configured_key(args.key)
    except ArchiveError as exc:
        return _fail(str(exc))
    identity: Identity | None = None
    why = "--no-identity was given"
    if args.identity:
        try:
            identity = _identity_from_file(args.identity)
        except (OSError, ArchiveError) as exc:
            return _fail(f"cannot read the identity to compare with from {args.identity}: {exc}")
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
