"""One rank of a multi-process job: a graph whose kernel reads a peer's memory, imported from a shareable
handle and mapped inside a reservation carved from the region (as NCCL with cuMem maps its peers' buffers),
is saved with the mapping and the rank recorded, and loads bit-identically in a fresh process that sets
the region and repeats the import. A mapping the driver placed (outside the region) is refused at SAVE by
name (IPC mappings: tests/cpu/test_save_peer_memory.py); LOAD refuses, before anything replays, a missing
peer mapping and another rank, world size or device. The peer is modelled inside the process (tests/fakecuda/vmm.c): it
creates its buffer on device 1 and exports it; this rank imports it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from foundry.archive import read_meta
from foundry.errors import ArchiveVersionError
from foundry.schema import GRAPH_FORMAT
from foundry.schema.jsondocs import check_format, load_sealed
from tests.support.graphs import JsonRunner, prelude

TWO_DEVICES = {"FAKECUDA_DEVICE_COUNT": "2"}

SETUP = """
from foundry.save import save_graph, save_graph_manifest
from foundry.load import load_graph
n = 64
FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
PATTERN = bytes((7 * i + 3) % 256 for i in range(4 * n))

def import_peer():
    '''The peer creates its buffer on device 1 and exports it; this rank imports it, reserves a range and maps
    it there (ncclP2pImportShareableBuffer), then the peer's bytes arrive.'''
    gran = cu.granularity()
    h = ctypes.c_ulonglong()
    prop = Cuda._prop(1)
    call("cuMemCreate", byref(h), gran, byref(prop), 0)
    fd = c_int()
    call("cuMemExportToShareableHandle", byref(fd), c_uint64(h.value), FD, c_uint64(0))
    peer = c_uint64()
    call("cuMemImportFromShareableHandle", byref(peer), c_void_p(fd.value), FD)
    va = cu.reserve(gran)
    cu.mem_map(va, gran, peer.value)
    cu.set_access(va, gran)
    cu.memcpy_htod(va, PATTERN)
    return va

def start(rank, import_first=False):
    '''Region, then (as the program would) the rank's buffers and its communicator's peer mapping.'''
    if rank is not None:
        foundry.set_rank(*rank)
    early = import_peer() if import_first else None
    foundry.set_allocation_region(BASE, "1GB")
    K = module("fk_copy_bytes")
    x = buf("x", 4 * n)
    return K, x, early

def capture(K, x, src):
    s = cu.stream_create()
    cu.begin_capture(s)
    cu.launch(K["fk_copy_bytes"], (1, 1, 1), (1, 1, 1), [("ptr", x), ("ptr", src), (c_uint64, 4 * n)], stream=s)
    return cu.end_capture(s)

def save(name, g, x):
    out = [OutputSpec(x, (n,), (1,), "float32", 4 * n)]
    return attempt(lambda: save_graph(g, os.path.join(ARCH, name + ".json"), outputs=out, archive_dir=ARCH).name)

def replay(ex, x):
    cu.graph_launch(ex, 0)
    cu.sync()
    return cu.memcpy_dtoh(x, 4 * n).hex()
"""

SAVE = """
K, x, early = start((0, 2), import_first=True)
out = {}
# A reservation made before the region was set: the driver chose the address.
out["outside"] = save("outside", capture(K, x, early), x)
call("cuMemUnmap", c_uint64(early), c_size_t(cu.granularity()))
# NCCL with cuMem, the region set first: the peer's buffer lands in a reservation carved from the region.
va = import_peer()
g = capture(K, x, va)
out["peer"] = save("peer", g, x)
save_graph_manifest(ARCH)
out["native"] = replay(cu.instantiate(g), x)
out["va"] = va
out["files"] = sorted(os.listdir(ARCH))
emit(**out)
"""

NO_RANK = """
foundry.set_allocation_region(BASE, "1GB")
K = module("fk_copy_bytes")
x = buf("x", 4 * n)
va = import_peer()
emit(peer=save("peer", capture(K, x, va), x))
"""

LOAD = """
foundry.load_cuda_modules_and_libraries(ARCH)
K, x, _ = start(RANK)
if REIMPORT:
    import_peer()
def load():
    return load_graph(os.path.join(ARCH, "peer.json"))
r = attempt(load)
if "ok" in r:
    r = {"ok": replay(r["ok"].exec, x)}
