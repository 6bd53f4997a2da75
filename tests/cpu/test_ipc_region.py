"""IPC handles of region memory (csrc/ipc.c), between real processes on the fake driver: what a custom all-reduce
does with its buffers. One process allocates in its region and makes a handle (cuIpcGetMemHandle); others open
it (cuIpcOpenMemHandle) and read and write the same pages, mapped into a reservation carved from their own region,
so at the same address in every fresh process that repeats the same calls, and listed as imported memory that
SAVE records (foundry.set_rank) and LOAD checks: a graph whose kernel reads the peer's buffer through the opened
pointer saves, and loads in a fresh process that opens the handle again (refused by name where it does not). A
handle whose process is gone is refused by name, with no hang."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.graphs import prelude
from tests.support.subproc import child_env

EXPORTER = """
foundry.set_allocation_region(BASE, "1GB")
n = 4096
pad = buf("pad", 3 * 4096)  # the buffer does not start at its granule: the handle carries its offset
x = buf("x", n)
cu.memcpy_htod(x, PATTERN)
class IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]
handles = {}
for name, ptr in (("base", x), ("inside", x + 256)):
    h = IpcHandle()
    call("cuIpcGetMemHandle", byref(h), c_uint64(ptr))
    handles[name] = bytes(h.reserved).hex()
# vLLM's custom all-reduce shares a graph's buffer as the handle of its allocation's start (RANGE_START_ADDR) and
# the offset from it: the start must be the allocation's, as cuMemGetAddressRange says, not the mapping's.
start, size = c_uint64(), c_size_t()
call("cuPointerGetAttribute", byref(start), c_int(11), c_uint64(x + 256))  # CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
call("cuPointerGetAttribute", byref(size), c_int(12), c_uint64(x + 256))  # CU_POINTER_ATTRIBUTE_RANGE_SIZE
h = IpcHandle()
call("cuIpcGetMemHandle", byref(h), c_uint64(start.value))
handles["start"] = bytes(h.reserved).hex()
handles["offset"] = x + 256 - start.value
handles["range"] = [start.value == x, size.value]
with open(HANDLES + ".part", "w") as f:
    json.dump(handles, f)
os.replace(HANDLES + ".part", HANDLES)
deadline = time.time() + 60
while not os.path.exists(DONE) and time.time() < deadline:
    time.sleep(0.02)
emit(done=os.path.exists(DONE), x=x, now=cu.memcpy_dtoh(x, 16).hex())
"""

IMPORTER = """
from foundry.native.imports import open_imports
foundry.set_allocation_region(BASE, "1GB")
foundry.set_rank(1, 2)
local = buf("local", 4096)  # this process's own allocation before the peer's: the carved address follows it
handles = json.load(open(HANDLES))
class IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]
def open_handle(hexed):
    h = IpcHandle()
    ctypes.memmove(h.reserved, bytes.fromhex(hexed), 64)
    p = c_uint64()
    call("cuIpcOpenMemHandle_v2", byref(p), h, c_uint(1))
    return p.value
base = open_handle(handles["base"])
inside = open_handle(handles["inside"])
start = open_handle(handles["start"])
by_offset = cu.memcpy_dtoh(start + handles["offset"], 4) == PATTERN[256:260]
call("cuIpcCloseMemHandle", c_uint64(start))
seen = cu.memcpy_dtoh(base, 4096)
cu.memcpy_htod(base, WRITE)
imports = open_imports()
out = dict(base=base, inside=inside, same=seen == PATTERN, inside_reads=cu.memcpy_dtoh(inside, 4) == PATTERN[256:260],
           mappings=[[m.address, m.size, m.in_region] for m in imports.mappings], handles=imports.handles,
           ipc_open=imports.ipc_open, by_offset=by_offset, range=handles["range"])
