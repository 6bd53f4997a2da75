"""What the benchmark records inside the engine's own processes, through the site folder's ``sitecustomize``
(stacksite/): the sampled stacks (``--stacks``, stacks.py) and the attention fingerprints (``--digests``,
digests.py), each in a folder of the run's own beside its log. One object per benchmark: the variables a run
starts with, the moment its engine serves, and what each run's folders say once it has stopped."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from . import digests, stacks

__all__ = ["Recorders"]


class Recorders:
    """The in-process recorders a benchmark asked for, their folders below ``out``."""

    def __init__(self, out: Path, sample_stacks: bool, fingerprint: bool) -> None:
        self.out, self.sample_stacks, self.fingerprint = out, sample_stacks, fingerprint

    def env(self, mode: str, env: dict[str, str]) -> dict[str, str]:
        """The variables run ``mode`` starts with besides ``env`` (its folders emptied first)."""
        out: dict[str, str] = {}
        for on, folder, variables in (
            (self.sample_stacks, self._folder("stacks", mode), stacks.env),
            (self.fingerprint, self._folder("digests", mode), digests.env),
        ):
            if on:
                shutil.rmtree(folder, ignore_errors=True)
                out.update(variables(folder, out.get("PYTHONPATH", env.get("PYTHONPATH", ""))))
        return out

    def serving(self, mode: str) -> None:
        """Run ``mode``'s engine serves: its processes fingerprint from now on, past start-up's memory layout."""
        if self.fingerprint:
            digests.start(self._folder("digests", mode))

    def collect(self, result: dict[str, Any]) -> dict[str, Any]:
        """What a stopped run's folders say, for its result: its busiest stacks in its start-up and first request,
        and its fingerprints."""
        mode = result["mode"]
        out: dict[str, Any] = {}
        if self.sample_stacks:
            procs = stacks.read(self._folder("stacks", mode))
            start, ready, first = result.get("started_at"), result.get("ready_wall_s"), result.get("first_request_at")
            windows: dict[str, Any] = {}
            if isinstance(start, int | float) and isinstance(ready, int | float):
                windows["start_up"] = stacks.busiest(procs, start, start + ready)
            if isinstance(first, int | float) and isinstance(result.get("first_request_s"), int | float):
                windows["first_request"] = stacks.busiest(procs, first, first + result["first_request_s"])
            out["stacks"] = windows
        if self.fingerprint:
            out["digests"] = digests.read(self._folder("digests", mode))
        return out

    def _folder(self, kind: str, mode: str) -> Path:
        return self.out / f"{kind}-{mode}"
