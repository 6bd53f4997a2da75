"""Peer memory the program maps again itself after LOAD (foundry.program_remaps), between real processes on the
fake driver: a custom all-reduce's registration, whose kernels read the peers' addresses from a table in device
memory (vLLM's `rank_data`) rather than from their parameters. SAVE opens a peer's buffer by IPC handle, writes its
address into the table and declares the mapping the program's; the archive then records no peer mapping, LOAD in
a fresh process neither waits for it nor maps fresh memory where it lay, and the program opens the handle after
LOAD, wherever it lands, rewrites the table and replays the peer's bytes. Undeclared, the same LOAD is refused by
name, as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.cpu.test_ipc_region import READER_HEAD, _exporter, _run, _script

TABLE_READER = (
    READER_HEAD
    + """
from foundry.archive import read_meta
from foundry.region import restored_covers
K = module("fk_copy_indirect")
table = buf("table", 64)  # the registration's table: one slot, the peer's address (vLLM's RankData holds 8)
def open_peer():
    peer = open_inside()
    cu.memcpy_htod(table, peer.to_bytes(8, "little"))  # what register_graph_buffers writes
    return peer
if SAVE:
    g = capture_one(K["fk_copy_indirect"], [("ptr", y), ("ptr", table), (c_uint64, 256)])
    peer = open_peer()  # after capture, as the registration at the capture context's exit
    (m,) = open_imports().mappings
    outside = attempt(lambda: foundry.program_remaps(BASE - 4096, 4096))  # not region memory: refused by name
    if DECLARE:
        foundry.program_remaps(m.address, m.size)
        foundry.program_remaps(m.address, 4096)  # declared twice, in part: one range
    out = [OutputSpec(y, (64,), (1,), "float32", 256)]
    r = attempt(lambda: save_graph(g, path, outputs=out, archive_dir=ARCH).name)
    save_graph_manifest(ARCH)
    cu.graph_launch(cu.instantiate(g), 0)
    cu.sync()
    meta = read_meta(path)
    hole = [m.address - BASE, m.size]
    emit(saved=r, peer=peer, native=cu.memcpy_dtoh(y, 256).hex(), recorded=len(meta.peers),
         live_covers_hole=any(o <= hole[0] and hole[0] + hole[1] <= o + n for o, n in meta.region.live), hole=hole,
         outside=outside, declared=[list(r) for r in foundry.region.remapped_ranges()])
else:
    cu.memset_d32(y, 0, 64)
    r = attempt(lambda: load_graph(path))
    if "ok" in r:
        hole = HOLE
        restored = restored_covers(BASE + hole[0], hole[1])
        peer = open_peer()  # after LOAD: wherever the carve lands now
        cu.graph_launch(r["ok"].exec, 0)
        cu.sync()
        r = {"ok": cu.memcpy_dtoh(y, 256).hex(), "peer": peer, "restored_hole": restored}
    emit(load=r)
"""
)


def test_a_peer_mapping_the_program_maps_again_after_load_is_neither_waited_for_nor_restored(
    tmp_path: Path, fakecuda_dir: Path, foundry_lib: Path
) -> None:
    def reader(save: bool, declare: bool = True, hole: Any = None) -> dict[str, Any]:
        head = f"SAVE = {save!r}\nDECLARE = {declare!r}\nHOLE = {hole!r}\n"
        return _run(_script(tmp_path, head + TABLE_READER), fakecuda_dir, foundry_lib)

    with _exporter(tmp_path, fakecuda_dir, foundry_lib):
        saved = reader(save=True)
        loaded = reader(save=False, hole=saved["hole"])
    pattern = bytes((7 * i + 3) % 256 for i in range(4096))
    assert saved["saved"] == {"ok": "reader"}, saved
    assert bytes.fromhex(saved["native"]) == pattern[256:512]  # the peer's bytes through the table
    # declared: no peer mapping recorded, and SAVE's live memory leaves the mapping's range out
    assert saved["recorded"] == 0 and not saved["live_covers_hole"], saved
    assert saved["declared"] == [saved["hole"]]  # the second, inside the first, merged into it
    assert saved["outside"].get("error") == "RegionStateError", saved["outside"]
    ok = loaded["load"].get("ok")
    assert ok == saved["native"], loaded  # the table rewritten after LOAD: the peer's bytes again
    assert loaded["load"]["restored_hole"] is False  # LOAD mapped nothing where SAVE had the peer's pages
    assert loaded["load"]["peer"] != saved["peer"]  # opened after LOAD's memory, elsewhere: only the table knows


def test_an_undeclared_peer_mapping_read_through_a_table_is_still_refused_at_load(
    tmp_path: Path, fakecuda_dir: Path, foundry_lib: Path
) -> None:
    def reader(save: bool) -> dict[str, Any]:
        head = f"SAVE = {save!r}\nDECLARE = False\nHOLE = None\n"
        return _run(_script(tmp_path, head + TABLE_READER), fakecuda_dir, foundry_lib)

    with _exporter(tmp_path, fakecuda_dir, foundry_lib):
        saved = reader(save=True)
        loaded = reader(save=False)
    assert saved["recorded"] == 1 and saved["live_covers_hole"], saved  # recorded as a peer LOAD must find
    assert loaded["load"].get("error") == "PeerMappingError", loaded  # not opened before LOAD: refused by name
