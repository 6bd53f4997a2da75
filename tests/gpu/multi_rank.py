"""Two ranks, one GPU each, NCCL all-reduce inside a captured graph: SAVE on every rank, then LOAD in fresh
processes on every rank, outputs compared bit for bit with the native graph (run under `foundry run`).

    python tests/gpu/multi_rank.py [WORK_DIR [save|resave|load]]    (save and load without a phase)

"resave" saves again, in fresh processes, into WORK_DIR/rank_<r>.again: what differs from rank_<r>
(scripts/diff_archives.py) is process state that no LOAD can reproduce.

Phase "save": each rank sets its device and rank (foundry.set_rank), sets the region BEFORE
init_process_group (so that NCCL's own buffers and every peer buffer it imports are carved from the
region), creates the process group with device_id (an eager communicator), warms the all-reduce up
(NCCL connects its peers at the first collective), captures x*2 -> all_reduce -> +1 with foundry.graph,
replays it natively and saves into WORK_DIR/rank_<r>. Phase "load": fresh processes repeat the same
set-up in the same order (region, process group, warm-up), then CUDAGraph.load, an eager all-reduce (is
the communicator sound after LOAD restored SAVE's memory?), and the replay. Prints one JSON line: per rank
what SAVE recorded (peer mappings, rank), whether LOAD matched native, and errors.
NVLink multicast stays off in every process (NCCL_NVLS_ENABLE=0 and the torch/NVSHMEM switches).
Fewer than 2 GPUs: prints {"skipped": ...} and exits 0.

With FOUNDRY_MULTI_IPC=1 each rank also shares a buffer of its region with the other the way a custom all-reduce
shares its buffers (cuIpcGetMemHandle, the handles exchanged, cuIpcOpenMemHandle: csrc/ipc.c), in the set-up both
phases repeat, and the captured graph reads the peer's buffer through the opened pointer, which its kernel takes by
value: LOAD matches native only if the peer's pages are mapped at SAVE's address again."""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import queue
import socket
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(MULTICAST_OFF)  # before torch or NCCL is imported, inherited by every rank
# The process group's heartbeat thread logs a stack every second once a peer has exited; off, so the log
# shows what the ranks did.
os.environ.setdefault("TORCH_NCCL_ENABLE_MONITORING", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

WORLD = 2
BASE = 0x600000000000
REGION = "64GB"
N = 1 << 20
RANK_SECONDS = 180


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _set_up(rank: int, port: int) -> torch.Tensor:
    """Everything both phases do, in the same order: the peer buffers' addresses depend on it."""
    import foundry

    torch.cuda.set_device(rank)
    torch.cuda.init()
    foundry.set_rank(rank, WORLD)
    foundry.set_allocation_region(BASE, foundry.parse_size(REGION))
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD,
        device_id=torch.device("cuda", rank),
    )
    x = torch.arange(N, dtype=torch.float32, device="cuda") * (rank + 1)
    warm = x.clone()
    dist.all_reduce(warm)  # NCCL connects its peers (and maps their buffers) at the first collective
    torch.cuda.synchronize()
    return x


IPC = os.environ.get("FOUNDRY_MULTI_IPC") == "1"
_KEEP: list[Any] = []  # this rank's shared buffer: alive while the process runs


PEER_ADD = r"""
extern "C" __global__ void peer_add(float* out, const float* y, const float* peer, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = y[i] + 1.0f + 0.5f * peer[i];
}
"""


def _peer_buffer(rank: int) -> int:
    """This rank's buffer (rank + 1 everywhere) shared by IPC handle; the peer's, opened here: its address, which
    a kernel takes by value as a custom all-reduce's does (torch would not wrap another device's pages)."""
    import ctypes

    mine = torch.full((N,), float(rank + 1), device="cuda")
    _KEEP.append(mine)
    torch.cuda.synchronize()

    class IpcHandle(ctypes.Structure):  # CUipcMemHandle: passed by value, 64 bytes
        _fields_ = [("reserved", ctypes.c_ubyte * 64)]

    cuda = ctypes.CDLL("libcuda.so.1")  # the interposer answers dlsym for the IPC calls
    handle = IpcHandle()
    rc = cuda.cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(mine.data_ptr()))
    if rc != 0:
        raise RuntimeError(f"cuIpcGetMemHandle failed ({rc})")
    handles: list[Any] = [None] * WORLD
    dist.all_gather_object(handles, bytes(handle))  # every rank's handle made before any is opened
    theirs = IpcHandle.from_buffer_copy(handles[(rank + 1) % WORLD])
    ptr = ctypes.c_uint64()
    rc = cuda.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), theirs, ctypes.c_uint(1))
    if rc != 0:
        raise RuntimeError(f"cuIpcOpenMemHandle failed ({rc})")
    dist.barrier()  # every rank has opened its peer's before either goes on
    return int(ptr.value)