call("cuIpcCloseMemHandle", c_uint64(inside))
call("cuIpcCloseMemHandle", c_uint64(base))
out["after_close"] = len(open_imports().mappings)
emit(**out)
"""

SETTINGS = """
import json, time
PATTERN = bytes((7 * i + 3) % 256 for i in range(4096))
WRITE = bytes(range(16))
HANDLES = {handles!r}
DONE = {done!r}
"""


def _script(tmp_path: Path, body: str) -> str:
    settings = SETTINGS.format(handles=str(tmp_path / "handles.json"), done=str(tmp_path / "done"))
    return prelude(tmp_path / "arch") + textwrap.dedent(settings) + textwrap.dedent(body)


def _run(code: str, fakecuda_dir: Path, foundry_lib: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", code], env=child_env(fakecuda_dir, None, foundry_lib),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@contextmanager
def _exporter(tmp_path: Path, fakecuda_dir: Path, foundry_lib: Path, body: str = EXPORTER) -> Iterator[dict[str, Any]]:
    """The exporting process (``body``), up with its handles written while the block runs; then told it is done.
    The dict yielded holds its JSON line afterwards."""
    exporter = subprocess.Popen([sys.executable, "-c", _script(tmp_path, body)],
                                env=child_env(fakecuda_dir, None, foundry_lib),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    exported: dict[str, Any] = {}
    try:
        deadline = time.time() + 60
        while not (tmp_path / "handles.json").exists() and exporter.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        assert (tmp_path / "handles.json").exists(), exporter.communicate(timeout=10)
        yield exported
        (tmp_path / "done").touch()
        out, err = exporter.communicate(timeout=60)
        assert exporter.returncode == 0, err[-3000:]
        exported.update(json.loads(out.strip().splitlines()[-1]))
    finally:
        if exporter.poll() is None:
            exporter.kill()


def test_a_handle_of_region_memory_maps_the_same_pages_at_the_same_carved_address_in_each_fresh_process(
    tmp_path: Path, fakecuda_dir: Path, foundry_lib: Path
) -> None:
    with _exporter(tmp_path, fakecuda_dir, foundry_lib) as exported:
        first = _run(_script(tmp_path, IMPORTER), fakecuda_dir, foundry_lib)
        again = _run(_script(tmp_path, IMPORTER), fakecuda_dir, foundry_lib)
        # a process without a region maps the pages where the driver chooses: listed outside the region
        unplaced = IMPORTER.replace('foundry.set_allocation_region(BASE, "1GB")\n', "")
        outside = _run(_script(tmp_path, unplaced), fakecuda_dir, foundry_lib)
    # the peer's bytes, read through the handle, and an interior pointer's handle opens at its offset
    assert first["same"] and first["inside_reads"] and first["inside"] != first["base"]
    # the allocation's start and size as the region placed it, and its handle plus the offset reads the pointer's bytes
    assert first["range"] == [True, 4096] and first["by_offset"]
    # in the region, carved: the same address in a fresh process that repeats the calls
    assert first["base"] == again["base"] and first["inside"] == again["inside"]
    assert all(in_region for _, _, in_region in first["mappings"]) and len(first["mappings"]) == 2
    assert first["ipc_open"] == 0 and first["handles"] == 0  # mappings of imported memory, handles released
    assert first["after_close"] == 0
    assert outside["inside_reads"] and outside["by_offset"] and not any(m[2] for m in outside["mappings"]), outside
    # the importers' writes reached the exporter's pages
    assert exported["done"] and bytes.fromhex(exported["now"]) == bytes(range(16))


def test_a_handle_whose_process_is_gone_is_refused_by_name(
    tmp_path: Path, fakecuda_dir: Path, foundry_lib: Path
) -> None:
    (tmp_path / "done").touch()  # the exporter makes its handles and exits at once
    exported = _run(_script(tmp_path, EXPORTER), fakecuda_dir, foundry_lib)
    assert exported["done"]
    code = _script(tmp_path, IMPORTER).replace(
        'base = open_handle(handles["base"])',
        'r = attempt(lambda: open_handle(handles["base"]))\n'
        "from foundry.native.lib import native\n"
        "emit(result=r, message=native().last_error())\nraise SystemExit(0)\nbase = 0",
    )
    t0 = time.monotonic()
    out = _run(code, fakecuda_dir, foundry_lib)
    assert time.monotonic() - t0 < 60  # refused at once: nobody listens for a gone process
    assert "error" in out["result"], out
    assert "did not answer" in out["message"] and "exited" in out["message"], out["message"]


# The rank that reads its peer's buffer in a graph (a custom all-reduce's kernel takes the peer's address by
# value): SAVE records the opened mapping with its rank; LOAD, in a fresh process that repeats the calls, opens
# the handle again, finds the pages where SAVE had them and replays the peer's current bytes.
# Rank 1 of two, SAVE (or LOAD, with SAVE = False): the region, `y`, the exporter's handles; `open_inside()` opens
# the handle of the exporter's buffer at 256 bytes in (tests/cpu/test_program_remaps.py reads it through a table),
# `capture_one` captures one launch of a kernel, and `path` is where the graph is saved.
READER_HEAD = """
from foundry.save import save_graph, save_graph_manifest
from foundry.load import load_graph
from foundry.native.imports import open_imports
from foundry.schema import OutputSpec
if not SAVE:
    foundry.load_cuda_modules_and_libraries(ARCH)
foundry.set_rank(1, 2)
foundry.set_allocation_region(BASE, "1GB")
y = buf("y", 256)
handles = json.load(open(HANDLES))
class IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]
def open_inside():
    h = IpcHandle()
    ctypes.memmove(h.reserved, bytes.fromhex(handles["inside"]), 64)
    p = c_uint64()
    call("cuIpcOpenMemHandle_v2", byref(p), h, c_uint(1))
    return p.value
