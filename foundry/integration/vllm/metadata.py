"""vLLM's part of the plugin's metadata file, ``vllm_plugin.json`` (shared/metadata.py holds the rest):
the model runner SAVE used, the KV-cache size and block count, so that LOAD skips memory profiling and
checks it gets the same cache, the workspace SAVE's profiling and warm-up grew (workspace.py), and the
configurations Inductor's kernels chose by timing in SAVE (shared/autotune.py), and the custom all-reduce's
registrations its graphs read (shared/allreduce.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import foundry

from ..shared import allreduce
from ..shared.autotune import KernelChoices
from ..shared.metadata import ArchiveMetadata, Fingerprint, GraphEntry, MetadataFile, PhaseMark
from .config import VLLM
from .workspace import Workspace

__all__ = [
    "METADATA_NAME",
    "Fingerprint",
    "GraphEntry",
    "PhaseMark",
    "VllmMetadata",
    "check_fingerprint",
    "read_metadata",
    "write_metadata",
]


@dataclass(frozen=True)
class VllmMetadata(ArchiveMetadata):
    runner: str = field(kw_only=True)  # "v2" (vllm/v1/worker/gpu) or "v1" (gpu_model_runner.py)
    kv_cache_bytes: int = field(kw_only=True)  # what determine_available_memory returned in SAVE
    num_gpu_blocks: int = field(kw_only=True)
    workspace: Workspace = field(default_factory=Workspace, kw_only=True)
    kernel_choices: KernelChoices = field(default_factory=KernelChoices, kw_only=True)
    # The custom all-reduce's registrations the saved graphs read (shared/allreduce.py); None: it was off.
    custom_all_reduce: tuple[foundry.PeerRegistration, ...] | None = field(default=None, kw_only=True)
    # The room the region's small-allocation granule opened with after vLLM's distributed set-up (lifecycle.py's
    # after_distributed); LOAD opens it alike, since it moves the cursor. 0: none opened.
    small_room: int = field(default=0, kw_only=True)

    def engine_json(self) -> dict[str, Any]:
        return {
            "runner": self.runner,
            "kv_cache": {"bytes": self.kv_cache_bytes, "num_gpu_blocks": self.num_gpu_blocks},
            "workspace": self.workspace.to_json(),
            "kernel_choices": self.kernel_choices.to_json(),
            "custom_all_reduce": allreduce.to_json(self.custom_all_reduce),
            "small_allocation_room": self.small_room,
        }

    @classmethod
    def engine_fields(cls, doc: Mapping[str, Any]) -> dict[str, Any]:
        kv = doc["kv_cache"]
        return {
            "runner": str(doc["runner"]),
            "kv_cache_bytes": int(kv["bytes"]),
            "num_gpu_blocks": int(kv["num_gpu_blocks"]),
            # Required: an archive without it would LOAD into an empty workspace and fail at the first MoE layer.
            "workspace": Workspace.from_json(doc["workspace"]),
            # Optional: an archive written before choices were recorded has none, and LOAD times as natively.
            "kernel_choices": KernelChoices.from_json(doc.get("kernel_choices")),
            # Absent in an archive saved before it was recorded, which ran with it off (refused otherwise).
            "custom_all_reduce": allreduce.from_json(doc.get("custom_all_reduce")),
            # Absent in an archive saved before the granule was opened early: LOAD opens none, as SAVE did.
            "small_room": _small_room(doc.get("small_allocation_room", 0)),
        }


# At most a granule of the region is ever room for small allocations; the largest granularity a GPU reports
# for device memory is 2 MiB today, so 64 MiB bounds any plausible one.
_MAX_SMALL_ROOM = 64 << 20


def _small_room(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_SMALL_ROOM:
        raise ValueError(f"small_allocation_room {value!r}: a number of bytes from 0 to {_MAX_SMALL_ROOM} expected")
    return value


FILE = MetadataFile(VLLM, VllmMetadata)
METADATA_NAME = FILE.name
read_metadata = FILE.read
write_metadata = FILE.write
check_fingerprint = FILE.check_fingerprint
