"""SAVE refuses while the process has memory of another process open that it cannot record (PeerMemoryError,
nothing written): a graph may read it, directly or through pointers in device memory (NCCL keeps its peers'
buffers in device-side structures). Open means an IPC mapping not closed, an allocation imported from a
shareable handle not released, or a mapping of one not unmapped (the mapping outlives the handle, as NCCL's
do); here the mapping lies in the region but the process declared no rank (foundry.set_rank), which SAVE
needs to record it (tests/cpu/test_peer_ranks.py has the recorded case). On the fake driver, which models the
sharing calls inside one process (tests/fakecuda/vmm.c)."""

from __future__ import annotations

from pathlib import Path

from tests.support.graphs import JsonRunner, prelude

PEER = """
from foundry.native.lib import native
from foundry.save import save_graph
n = 64
outside = cu.malloc(4 * n)  # before the region: its IPC handle is the driver's
foundry.set_allocation_region(BASE, "1GB")
K = module("fk_copy_bytes")
x, y = buf("x", 4 * n), buf("y", 4 * n)
s = cu.stream_create()
FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR

def graph(src):
    cu.begin_capture(s)
    cu.launch(K["fk_copy_bytes"], (1, 1, 1), (1, 1, 1), [("ptr", x), ("ptr", src), (c_uint64, 4 * n)], stream=s)
    return cu.end_capture(s)

def save(name, src):
    g = graph(src)
    return attempt(lambda: save_graph(g, os.path.join(ARCH, name + ".json"), archive_dir=ARCH) and name)

def live():
    return native().fdy_imports_live()

out = {"start": live()}
# A peer's buffer as NCCL maps it: exported as a file descriptor, imported, mapped, the handle released.
gran = cu.granularity()
mine = cu.mem_create(gran)
fd = c_int()
call("cuMemExportToShareableHandle", byref(fd), c_uint64(mine), FD, c_uint64(0))
peer = c_uint64()
call("cuMemImportFromShareableHandle", byref(peer), c_void_p(fd.value), FD)
va = cu.reserve(gran)
cu.mem_map(va, gran, peer.value)
cu.set_access(va, gran)
out["imported"] = live()
out["save_imported"] = save("imported", va)
cu.mem_release(peer.value)
out["released"] = live()
out["save_released"] = save("released", va)
cu.unmap(va, gran)
out["unmapped"] = live()
out["save_local"] = save("local", y)
# An IPC mapping the driver makes (memory outside the region), open then closed.
class IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]
h = IpcHandle()
call("cuIpcGetMemHandle", byref(h), c_uint64(outside))
opened = c_uint64()
call("cuIpcOpenMemHandle_v2", byref(opened), h, c_uint(0))
out["ipc_open"] = live()
out["save_ipc"] = save("ipc", opened.value)
call("cuIpcCloseMemHandle", c_uint64(opened.value))
out["ipc_closed"] = live()
# Region memory's handle is Foundry's: opened, the pages are mapped in a carved reservation, which SAVE records
# only in a process that declared its rank (this one did not).
h = IpcHandle()
call("cuIpcGetMemHandle", byref(h), c_uint64(y))
call("cuIpcOpenMemHandle_v2", byref(opened), h, c_uint(0))
out["region_ipc_open"] = live()
out["save_region_ipc"] = save("ipc_region", opened.value)
call("cuIpcCloseMemHandle", c_uint64(opened.value))
out["region_ipc_closed"] = live()
out["files"] = sorted(os.listdir(ARCH)) if os.path.isdir(ARCH) else []
emit(**out)
"""


def test_save_refuses_while_memory_of_another_process_is_open(app_json: JsonRunner, tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    out = app_json(prelude(arch) + PEER)
    assert out["start"] == 0
    assert out["imported"] == 2  # the imported handle and its mapping
    refused = out["save_imported"]
    assert refused.get("error") == "PeerMemoryError" and "SaveError" in refused["bases"], refused
    assert "another process's GPU memory" in refused["message"] and "foundry.set_rank" in refused["message"]
    # Releasing the handle leaves the mapping: still refused.
    assert out["released"] == 1 and out["save_released"].get("error") == "PeerMemoryError"
    assert out["unmapped"] == 0 and out["save_local"] == {"ok": "local"}
    assert out["ipc_open"] == 1 and out["save_ipc"].get("error") == "PeerMemoryError"
    assert "cuIpcOpenMemHandle" in out["save_ipc"]["message"] and "NCCL_CUMEM_ENABLE=1" in out["save_ipc"]["message"]
    assert out["ipc_closed"] == 0
    assert out["region_ipc_open"] == 1 and out["save_region_ipc"].get("error") == "PeerMemoryError"
    assert "foundry.set_rank" in out["save_region_ipc"]["message"], out["save_region_ipc"]
    assert out["region_ipc_closed"] == 0
    # Only the graph saved with nothing open was written.
    assert "local.json" in out["files"]
    assert not [f for f in out["files"] if f.startswith(("imported", "released", "ipc"))], out["files"]
