"""Which configuration the benchmark's archive was saved for, kept beside it, so that a call that loads
without saving is refused at once when the last SAVE on the machine was another configuration's."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .runs import ServingConfig

__all__ = ["archive_problem", "mark_archive"]


def _mark(archive: Path) -> Path:
    """Beside the archive (not in it: the plugin's SAVE takes only an empty folder or rank folders): the
    configuration the benchmark's last SAVE saved it for."""
    return archive.with_name(archive.name + ".config")


def mark_archive(cfg: ServingConfig) -> None:
    """SAVE is about to write ``cfg.archive``: says for which configuration."""
    _mark(cfg.archive).parent.mkdir(parents=True, exist_ok=True)
    _mark(cfg.archive).write_text(cfg.tag() + "\n")


def archive_problem(cfg: ServingConfig) -> str | None:
    """Before any engine starts: a call that loads without saving loads the archive the last SAVE on this machine
    wrote, for whatever configuration. One saved for another is refused here, by name, rather than by the plugin
    after the native runs and the engine's start-up (minutes of a GPU machine). An archive with no mark (saved
    otherwise) is left to the plugin's checks."""
    loads = [m for m in cfg.modes if m.startswith("load")]  # LOAD and its variants: from the archive
    if "save" in cfg.modes or not loads or not _mark(cfg.archive).is_file():
        return None
    saved = _mark(cfg.archive).read_text().strip()
    if saved == cfg.tag():
        return None
    return (
        f"--modes {','.join(cfg.modes)} loads {cfg.archive}, which the benchmark last saved for {saved}, not for "
        f"{cfg.tag()}: add save to --modes, or run this configuration's SAVE first"
    )
