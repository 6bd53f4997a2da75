"""`foundry <command>`: run a program under the interposer, inspect or verify an archive; and the commands
other packages add through the ``foundry.commands`` entry point group (the benchmark, ``foundry bench``, from
the instruments package foundry_bench beside the library). The library imports none of them itself: a
command whose package is not installed is still listed, and says so when it is run."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any

from foundry.version import __version__

from . import run as run_cmd

__all__ = ["main"]

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a program the pipe's reader left would end
EXIT_NOT_INSTALLED = 2

COMMANDS_GROUP = "foundry.commands"
"""The entry point group through which a package adds a `foundry` subcommand: NAME = "module:add_parser",
where add_parser(subparsers) adds NAME's parser and sets its ``func``."""
CHECKOUT_COMMANDS = {"bench": "foundry_bench.cli:add_parser"}
"""The distribution's own commands, as pyproject.toml declares them in COMMANDS_GROUP: found through that
group once the distribution is installed, and through these when it runs from a checkout (PYTHONPATH, no
installed metadata)."""


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
    from . import inspect as inspect_cmd
    from . import verify as verify_cmd

    inspect_cmd.add_parser(sub)
    verify_cmd.add_parser(sub)
    for name, target in _commands().items():
        _add_command(sub, name, target)
    return parser


def _commands() -> dict[str, str]:
    """Each added command's name and "module:function", the installed entry points first."""
    found = {ep.name: ep.value for ep in entry_points(group=COMMANDS_GROUP)}
    return {**CHECKOUT_COMMANDS, **found}


def _add_command(sub: Any, name: str, target: str) -> None:
    module, _, function = target.partition(":")
    try:
        add_parser: Callable[[Any], None] = getattr(importlib.import_module(module), function)
    except ImportError as e:
        _add_missing(sub, name, module, e)
        return
    add_parser(sub)


def _add_missing(sub: Any, name: str, module: str, error: ImportError) -> None:
    """A command whose package cannot be imported: listed, and when run it says why and exits non-zero."""
    package = module.split(".")[0]
    if isinstance(error, ModuleNotFoundError) and error.name == package:
        why = (
            f"the instruments package {package} is not installed (it ships with foundry-graphs: reinstall the "
            "distribution, or run from a checkout with the repository root on PYTHONPATH)"
        )
    else:
        why = f"{module} cannot be imported: {error}"
    p = sub.add_parser(name, help=f"not available: {why}", add_help=False)
    p.set_defaults(func=lambda _args: _missing(name, why), takes_any_arguments=True)


def _missing(name: str, why: str) -> int:
    print(f"foundry {name}: {why}", file=sys.stderr)
    return EXIT_NOT_INSTALLED


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, unknown = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if unknown and not getattr(args, "takes_any_arguments", False):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        code = int(args.func(args))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`foundry inspect --json | head`): nothing more to say, and nothing to say
        # it on. Python would report the failed flush at exit, so stdout goes to /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return code
