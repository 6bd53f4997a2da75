"""The `foundry` command line: `run`, `inspect`, `verify` (one module each), and the commands added through
the ``foundry.commands`` entry point group (`bench`, from foundry_bench)."""

from __future__ import annotations

from .main import main

__all__ = ["main"]
