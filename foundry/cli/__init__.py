"""The `foundry` command line: `run`, `inspect`, `verify`, `bench` (one module each)."""

from __future__ import annotations

from .main import main

__all__ = ["main"]
