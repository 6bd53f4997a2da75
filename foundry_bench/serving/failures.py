"""Why a run failed, in a line a table can hold, and a failure's message kept within a document's bounds.

An engine that dies leaves its reason in its log's last lines, under the engine's prefixes and among traceback
frames; a message cut to its last few thousand characters starts mid-frame. A report's cell shows the exception
the log names (a Foundry refusal among them), not that cut."""

from __future__ import annotations

import re

__all__ = ["cause_line", "clipped"]

# An exception's line in a log: its class name (``...Error``, ``...Exception``, ``...Exit``) and message, at the
# line's start or after any prefix the engine writes ("(Worker pid=1) ERROR 11-29 19:42:26 [file.py:901] "), never
# one quoted inside a sentence (vLLM's warning "can cause fd limit errors like `OSError: [Errno 24] ...`").
_RAISED = re.compile(r"(?:^|\s)((?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit)): (.*)$")


def cause_line(text: object, width: int = 80) -> str:
    """Why a run failed, in one line: the last exception the engine's log tail names (the engine's own words, a
    Foundry refusal among them), else the first line of the benchmark's message."""
    lines = str(text).strip().splitlines()
    for line in reversed(lines):
        m = _RAISED.search(line)
        if m:
            line = f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2).strip()}"
            break
    else:
        line = lines[0] if lines else "?"
    return line if len(line) <= width else line[: width - 3] + "..."


def clipped(text: str, limit: int = 4000) -> str:
    """``text`` within ``limit`` characters: its first line (what failed) and as much of its end (the log's last
    lines) as fits."""
    if len(text) <= limit:
        return text
    head = text.splitlines()[0][: limit // 4]
    return f"{head}\n...\n{text[-(limit - len(head) - 5) :]}"
