"""vLLM's custom all-reduce under the region, two ranks, outside the engine (run under `foundry run`, with vLLM's
bundle on the path: scripts/gpu_custom_ar.sh). What the vLLM plugin does around vLLM's custom all-reduce
(docs/DESIGN.md, "Many GPUs: tensor parallel in the plugins"), done here with the plugin's own calls
(foundry/integration/shared/allreduce.py: ``record`` at SAVE, ``rewrite`` at LOAD).

    python tests/gpu/custom_ar_probe.py WORK_DIR save|load

Phase "save": each rank sets its device, its rank and the region, creates NCCL's process group and a gloo group,
then vLLM's `CustomAllreduce` over the gloo group (its shared buffers: `cudaMalloc`, `cudaIpcGetMemHandle`, the
peers' opened: Foundry's IPC handles of region memory, csrc/ipc.c), checks an eager all-reduce, captures one
custom all-reduce in a Foundry graph inside `ca.capture()`, whose exit registers the graph's input with the peer
(`get_graph_buffer_ipc_meta`, the handles exchanged and opened, `rank_data` written): the plugin's recorder
reads the slots back, keeps this rank's input and declares the mapping of the peer's input the program's
(`foundry.program_remaps`). It replays, saves, and reports whether the registration's handles are Foundry's, its
offsets, the slots and the peer mappings SAVE recorded. Phase "load": fresh processes repeat the set-up, load
the graph, write the registration's slot again (the plugin's `rewrite`: handles of their own input
exchanged over the gloo group, the peer's opened here), replay, and compare with SAVE's replay bit for bit. Prints
one JSON line."""

from __future__ import annotations

import gc
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_SKIP_P2P_CHECK", "1")  # the driver's P2P report, not vLLM's test in subprocesses

import torch
import torch.distributed as dist
from multi_rank import BASE, REGION, WORLD, _phase, _report_and_tear_down  # this folder's two-rank harness

from foundry.integration.shared import allreduce
from foundry.integration.shared.backend import PublicFoundryApi

N = 1 << 18  # 1 MiB of floats: under the custom all-reduce's 8 MiB buffer


def _set_up(rank: int, port: int) -> tuple[Any, torch.Tensor]:
    """The same calls in the same order in both phases: the buffers' and the peers' addresses follow from them."""
    from vllm.distributed.device_communicators.custom_all_reduce import CustomAllreduce

    import foundry

    torch.cuda.set_device(rank)
    torch.cuda.init()
    foundry.set_rank(rank, WORLD)
    foundry.set_allocation_region(BASE, foundry.parse_size(REGION))
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD, device_id=torch.device("cuda", rank)
    )
    cpu_group = dist.new_group(backend="gloo")
    ca = CustomAllreduce(cpu_group, rank)  # vLLM 0.26 makes and opens its shared buffers here
    if ca.disabled:
        raise RuntimeError("vLLM left its custom all-reduce off on this machine (see its log)")
    x = torch.full((N,), float(rank + 1), device="cuda")
    eager = ca.custom_all_reduce(x)
    torch.cuda.synchronize()
    if eager is None or not bool(torch.all(eager == 3.0)):
        raise RuntimeError(f"the eager custom all-reduce gave {None if eager is None else eager[:4].tolist()}")
    return ca, x


def save_rank(rank: int, port: int, work: str, results: Any) -> None:
    from vllm import _custom_ops as ops

    import foundry

    out: dict[str, Any] = {"rank": rank, "phase": "save"}
    ca = None
    try:
        ca, x = _set_up(rank, port)
        recorder = allreduce.record(ca, PublicFoundryApi())  # what the vLLM plugin puts around its registration
        recorder.keeping = True
        g = foundry.CUDAGraph()
        with ca.capture():
            with foundry.graph(g):
                y = ca.custom_all_reduce(x)
            handles, offsets = ops.get_graph_buffer_ipc_meta(ca._ptr)  # what the capture's exit registers
        out["foundry_handles"] = bytes(v & 0xFF for v in handles[:7]) == b"FDYIPC1"  # the C++ hands out signed bytes
        out["offsets"] = list(offsets)
        g.replay()
        torch.cuda.synchronize()
        native = y.cpu()
        out["native_ok"] = bool(torch.all(native == 3.0))
        torch.save(native, Path(work) / f"native_{rank}.pt")
        (kept,) = recorder.kept
        out["registration"] = kept.to_json()
        (Path(work) / f"registrations_{rank}.json").write_text(json.dumps(allreduce.to_json(recorder.kept)))
        arch = Path(work) / f"rank_{rank}"
        g.save(arch / "g.json", output_tensors=y, archive_dir=arch)
        foundry.save_graph_manifest(arch)
        from foundry.archive import read_meta

        meta = read_meta(arch / "g.json")
        out.update(saved=True, peers=[[p.offset, p.size] for p in meta.peers])
        del g
        gc.collect()
    except Exception as exc:
        out.update(error=type(exc).__name__, message=str(exc)[:800], trace=traceback.format_exc()[-1500:])
    if ca is not None:
        ca.close()
    _report_and_tear_down(out, results)


def load_rank(rank: int, port: int, work: str, results: Any) -> None:
    import foundry

    out: dict[str, Any] = {"rank": rank, "phase": "load"}
    ca = None
    try:
        arch = Path(work) / f"rank_{rank}"
        torch.cuda.set_device(rank)
        torch.cuda.init()
        foundry.load_cuda_modules_and_libraries(arch)
        ca, _ = _set_up(rank, port)
        g, y = foundry.CUDAGraph.load(arch / "g.json")
        saved = allreduce.from_json(json.loads((Path(work) / f"registrations_{rank}.json").read_text()))
        out["slots"] = allreduce.rewrite(ca, saved or (), PublicFoundryApi())  # as the plugin does after install
        g.replay()
        torch.cuda.synchronize()
        native = torch.load(Path(work) / f"native_{rank}.pt")
        out["identical"] = bool(torch.equal(y.cpu().view(torch.int32), native.view(torch.int32)))
    except Exception as exc:
        out.update(error=type(exc).__name__, message=str(exc)[:800], trace=traceback.format_exc()[-1500:])
    if ca is not None:
        ca.close()
    _report_and_tear_down(out, results)


def main() -> None:
    if torch.cuda.device_count() < WORLD:
        print(json.dumps({"skipped": f"needs {WORLD} GPUs, found {torch.cuda.device_count()}"}))
        return
    try:
        import vllm._custom_ops  # noqa: F401
    except ImportError as exc:
        print(json.dumps({"skipped": f"vLLM is not importable here ({exc}): stage its bundle first"}))
        return
    work, phase = sys.argv[1], sys.argv[2]
    target = save_rank if phase == "save" else load_rank
    print(json.dumps({"work": work, "phase": phase, phase: _phase(target, work)}))


if __name__ == "__main__":
    main()
