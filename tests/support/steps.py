"""Work counted in steps rather than timed: tests that bound how much work something does must not depend on
how busy the machine is."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


class TooManySteps(AssertionError):
    """The call took more steps than the test allows (stopped there, rather than run to its end)."""


def steps(fn: Callable[..., Any], *args: Any, budget: int) -> int:
    """How many steps ``fn(*args)`` takes on this thread: Python lines run, and calls of C functions (the
    same for the same input on any machine). Past ``budget`` it stops with ``TooManySteps``, so that a
    regression to a quadratic walk fails at once instead of running for minutes under the tracer."""
    count = 0

    def trace(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
            if count > budget:
                raise TooManySteps(f"more than {budget} steps")
        return trace

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        count += event == "c_call"

    tracer, profiler = sys.gettrace(), sys.getprofile()  # a coverage tool's, put back after
    sys.settrace(trace)
    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(profiler)
        sys.settrace(tracer)
    return count
