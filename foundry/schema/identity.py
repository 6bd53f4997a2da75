"""The machine and software identity stored with every graph and archive, and its comparison.

LOAD compares the saved identity with the current one before it touches the GPU; each difference
comes back as a ``Mismatch`` whose message says what differs and what that can break.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from .jsonfields import I64, U32, At, field, field_int, field_str, get_int, get_list, get_obj, get_opt_str

__all__ = ["IDENTITY_FIELDS", "Identity", "Mismatch", "compare"]


@dataclass(frozen=True, slots=True)
class Identity:
    """What SAVE ran on. ``None`` versions mean "unknown" (never a mismatch)."""

    gpu_name: str
    sm_count: int
    compute_capability: tuple[int, int]
    driver_version: int
    cuda_runtime_version: str | None
    torch_version: str | None
    foundry_version: str

    def to_json(self) -> dict[str, Any]:
        """The JSON object of docs/FORMAT.md, "identity"."""
        return {
            "gpu_name": self.gpu_name,
            "sm_count": self.sm_count,
            "compute_capability": list(self.compute_capability),
            "driver_version": self.driver_version,
            "cuda_runtime_version": self.cuda_runtime_version,
            "torch_version": self.torch_version,
            "foundry_version": self.foundry_version,
        }

    @classmethod
    def from_json(cls, value: Any, at: At | str = "identity") -> Identity:
        """Validate and convert; a missing key or wrong type raises ``ArchiveCorruptError``."""
        at = At(at) if isinstance(at, str) else at
        obj = get_obj(value, at)

        def get(name: str) -> tuple[Any, At]:
            return field(obj, name, at)

        cc, cc_at = get("compute_capability")
        major, minor = (get_int(v, cc_at.index(i), U32) for i, v in enumerate(get_list(cc, cc_at, 2)))
        return cls(
            gpu_name=field_str(obj, "gpu_name", at),
            sm_count=field_int(obj, "sm_count", at, U32),
            compute_capability=(major, minor),
            driver_version=field_int(obj, "driver_version", at, I64),
            cuda_runtime_version=get_opt_str(*get("cuda_runtime_version")),
            torch_version=get_opt_str(*get("torch_version")),
            foundry_version=field_str(obj, "foundry_version", at),
        )


IDENTITY_FIELDS: frozenset[str] = frozenset(f.name for f in fields(Identity))

# field -> (label, consequence of a difference)
_CONSEQUENCES: dict[str, tuple[str, str]] = {
    "gpu_name": (
        "GPU model",
        "kernels in the archive may not run on this GPU, or may run with a different occupancy",
    ),
    "sm_count": (
        "SM count",
        "kernels sized for the saved SM count may run with a different occupancy, and "
        "cooperative or cluster launches sized to it may fail",
    ),
    "compute_capability": (
        "compute capability",
        "kernel images built for the saved architecture may not load here, or must be JIT-compiled from PTX",
    ),
    "driver_version": ("CUDA driver", "graph and module behaviour may differ"),
    "cuda_runtime_version": (
        "CUDA runtime",
        "library kernels and their workspace allocations may differ from the saved ones",
    ),
    "torch_version": (
        "PyTorch",
        "the allocation order may differ, so tensors would land at other addresses than the saved graph uses",
    ),
    "foundry_version": (
        "Foundry",
        "the archive was written by another Foundry release; the format is the same, "
        "but SAVE and LOAD behaviour may differ",
    ),
}
assert set(_CONSEQUENCES) == IDENTITY_FIELDS


def _show(name: str, value: object) -> str:
    if name == "compute_capability" and isinstance(value, tuple):
        return f"{value[0]}.{value[1]}"
    return repr(value)


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One identity field that differs between the archive (``saved``) and this machine."""

    field: str
    saved: object
    current: object
    consequence: str

    @property
    def message(self) -> str:
        label = _CONSEQUENCES[self.field][0] if self.field in _CONSEQUENCES else self.field
        return (
            f"{label} differs: the archive was saved with {_show(self.field, self.saved)}, this "
            f"machine has {_show(self.field, self.current)}; {self.consequence}"
        )

    def __str__(self) -> str:
        return self.message


def compare(saved: Identity, current: Identity, ignore: frozenset[str] = frozenset()) -> list[Mismatch]:
    """Every field of ``saved`` that differs from ``current``, in declaration order, except those in
    ``ignore``. ``cuda_runtime_version``/``torch_version`` equal to None on either side are unknown
    and never mismatch. Unknown names in ``ignore`` raise ``ValueError``."""
    unknown = set(ignore) - IDENTITY_FIELDS
    if unknown:
        raise ValueError(f"unknown identity field(s) {sorted(unknown)}; known: {sorted(IDENTITY_FIELDS)}")
    out: list[Mismatch] = []
    for f in fields(Identity):
        if f.name in ignore:
            continue
        a, b = getattr(saved, f.name), getattr(current, f.name)
        if a is None or b is None or a == b:
            continue
        out.append(Mismatch(f.name, a, b, _CONSEQUENCES[f.name][1]))
    return out