def _add_peer(y: torch.Tensor, peer: int) -> torch.Tensor:
    """y + 1 + peer / 2, the peer's buffer read through its address by a cupy kernel on torch's stream."""
    import cupy
    from cupy_processes import launch  # tests/gpu, this script's folder

    kernel = cupy.RawKernel(PEER_ADD, "peer_add")
    out = torch.empty_like(y)
    launch(kernel, N // 256, 256, (cupy.asarray(out), cupy.asarray(y), cupy.uint64(peer), cupy.int32(N)))
    return out


def _peers(arch: Path) -> dict[str, Any]:
    from foundry.archive import read_meta

    meta = read_meta(arch / "g.json")
    return {
        "peers": len(meta.peers),
        "peer_bytes": sum(p.size for p in meta.peers),
        "handle_types": sorted({p.handle_type for p in meta.peers}),
        "saved_rank": None if meta.rank is None else meta.rank.to_json(),
    }


COMM_BYTES = 4096


def _dump_state(arch: Path, name: str) -> None:
    """What the NCCL kernel reads, as this process has it: the bytes at the kernel's first argument (the
    communicator's device structure, ncclDevKernelArgs.comm, with its channels after it) and the region's
    allocation log, into arch/../state_<name>.json, so that SAVE and LOAD (before and after CUDAGraph.load)
    can be compared word by word (scripts/multi_state.py). A diagnostic: failures are recorded, not raised."""
    from foundry.native.driver import memcpy_dtoh
    from foundry.probe import archive, records
    from foundry.region import allocation_events

    doc: dict[str, Any] = {"name": name}
    try:
        meta, payload = archive.read_graph(arch / "g.json", verify=False)
        kernels = []
        for path, node in records.iter_nodes(records.parse_record(payload)):
            if isinstance(node, records.KernelNode):
                fn = meta.functions[node.function_index].name
                kernels.append({"node": list(path), "kernel": fn, "args": node.args[:64].hex()})
                if "nccl" in fn.lower() and "comm" not in doc:
                    doc["comm"] = int.from_bytes(node.args[:8], "little")
        doc["kernels"] = kernels
        torch.cuda.synchronize()
        if "comm" in doc:
            doc["comm_bytes"] = memcpy_dtoh(doc["comm"], COMM_BYTES).hex()
        doc["events"] = [[e.kind.name.lower(), e.offset, e.size, e.span] for e in allocation_events()]
    except Exception as exc:
        doc["error"] = f"{type(exc).__name__}: {exc}"[:600]
    (arch.parent / f"state_{name}.json").write_text(json.dumps(doc))


def _report_and_tear_down(out: dict[str, Any], results: Any) -> None:
    """The outcome is reported before the communicator is torn down, so that a crash at teardown (reported
    by the parent as the rank's exit code) does not hide what the phase did."""
    results.put(out)
    results.close()
    results.join_thread()
    # A teardown that hangs (a communicator after a device fault) ends the rank with exit code 3 in 20 s.
    watchdog = threading.Timer(20, lambda: (print(f"rank {out['rank']}: teardown hung", flush=True), os._exit(3)))
    watchdog.daemon = True
    watchdog.start()
    if dist.is_initialized():
        dist.destroy_process_group()
    watchdog.cancel()


def _child(target: Any, rank: int, port: int, work: str, results: Any) -> None:
    faulthandler.enable()  # a crash in native code prints the Python stack of every thread
    target(rank, port, work, results)


def _capture_and_save(rank: int, port: int, work: str) -> Path:
    """The graph lives only in here: NCCL's communicator counts the graphs that captured its collectives and
    its destruction waits until they are gone (a graph still alive at destroy_process_group hangs it)."""
    import foundry

    x = _set_up(rank, port)
    peer = _peer_buffer(rank) if IPC else None
    if peer is not None:
        _add_peer(x, peer)  # compiled and loaded before the capture, as every kernel of the graph
        torch.cuda.synchronize()
    suffix = os.environ.get("FOUNDRY_MULTI_SUFFIX", "")
    arch = Path(work) / f"rank_{rank}{suffix}"
    g = foundry.CUDAGraph()
    with foundry.graph(g):
        y = x * 2
        dist.all_reduce(y)
        result = y + 1 if peer is None else _add_peer(y, peer)
    g.replay()
    torch.cuda.synchronize()
    native = result.cpu()
    torch.save(native, Path(work) / f"native_{rank}{suffix}.pt")
    g.save(arch / "g.json", output_tensors=result, archive_dir=arch)
    foundry.save_graph_manifest(arch)
    _dump_state(arch, f"save{suffix}_{rank}")
    return arch


def save_rank(rank: int, port: int, work: str, results: Any) -> None:
    out: dict[str, Any] = {"rank": rank, "phase": "save"}
    try:
        arch = _capture_and_save(rank, port, work)
        gc.collect()  # the graph and its exec, before the communicator is torn down
        torch.cuda.synchronize()
        out.update(_peers(arch), saved=True)
    except Exception as exc:  # reported, not raised: the parent prints every rank's outcome
        out.update(error=type(exc).__name__, message=str(exc)[:600], trace=traceback.format_exc()[-1500:])
    _report_and_tear_down(out, results)


def load_rank(rank: int, port: int, work: str, results: Any) -> None:
    import foundry

    out: dict[str, Any] = {"rank": rank, "phase": "load"}
    try:
        arch = Path(work) / f"rank_{rank}"
        # The rank's device first: the images are loaded with the current context's device, and LOAD refuses
        # another (DeviceMismatchError; without a context, load_cuda_modules_and_libraries makes device 0's).
        torch.cuda.set_device(rank)
        torch.cuda.init()
        foundry.load_cuda_modules_and_libraries(arch)
        x = _set_up(rank, port)
        if IPC:  # the same calls as SAVE's before its capture: the same addresses
            _add_peer(x, _peer_buffer(rank))
            torch.cuda.synchronize()
        _dump_state(arch, f"load_before_{rank}")
        g, result = foundry.CUDAGraph.load(arch / "g.json")
        _dump_state(arch, f"load_after_{rank}")
        check = torch.full((4,), float(rank + 1), device="cuda")
        dist.all_reduce(check)
        torch.cuda.synchronize()
        out["eager_after_load"] = check.tolist()  # [3.0] * 4 on two ranks
        g.replay()
        torch.cuda.synchronize()
        native = torch.load(Path(work) / f"native_{rank}.pt")
        loaded = result.cpu()
        out.update(
            identical=bool(torch.equal(loaded.view(torch.int32), native.view(torch.int32))),
            first=float(loaded.flatten()[1]),
        )
    except Exception as exc:
        out.update(error=type(exc).__name__, message=str(exc)[:600], trace=traceback.format_exc()[-1500:])
    _report_and_tear_down(out, results)


def _phase(target: Any, work: str) -> list[dict[str, Any]]:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_child, args=(target, r, port, work, results)) for r in range(WORLD)]
    for p in procs:
        p.start()
    outs: list[dict[str, Any]] = []
    deadline = time.monotonic() + RANK_SECONDS
    while len(outs) < WORLD and time.monotonic() < deadline:
        try:
            outs.append(results.get(timeout=2))
        except queue.Empty:
            # A rank that died without reporting (a crash in native code) ends the wait at once.
            if any(p.exitcode not in (None, 0) for p in procs):
                break
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
            p.join(5)
    seen = {o.get("rank") for o in outs}
    for r, p in enumerate(procs):
        if r not in seen:
            message = f"rank {r} reported nothing (exit code {p.exitcode})"
            outs.append({"rank": r, "error": "NoReport", "message": message})
    for o in outs:
        o["exitcode"] = procs[o["rank"]].exitcode
    return sorted(outs, key=lambda o: o["rank"])


def main() -> None:
    if torch.cuda.device_count() < WORLD:
        print(json.dumps({"skipped": f"needs {WORLD} GPUs, found {torch.cuda.device_count()}"}))
        return
    work = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="foundry-ranks-")
    phase = sys.argv[2] if len(sys.argv) > 2 else "both"
    if phase == "resave":
        os.environ["FOUNDRY_MULTI_SUFFIX"] = ".again"  # inherited by the ranks
    saved = _phase(save_rank, work) if phase in ("save", "resave", "both") else []
    go = phase == "load" or (phase == "both" and all(o.get("saved") for o in saved))
    loaded = _phase(load_rank, work) if go else []
    print(json.dumps({"work": work, "phase": phase, "save": saved, "load": loaded}))


if __name__ == "__main__":
    main()
