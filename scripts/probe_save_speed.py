"""Does SAVE leave the program's own graphs slower? (run under the interposer:
``python3 -m foundry.cli run -- python3 scripts/probe_save_speed.py OUT.json``)

Per batch size, several captures of the same decoder step, timed interleaved (CUDA events, warm,
median) before and after one thing is done to each:
  toggled   every work node switched off and on again in PyTorch's exec (what SAVE's RNG probe did)
  saved     foundry's save() of the graph
  noop      every work node set enabled (already enabled)
  control   nothing
  plain     torch.cuda.CUDAGraph, no Foundry
then two ways back for "toggled": a whole cuGraphExecUpdate, and PyTorch re-instantiating its exec.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch

import foundry
from foundry.capture.cudagraph import _torch_exec
from foundry.probe import codec, exec_update
from foundry_bench import probes
from foundry_bench.model import QwenDecoder
from foundry_bench.shapes import SHAPES

BASE = 0x600000000000


def main(out: Path) -> None:
    foundry.set_allocation_region(BASE, "512GB")
    cfg = SHAPES["qwen3-0.6b"]
    model = QwenDecoder(cfg, seed=0)
    ids = torch.zeros(cfg.max_batch, dtype=torch.int64, device="cuda")
    pos = torch.ones(cfg.max_batch, dtype=torch.int64, device="cuda")
    report: dict[str, object] = {"gpu": torch.cuda.get_device_name()}
    tmp = Path(tempfile.mkdtemp())
    with torch.no_grad():
        for bs in (1, 64, 256):
            model(ids[:bs], pos[:bs])
            torch.cuda.synchronize()
            graphs: dict[str, foundry.CUDAGraph] = {}
            outs = {}
            for name in ("toggled", "saved", "noop", "control"):
                g = foundry.CUDAGraph()
                with foundry.graph(g):
                    outs[name] = model(ids[:bs], pos[:bs])
                g.replay()
                graphs[name] = g
            plain = torch.cuda.CUDAGraph()
            with torch.cuda.graph(plain):
                model(ids[:bs], pos[:bs])
            plain.replay()
            torch.cuda.synchronize()
            runs = {k: g.replay for k, g in graphs.items()} | {"plain": plain.replay}
            before = probes.time_interleaved(runs)
            rec = {}
            for name in ("toggled", "noop"):
                g = graphs[name]
                t = g._require_torch()
                assert g._extracted is not None
                record = g._extracted.result().record
                if name == "toggled":
                    codec.set_work_enabled(int(t.raw_cuda_graph()), _torch_exec(t), record, False)
                codec.set_work_enabled(int(t.raw_cuda_graph()), _torch_exec(t), record, True)
                rec[name] = record
            graphs["saved"].save(tmp / f"bs{bs}.json", output_tensors=outs["saved"], archive_dir=tmp / "archive")
            torch.cuda.synchronize()
            after = probes.time_interleaved(runs)
            t = graphs["toggled"]._require_torch()
            exec_update(_torch_exec(t), int(t.raw_cuda_graph()))
            after_update = probes.time_interleaved({"toggled": graphs["toggled"].replay, "plain": plain.replay})
            s = graphs["saved"]._require_torch()
            s.instantiate()  # PyTorch destroys its exec and makes a fresh one
            after_reinst = probes.time_interleaved({"saved": graphs["saved"].replay, "plain": plain.replay})
            row = {
                "before_us": before,
                "after_us": after,
                "after_over_before": {k: after[k] / before[k] for k in before},
                "toggled_after_exec_update_us": after_update,
                "saved_after_reinstantiate_us": after_reinst,
            }
            report[str(bs)] = row
            print(bs, json.dumps({k: round(v, 3) for k, v in row["after_over_before"].items()}), flush=True)
            print("   before", {k: round(v) for k, v in before.items()}, flush=True)
            print("   after ", {k: round(v) for k, v in after.items()}, flush=True)
            print("   toggled after exec update", {k: round(v) for k, v in after_update.items()}, flush=True)
            print("   saved after re-instantiate", {k: round(v) for k, v in after_reinst.items()}, flush=True)
    out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