emit(load=r)
"""


def _save(app_json: JsonRunner, arch: Path) -> dict[str, Any]:
    out: dict[str, Any] = app_json(prelude(arch) + SETUP + SAVE, env=TWO_DEVICES)
    return out


def _load(
    app_json: JsonRunner,
    arch: Path,
    rank: tuple[int, int] | None,
    reimport: bool,
    device: int = 0,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    head = f"RANK = {rank!r}\nREIMPORT = {reimport!r}\ncu = Cuda({device})\n"
    out: dict[str, Any] = app_json(prelude(arch) + head + SETUP + LOAD, env={**TWO_DEVICES, **(env or {})})
    return dict(out["load"])


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory, app_json_module: JsonRunner) -> tuple[Path, dict[str, Any]]:
    arch = tmp_path_factory.mktemp("peer") / "arch"
    return arch, _save(app_json_module, arch)


def test_save_refuses_peer_memory_mapped_outside_the_region(saved: tuple[Path, dict[str, Any]]) -> None:
    """The IPC case: tests/cpu/test_save_peer_memory.py."""
    _, out = saved
    outside = out["outside"]
    assert outside.get("error") == "PeerMemoryError", outside
    assert "outside the allocation region" in outside["message"] and "NCCL_CUMEM_ENABLE=1" in outside["message"]
    assert "before init_process_group" in outside["message"]
    assert not [f for f in out["files"] if f.startswith("outside")], out["files"]


def test_save_records_a_peer_mapping_carved_from_the_region(saved: tuple[Path, dict[str, Any]]) -> None:
    arch, out = saved
    assert out["peer"] == {"ok": "peer"}
    doc = load_sealed((arch / "graph_manifest.json").read_bytes(), "manifest")
    graph = next(g for g in doc["graphs"] if g["name"] == "peer")
    assert graph["stored"] == "bundle"
    meta = read_meta(arch / "peer.json")
    base = meta.region.base
    assert [(p.offset, p.size, p.handle_type, p.device) for p in meta.peers] == [(out["va"] - base, 2 << 20, 1, 1)]
    assert meta.rank is not None and (meta.rank.rank, meta.rank.world_size) == (0, 2)
    assert meta.rank.pci_bus_id == "0000:18:00.0" and meta.rank.device_name and len(meta.rank.uuid) == 32


def test_a_reader_of_version_3_refuses_a_graph_with_peers(saved: tuple[Path, dict[str, Any]]) -> None:
    arch, _ = saved
    doc = read_meta(arch / "peer.json").to_json()
    assert doc["format_version"] == 4 and doc["peers"] and doc["rank"]["rank"] == 0
    with pytest.raises(ArchiveVersionError):
        check_format(doc, GRAPH_FORMAT, (2, 3), "peer.json")


def test_save_refuses_peer_memory_without_a_rank(app_json: JsonRunner, tmp_path: Path) -> None:
    out = app_json(prelude(tmp_path / "arch") + SETUP + NO_RANK, env=TWO_DEVICES)
    assert out["peer"].get("error") == "PeerMemoryError", out
    assert "foundry.set_rank(rank, world_size)" in out["peer"]["message"]


def test_load_replays_bit_identically_where_the_peer_is_mapped_again(
    saved: tuple[Path, dict[str, Any]], app_json_module: JsonRunner
) -> None:
    arch, out = saved
    loaded = _load(app_json_module, arch, (0, 2), reimport=True)
    assert loaded == {"ok": out["native"]}
    assert bytes.fromhex(out["native"]) == bytes((7 * i + 3) % 256 for i in range(256))


def test_load_refuses_when_the_peer_is_not_mapped_again(
    saved: tuple[Path, dict[str, Any]], app_json_module: JsonRunner
) -> None:
    arch, _ = saved
    loaded = _load(app_json_module, arch, (0, 2), reimport=False)
    assert loaded.get("error") == "PeerMappingError", loaded
    assert "nothing of another process is mapped there" in loaded["message"]
    assert "create the process group" in loaded["message"]


@pytest.mark.parametrize(
    ("rank", "device", "says"),
    [
        ((1, 2), 0, "this process is rank 1 of 2"),
        ((0, 4), 0, "this process is rank 0 of 4"),
        (None, 0, "declared no rank"),
        ((0, 2), 1, "at PCI bus 0000:19:00.0. Give each rank the GPU it saved on"),
    ],
)
def test_load_refuses_another_rank_world_size_or_device(
    saved: tuple[Path, dict[str, Any]],
    app_json_module: JsonRunner,
    rank: tuple[int, int] | None,
    device: int,
    says: str,
) -> None:
    arch, _ = saved
    loaded = _load(app_json_module, arch, rank, reimport=True, device=device)
    assert loaded.get("error") == "RankMismatchError", loaded
    assert says in loaded["message"] and "LoadError" in loaded["bases"]


def test_a_replica_on_another_gpu_of_the_model_loads_when_asked(
    saved: tuple[Path, dict[str, Any]], app_json_module: JsonRunner
) -> None:
    """FOUNDRY_RANK_GPUS=alike: a replica of the group on other GPUs of the same model (a data-parallel copy of a
    tensor-parallel deployment) loads the group's archive and replays as saved."""
    arch, out = saved
    loaded = _load(app_json_module, arch, (0, 2), reimport=True, device=1, env={"FOUNDRY_RANK_GPUS": "alike"})
    assert loaded == {"ok": out["native"]}


@pytest.mark.parametrize(
    ("env", "error", "says"),
    [
        ({"FOUNDRY_RANK_GPUS": "alike", "FAKECUDA_DEVICE_NAME": "Other GPU"}, "IdentityMismatchError", "Other GPU"),
        ({"FOUNDRY_RANK_GPUS": "any"}, "RankMismatchError", "FOUNDRY_RANK_GPUS='any' is not one of same, alike"),
    ],
)
def test_a_replica_is_refused_on_another_gpu_model_or_an_unknown_choice(
    saved: tuple[Path, dict[str, Any]], app_json_module: JsonRunner, env: dict[str, str], error: str, says: str
) -> None:
    arch, _ = saved
    loaded = _load(app_json_module, arch, (0, 2), reimport=True, device=1, env=env)
    assert loaded.get("error") == error, loaded
    assert says in loaded["message"]
