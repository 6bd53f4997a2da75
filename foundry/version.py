"""Foundry's version: a leaf, so that any package can record it without importing the package face."""

from __future__ import annotations

__version__ = "0.1.0"