def capture_one(kernel, params):
    s = cu.stream_create()
    cu.begin_capture(s)
    cu.launch(kernel, (1, 1, 1), (1, 1, 1), params, stream=s)
    return cu.end_capture(s)
path = os.path.join(ARCH, "reader.json")
"""

READER = (
    READER_HEAD
    + """
K = module("fk_copy_bytes")
peer = open_inside() if OPEN else 0
if SAVE:
    g = capture_one(K["fk_copy_bytes"], [("ptr", y), ("ptr", peer), (c_uint64, 256)])
    out = [OutputSpec(y, (64,), (1,), "float32", 256)]
    r = attempt(lambda: save_graph(g, path, outputs=out, archive_dir=ARCH).name)
    save_graph_manifest(ARCH)
    cu.graph_launch(cu.instantiate(g), 0)
    cu.sync()
    emit(saved=r, peer=peer, native=cu.memcpy_dtoh(y, 256).hex(), peers=len(open_imports().mappings))
else:
    cu.memset_d32(y, 0, 64)
    r = attempt(lambda: load_graph(path))
    if "ok" in r:
        cu.graph_launch(r["ok"].exec, 0)
        cu.sync()
        r = {"ok": cu.memcpy_dtoh(y, 256).hex()}
    emit(load=r, peer=peer)
"""
)


def test_a_graph_reading_a_peers_buffer_by_ipc_handle_saves_and_loads_in_fresh_processes(
    tmp_path: Path, fakecuda_dir: Path, foundry_lib: Path
) -> None:

    def reader(save: bool, open_handle: bool) -> dict[str, Any]:
        head = f"SAVE = {save!r}\nOPEN = {open_handle!r}\n"
        return _run(_script(tmp_path, head + READER), fakecuda_dir, foundry_lib)

    with _exporter(tmp_path, fakecuda_dir, foundry_lib):
        saved = reader(save=True, open_handle=True)
        loaded = reader(save=False, open_handle=True)
        refused = reader(save=False, open_handle=False)
    pattern = bytes((7 * i + 3) % 256 for i in range(4096))
    assert saved["saved"] == {"ok": "reader"} and saved["peers"] == 1, saved
    assert bytes.fromhex(saved["native"]) == pattern[256:512]  # the peer's bytes at the handle's pointer
    assert loaded["peer"] == saved["peer"] and loaded["load"] == {"ok": saved["native"]}, loaded
    # not opened again: nothing of the peer is mapped where SAVE had it, refused before anything replays
    assert refused["load"].get("error") == "PeerMappingError", refused


# The exporter frees its buffer and allocates another at the same offsets (its cursor moved back, as SAVE's KV
# cache phase moves it over the memory profile's): the handle of the new memory differs from the old one's, so a
# program that opens each distinct handle once opens the new memory; the old handle is refused by name.
REALLOCATOR = """
foundry.set_allocation_region(BASE, "1GB")
n = 4 << 20
x = buf("x", n)
class IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]
def handle(ptr):
    h = IpcHandle()
    call("cuIpcGetMemHandle", byref(h), c_uint64(ptr))
    return bytes(h.reserved).hex()
old = handle(x)
again = handle(x)
cu.free(x)
foundry.set_current_alloc_offset(x - BASE)
y = buf("y", n)
cu.memcpy_htod(y, PATTERN)
with open(HANDLES + ".part", "w") as f:
    json.dump({"old": old, "again": again, "new": handle(y), "same_place": y == x}, f)
os.replace(HANDLES + ".part", HANDLES)
deadline = time.time() + 60
while not os.path.exists(DONE) and time.time() < deadline:
    time.sleep(0.02)
emit(done=os.path.exists(DONE))
"""

REOPENER = """
from foundry.native.ipc import ipc_open
from foundry.native.lib import native
foundry.set_allocation_region(BASE, "1GB")
handles = json.load(open(HANDLES))
new = ipc_open(bytes.fromhex(handles["new"]))
old = attempt(lambda: ipc_open(bytes.fromhex(handles["old"])))
emit(read=cu.memcpy_dtoh(new, 4096) == PATTERN, old=old, message=native().last_error(), handles=handles)
"""


def test_memory_allocated_again_at_the_same_offsets_has_another_handle_and_the_old_one_is_refused(
    tmp_path: Path, fakecuda_dir: Path, foundry_lib: Path
) -> None:
    with _exporter(tmp_path, fakecuda_dir, foundry_lib, REALLOCATOR):
        out = _run(_script(tmp_path, REOPENER), fakecuda_dir, foundry_lib)
    handles = out["handles"]
    assert handles["same_place"], handles  # the new allocation lies where the old one did
    assert handles["old"] == handles["again"] and handles["new"] != handles["old"]  # one memory, one handle
    assert out["read"], out  # the new handle opens the new memory
    assert "error" in out["old"] and "freed since the handle was made" in out["message"], out
