"""What LOAD and SAVE say of Inductor's kernel choices after start-up (shared/autotune.py): kernels first launched
while serving choose then, after SAVE's archive was written and after LOAD's first report. Each such choice
writes the process's report again and, where it differs from what SAVE recorded, is logged, so that the report
and the log hold the whole process's choices, not only start-up's."""

from __future__ import annotations

import logging
from typing import Any

from ..shared import autotune, steps
from . import session as sessions
from .config import VLLM

__all__ = ["after_install", "after_save"]

log = logging.getLogger(VLLM.logger)


def after_save(s: sessions.Session, saved: int) -> None:
    """SAVE, its archive written with ``saved`` choices: from now on each further choice is reported."""
    autotune.after_record(lambda: _chose_after_save(s, saved))


def after_install(s: sessions.Session) -> None:
    """LOAD, its graphs installed and its report written: kernels that timed so far are logged, and from now on
    each autotuner that would time rewrites the report."""
    replay = s.state.replay
    if replay is None:
        return
    now = replay.summary()
    if now["timed_count"] or now["unmatched_count"]:
        _timed_here(now)
    replay.on_change = lambda: _replayed_while_serving(s)


def _chose_after_save(s: sessions.Session, saved: int) -> None:
    """A kernel first launched after the archive was written (a step outside graphs larger than any before) chose
    by timing in SAVE: the archive does not hold that choice, so LOAD times its own there. Said in the log and the
    report, each time one more chooses."""
    late = autotune.recorded().count() - saved
    steps.write_report(s, **{**s.report_fields, "kernel_choices_after_save": late})
    log.warning(
        "Foundry save: %d Inductor kernel configuration(s) chosen by timing after the archive was written; LOAD "
        "times its own for those, so steps outside graphs that run them may differ from this process's in the "
        "last bits", late,
    )  # fmt: skip


def _timed_here(replay: dict[str, Any]) -> None:
    log.warning(
        "Foundry load: %d Inductor kernels chose their configuration by timing here, not as in SAVE (not "
        "recorded: %s; recorded but not offered: %s): steps that run them outside graphs may differ from "
        "SAVE's in the last bits",
        replay["timed_count"] + replay["unmatched_count"], replay["timed"], replay["unmatched"],
    )  # fmt: skip


def _replayed_while_serving(s: sessions.Session) -> None:
    """A kernel first launched after the graphs were installed (while serving) took SAVE's choice or timed its own:
    the report is written again with the whole count, and one that timed is logged."""
    replay = s.state.replay
    if replay is None:
        return
    before = s.report_fields.get("kernel_choices") or {}
    now = replay.summary()
    steps.write_report(s, **{**s.report_fields, "kernel_choices": now})
    timed = now["timed_count"] + now["unmatched_count"]
    if timed > before.get("timed_count", 0) + before.get("unmatched_count", 0):
        _timed_here(now)
