"""How the engines the benchmark starts reach this Foundry: the directory it is imported from first on their
path, and, where Foundry is importable but not pip-installed (the GPU machine runs the checkout), a
dist-info that declares the plugin's entry point, which the engines look for."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["checkout_root", "plugin_shim"]


def checkout_root() -> Path:
    """The directory the ``foundry`` package is imported from (the checkout on a machine that runs it without
    installing it): the engines' processes get it first on their path, so that they load the same Foundry."""
    import foundry

    return Path(foundry.__file__).resolve().parents[1]


def plugin_shim(root: Path, engine: str, group: str) -> Path | None:
    """A dist-info declaring Foundry's ``group`` entry point (``foundry.integration.<engine>:register``), for a
    foundry that is importable but not pip-installed (the GPU machine runs the checkout); None when the entry
    point is installed."""
    from importlib.metadata import entry_points

    plugin = f"foundry.integration.{engine}"
    if any(ep.value.startswith(plugin) for ep in entry_points(group=group)):
        return None
    info = root / f"foundry_{engine}_plugin-0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    _write_once(info / "METADATA", f"Metadata-Version: 2.1\nName: foundry-{engine}-plugin\nVersion: 0.0\n")
    _write_once(info / "entry_points.txt", f"[{group}]\nfoundry = {plugin}:register\n")
    return root


def _write_once(path: Path, text: str) -> None:
    # Benchmarks side by side on one machine share the shim: a file already right is left alone, and a new one
    # appears whole (renamed into place), so that no engine starting meanwhile reads it half written.
    if path.exists() and path.read_text() == text:
        return
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    part.write_text(text)
    os.replace(part, path)
