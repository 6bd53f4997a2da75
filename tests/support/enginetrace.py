"""What a fake engine did, in order: the fake vLLM and the fake SGLang record their steps in one."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Trace:
    """What the fake engine did, in order."""

    events: list[str] = field(default_factory=list)

    def __call__(self, what: str) -> None:
        self.events.append(what)
