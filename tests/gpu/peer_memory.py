"""A process that maps another process's GPU memory cannot save a graph (run under `foundry run`): the
parent shares a CUDA tensor (CUDA IPC, as torch.multiprocessing does), the child captures a graph that
reads it and saves. Prints one JSON line from the child."""

import json
import sys
import tempfile
from pathlib import Path

import torch
import torch.multiprocessing as mp

import foundry


def child(queue: "mp.Queue[torch.Tensor]", done: "mp.Queue[str]") -> None:
    shared = queue.get()  # opened here through cuIpcOpenMemHandle
    foundry.set_allocation_region(0x600000000000, "1GB")
    out = torch.empty_like(shared)
    g = foundry.CUDAGraph()
    with foundry.graph(g):
        out.copy_(shared)
    g.replay()
    torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            g.save(Path(tmp) / "g.json", output_tensors=out, archive_dir=Path(tmp) / "archive")
            result = {"saved": True}
        except foundry.PeerMemoryError as exc:
            result = {
                "error": type(exc).__name__,
                "message": str(exc)[:300],
                "written": sorted(p.name for p in Path(tmp).iterdir()),
            }
    result["copied"] = bool(torch.equal(out, shared))
    done.put(json.dumps(result))


if __name__ == "__main__":
    mp.set_start_method("spawn")
    queue: "mp.Queue[torch.Tensor]" = mp.Queue()
    done: "mp.Queue[str]" = mp.Queue()
    proc = mp.Process(target=child, args=(queue, done))
    proc.start()
    data = torch.arange(1 << 16, dtype=torch.float32, device="cuda")
    queue.put(data)
    print(done.get(timeout=240), file=sys.stdout)
    proc.join(60)
