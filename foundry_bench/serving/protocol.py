"""What a benchmark's engine child process (an engine's Python API driven from stdin) and the benchmark say to
each other. The child reads requests from stdin, one JSON object a line, and answers on stdout with lines
that start with ``MARK`` (the rest of stdout is the engine's log):

- first ``MARK {"ready": {...}}``: seconds since process start for the imports and the engine's construction,
  and the versions;
- then, for each ``{"prompts": [[ids...], ...], "max_tokens": N, "logprobs": K}``, ``MARK {"tokens": [...],
  "seconds": s, "top": [...]}`` (``top``: with K > 0, each prompt's top-K log-probabilities per position in
  logprobs.py's canonical form; else null); an empty line or the end of input ends it.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["MARK", "answer_requests", "say"]

MARK = "FDYBENCH "


def say(doc: dict[str, Any]) -> None:
    """One answer line for the parent."""
    sys.stdout.write(MARK + json.dumps(doc) + "\n")
    sys.stdout.flush()


Generate = Callable[[list[list[int]], int, int], tuple[list[list[int]], list[Any] | None]]


def answer_requests(generate: Generate, sync: Callable[[], None]) -> None:
    """Answers the parent's requests read from stdin until an empty line or the end of input: for each
    ``{"prompts": ..., "max_tokens": N, "logprobs": K}``, ``generate(prompts, N, K)``'s tokens and top-K
    log-probabilities and the seconds it took (timed from ``sync()``, which waits for the device)."""
    for line in sys.stdin:
        if not line.strip():
            break
        request = json.loads(line)
        sync()
        t = time.perf_counter()
        tokens, top = generate(request["prompts"], request["max_tokens"], int(request.get("logprobs", 0)))
        say({"tokens": tokens, "seconds": time.perf_counter() - t, "top": top})
