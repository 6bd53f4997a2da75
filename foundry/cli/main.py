"""`foundry <command>`: run a program under the interposer, inspect or verify an archive, benchmark."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from foundry.cli import run as run_cmd

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="foundry",
        description="Persist captured CUDA graphs with their execution context; rebuild them in milliseconds.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run_cmd.add_parser(sub)
    from foundry.cli import bench as bench_cmd
    from foundry.cli import inspect as inspect_cmd
    from foundry.cli import verify as verify_cmd

    inspect_cmd.add_parser(sub)
    verify_cmd.add_parser(sub)
    bench_cmd.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    return int(args.func(args))
