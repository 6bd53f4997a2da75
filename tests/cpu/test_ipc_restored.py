"""A LOADed rank shares memory its restore mapped, between real processes on the fake driver: what an engine's
custom all-reduce asks at LOAD, where the graph inputs it registers with its peers lie in SAVE's memory, which no
allocation of the loading process holds. The loading process answers the pointer's range start from the physical
allocation the restore mapped there (cuPointerGetAttribute), makes a handle of that start (cuIpcGetMemHandle), and
another process opens it and reads the loaded rank's bytes at the pointer's offset, as vLLM's registration does
(foundry.native.ipc, which foundry.rewrite_peer_registrations calls)."""

from __future__ import annotations

from pathlib import Path

from tests.cpu.test_ipc_region import _exporter, _run, _script

# Both phases: the region, then SAVE allocates the graph's buffers and captures a copy into `y`; LOAD allocates
# nothing, so its restore maps SAVE's memory where `x` and `y` were.
SAVER = """
from foundry.save import save_graph, save_graph_manifest
foundry.set_allocation_region(BASE, "1GB")
K = module("fk_copy_bytes")
x = buf("x", 8192)
y = buf("y", 8192)
cu.memcpy_htod(x, PATTERN * 2)
s = cu.stream_create()
cu.begin_capture(s)
cu.launch(K["fk_copy_bytes"], (1, 1, 1), (1, 1, 1), [("ptr", y), ("ptr", x), (c_uint64, 8192)], stream=s)
g = cu.end_capture(s)
out = [OutputSpec(y, (2048,), (1,), "float32", 8192)]
r = attempt(lambda: save_graph(g, os.path.join(ARCH, "copy.json"), outputs=out, archive_dir=ARCH).name)
save_graph_manifest(ARCH)
emit(saved=r, y=y)
"""

LOADER = """
from foundry.load import load_graph
from foundry.native.ipc import allocation_start, ipc_handle
from foundry.region import own_chunks, restored_covers
foundry.load_cuda_modules_and_libraries(ARCH)
foundry.set_allocation_region(BASE, "1GB")
g = load_graph(os.path.join(ARCH, "copy.json"))
cu.graph_launch(g.exec, 0)
cu.sync()
y = SAVED_Y
pointer = y + 4096 + 256  # a graph input inside SAVE's allocation, not at its start
start = allocation_start(pointer)
with open(HANDLES + ".part", "w") as f:
    json.dump({"handle": ipc_handle(start).hex(), "offset": pointer - start}, f)
os.replace(HANDLES + ".part", HANDLES)
deadline = time.time() + 60
while not os.path.exists(DONE) and time.time() < deadline:
    time.sleep(0.02)
emit(done=os.path.exists(DONE), restored=restored_covers(pointer, 256), own=len(own_chunks()), start=start,
     pointer=pointer)
"""

PEER = """
from foundry.native.ipc import ipc_open
foundry.set_allocation_region(BASE, "1GB")
foundry.set_rank(1, 2)
handles = json.load(open(HANDLES))
opened = ipc_open(bytes.fromhex(handles["handle"]))
emit(read=cu.memcpy_dtoh(opened + handles["offset"], 256).hex())
"""


def test_memory_loads_restore_mapped_is_shared_by_ipc_handle_at_the_pointers_offset(
    tmp_path: Path, fakecuda_dir: Path, foundry_lib: Path
) -> None:
    saved = _run(_script(tmp_path, SAVER), fakecuda_dir, foundry_lib)
    assert saved["saved"] == {"ok": "copy"}, saved
    with _exporter(tmp_path, fakecuda_dir, foundry_lib, LOADER.replace("SAVED_Y", str(saved["y"]))) as exported:
        peer = _run(_script(tmp_path, PEER), fakecuda_dir, foundry_lib)
    pattern = bytes((7 * i + 3) % 256 for i in range(4096))
    # the loading process allocated nothing: the pointer lies in memory its restore mapped
    assert exported["done"] and exported["restored"] and exported["own"] == 0, exported
    # the range start is the restored allocation's, below the pointer; its handle plus the offset reads the
    # loaded rank's bytes (the graph's copy, replayed after LOAD) at the pointer
    assert exported["start"] < exported["pointer"], exported
    assert bytes.fromhex(peer["read"]) == pattern[256:512], peer
