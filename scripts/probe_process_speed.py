"""Does the allocation region change how fast a process's graphs replay? The decoder step captured with
PyTorch alone (torch.cuda.graph) at three batch sizes, timed warm (CUDA events, interleaved, median), in a
process set up one of three ways; run each in a process of its own, in one call, to compare them:

    python3 scripts/probe_process_speed.py plain OUT.json                                   no Foundry
    python3 -m foundry.cli run -- python3 scripts/probe_process_speed.py preloaded OUT.json  interposer only
    python3 -m foundry.cli run -- python3 scripts/probe_process_speed.py region OUT.json     region set first
    python3 -m foundry.cli run -- python3 scripts/probe_process_speed.py saved OUT.json      region, captured with
                                                                        foundry.graph and saved (a SAVE process)
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from foundry_bench import probes
from foundry_bench.model import QwenDecoder
from foundry_bench.shapes import SHAPES

BASE = 0x600000000000


def main(mode: str, out: Path) -> None:
    torch.cuda.init()
    import foundry

    if mode in ("region", "saved"):
        foundry.set_allocation_region(BASE, "512GB")
    cfg = SHAPES["qwen3-0.6b"]
    model = QwenDecoder(cfg, seed=0)
    ids = torch.zeros(cfg.max_batch, dtype=torch.int64, device="cuda")
    pos = torch.ones(cfg.max_batch, dtype=torch.int64, device="cuda")
    graphs: dict[str, Any] = {}
    pool = None
    with torch.no_grad():
        for bs in (256, 64, 1):  # largest first, sharing one pool, as the benchmark and vLLM capture
            model(ids[:bs], pos[:bs])
            torch.cuda.synchronize()
            if mode == "saved":
                fg = foundry.CUDAGraph()
                with foundry.graph(fg):
                    hidden = model(ids[:bs], pos[:bs])
                fg.replay()
                graphs[str(bs)] = (fg, hidden)
                continue
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                model(ids[:bs], pos[:bs])
            pool = g.pool()
            g.replay()
            graphs[str(bs)] = g
    torch.cuda.synchronize()
    if mode == "saved":
        archive = Path(tempfile.mkdtemp())
        for name, (fg, hidden) in graphs.items():
            fg.save(archive / f"bs{name}.json", output_tensors=hidden, archive_dir=archive / "archive")
        foundry.save_graph_manifest(archive / "archive")
        graphs = {name: fg for name, (fg, _) in graphs.items()}
        torch.cuda.synchronize()
    us = probes.time_interleaved({k: g.replay for k, g in graphs.items()})
    report = {"mode": mode, "gpu": torch.cuda.get_device_name(), "replay_us": us}
    print(json.dumps(report), flush=True)
    out.write_text(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
