"""`foundry run -- CMD ...`: start a program with libfoundry preloaded."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from foundry.errors import FoundryError
from foundry.native import preload_env

__all__ = ["add_parser"]


def _run(args: argparse.Namespace) -> int:
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("foundry run: give the program to start, e.g. `foundry run -- python app.py`", file=sys.stderr)
        return 2
    try:
        env = preload_env()
    except FoundryError as exc:
        print(f"foundry run: {exc}", file=sys.stderr)
        return 2
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"foundry run: cannot start {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        description=(
            "Start a program with Foundry's interposer preloaded (LD_PRELOAD, inherited by every process it "
            "starts), e.g. `foundry run -- python serve.py`."
        ),
        help="run a program under Foundry's interposer (LD_PRELOAD)",
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="the program and its arguments, after --")
    p.set_defaults(func=_run)
