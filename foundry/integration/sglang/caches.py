"""The caches an SGLang archive can carry for a fresh node (shared/caches.py): Triton's kernels, and the JIT
modules SGLang builds through tvm-ffi (shared/tvmcache.py). SGLang keys both by content, so neither depends on
SGLang's settings beyond what the versions in the identity cover."""

from __future__ import annotations

from typing import Any

from ..shared import tritoncache, tvmcache
from ..shared.caches import TRITON, CachePlan, point_triton, triton_files

__all__ = ["PLAN"]


def _files(s: Any) -> dict[str, dict[str, Any]]:
    del s
    return {TRITON: triton_files(), tvmcache.TVM_FFI: tvmcache.files()}


def _activity() -> object:
    return tritoncache.activity(), tvmcache.activity()


def _whole(before: object, now: object) -> bool:
    """The modules changed: a module is loaded only once built, so it is whole, and packed at once. Triton's
    entries may have changed beside it (SGLang's first request built ``clamp_position`` and compiled a Triton
    kernel within the same tenth of a second, H200); one still being written is packed as far as it is, which
    LOAD does not use without its group file (tritoncache.from_copy), and the keeper packs it whole a quiet
    second later."""
    return isinstance(before, tuple) and isinstance(now, tuple) and before[1] != now[1]


PLAN = CachePlan(
    point={TRITON: point_triton, tvmcache.TVM_FFI: tvmcache.point}, files=_files, activity=_activity, whole=_whole
)
