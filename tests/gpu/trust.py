"""One LOAD attempt on a (possibly damaged) archive, in a process of its own (run under `foundry run`).

    python trust.py ARCHIVE_DIR GRAPH_NAME [--take-base]

Does what a serving process does: loads the archive's images, sets the region, loads the graph. Prints
one JSON line: the exception raised (type, its Foundry base classes, message), or null when LOAD
accepted the archive. ``--take-base`` first reserves the region's base address, as another library
of the process might have.
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

import torch

import foundry
from foundry.errors import FoundryError
from tests.gpu.roundtrip import BASE, REGION


def attempt(archive: Path, graph: str, take_base: bool) -> None:
    if take_base:
        cuda = ctypes.CDLL("libcuda.so.1")
        ptr = ctypes.c_uint64()
        rc = cuda.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(2 << 20), 0, ctypes.c_uint64(BASE), 0)
        assert rc == 0 and ptr.value == BASE, f"could not take the base for the test: rc {rc}, got 0x{ptr.value:x}"
    foundry.load_cuda_modules_and_libraries(archive)
    foundry.set_allocation_region(BASE, REGION)
    foundry.CUDAGraph.load(archive / f"{graph}.json")


def main() -> None:
    archive, graph = Path(sys.argv[1]), sys.argv[2]
    torch.cuda.init()
    try:
        attempt(archive, graph, "--take-base" in sys.argv[3:])
        result = None
    except FoundryError as exc:
        bases = [c.__name__ for c in type(exc).__mro__ if issubclass(c, FoundryError)]
        result = {"error": type(exc).__name__, "bases": bases, "message": str(exc)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
