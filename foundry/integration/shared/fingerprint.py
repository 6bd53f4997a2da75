"""The engine-neutral part of what an archive is for: Foundry's, torch's and CUDA's versions and the GPU.
Each engine adds its own fields (its version, the model, the settings that shape its graphs and memory
layout); SAVE stores the whole fingerprint, LOAD computes its own at the same point of start-up and
compares before it touches the GPU.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import foundry

__all__ = ["config_digest", "software_fields"]


def software_fields(torch: Any, gpu: str) -> dict[str, str]:
    """torch, CUDA and Foundry versions and the GPU's name, in the order every fingerprint lists them.
    ``torch`` is the engine process's torch module (passed in: importing this module imports no torch)."""
    return {
        "torch": str(torch.__version__),
        "cuda": str(torch.version.cuda),
        "foundry": foundry.__version__,
        "gpu": gpu,
    }


def config_digest(values: Mapping[str, Any]) -> str:
    """A short, stable digest of a configuration dict (key order and non-JSON values do not matter)."""
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
