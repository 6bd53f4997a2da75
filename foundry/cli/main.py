"""`foundry <command>`: run a program under the interposer, inspect or verify an archive, benchmark."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from foundry import __version__

from . import run as run_cmd

__all__ = ["main"]

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a program the pipe's reader left would end


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default where it has one worth saying (not for flags, nor for None)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, argparse.SUPPRESS) or "%(default)" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class _CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: its description, and every option's default in its help."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="foundry",
        description=(
            "Persist captured CUDA graphs with their execution context; rebuild them in a fresh process in well "
            "under a second."
        ),
    )
    parser.add_argument("--version", action="version", version=f"foundry {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_CommandParser)
    run_cmd.add_parser(sub)
    from . import bench as bench_cmd
    from . import inspect as inspect_cmd
    from . import verify as verify_cmd

    inspect_cmd.add_parser(sub)
    verify_cmd.add_parser(sub)
    bench_cmd.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        code = int(args.func(args))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`foundry inspect --json | head`): nothing more to say, and nothing to say
        # it on. Python would report the failed flush at exit, so stdout goes to /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return code
