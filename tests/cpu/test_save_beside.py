"""SAVE's work beside its main thread (foundry/save/beside.py): the same digests as hashing in line, the
sync on a worker once every file but the manifest is written, and the manifest written only after it."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import pytest

from foundry import _state
from foundry.archive import BUNDLE_NAME, MANIFEST_NAME, read_manifest
from foundry.save import beside
from foundry.verify import verify_archive
from tests.cpu.test_roundtrip_fake_manifest import VARIANTS
from tests.support.graphs import prelude, save_script
from tests.support.subproc import run_python


def test_small_buffers_are_hashed_in_line_large_ones_on_a_worker() -> None:
    small = b"x" * (beside.IN_LINE_BYTES - 1)
    done = beside.sha256_beside(small)
    assert done.done() and done.result() == hashlib.sha256(small).digest()
    large = bytearray(os.urandom(64)) * (beside.IN_LINE_BYTES // 32)
    assert beside.sha256_beside(memoryview(large)).result(timeout=30) == hashlib.sha256(large).digest()
    assert beside.beside(lambda: threading.current_thread().name).result(timeout=30).startswith("foundry-save")


def test_a_workers_error_reaches_the_waiter() -> None:
    def boom() -> None:
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        beside.beside(boom).result(timeout=30)
    assert beside.beside(lambda: 7).result(timeout=30) == 7  # the pool goes on


def test_a_forked_child_gets_workers_of_its_own() -> None:
    """The parent's worker threads are not the child's: a child that used them would wait for ever."""
    assert beside.beside(lambda: 1).result(timeout=30) == 1  # the parent's pool is started
    data = os.urandom(beside.IN_LINE_BYTES * 2)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        try:
            ok = beside.sha256_beside(data).result(timeout=30) == hashlib.sha256(data).digest()
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert "save.beside" in _state.states()


# os.sync as SAVE's worker calls it, recorded: which thread, what was on disk then, and where its end falls
# among the files renamed into place (write_atomic's os.replace), in the order things happened: an order, not
# times (a file's mtime comes from a coarser clock than time.time_ns, and may read earlier than a time taken
# before it was written).
_SYNC_SPY = """
import os as _os, threading as _threading, time as _time, json as _json
_real_sync, _real_replace = _os.sync, _os.replace
_events = []
def _spy_sync():
    seen = {"thread": _threading.current_thread().name,
            "bundle": _os.path.exists(_os.path.join(ARCH, %(bundle)r)),
            "manifest": _os.path.exists(_os.path.join(ARCH, %(manifest)r))}
    _time.sleep(0.3)  # a slow disk: the manifest must wait for it
    _real_sync()
    _events.append("sync ended")
    with open(_os.environ["SYNC_SPY"], "a") as f:
        f.write(_json.dumps(seen) + "\\n")
def _spy_replace(src, dst, *args, **kwargs):
    _real_replace(src, dst, *args, **kwargs)
    _events.append("replaced " + _os.path.basename(dst))
    with open(_os.environ["SYNC_SPY"] + ".order", "w") as f:
        f.write(_json.dumps(_events))
_os.sync, _os.replace = _spy_sync, _spy_replace
"""


def test_the_archive_syncs_on_a_worker_after_the_bundle_and_before_the_manifest(
    tmp_path: Path, fakecuda_dir: Path, foundry_lib: Path
) -> None:
    arch = tmp_path / "arch"
    code = save_script(VARIANTS, arch)
    marker = "SAVE = True"
    assert marker in code
    spy = _SYNC_SPY % {"bundle": BUNDLE_NAME, "manifest": MANIFEST_NAME}
    code = code.replace(marker, marker + "\n" + spy, 1)
    log = tmp_path / "syncs.jsonl"
    run_python(code, lib_dir=fakecuda_dir, env={"SYNC_SPY": str(log)}, preload=foundry_lib)
    syncs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(syncs) == 1, syncs  # one sync for the whole archive
    (sync,) = syncs
    assert sync["thread"].startswith("foundry-save")
    assert sync["bundle"] and not sync["manifest"]
    order = json.loads((tmp_path / "syncs.jsonl.order").read_text())
    assert order.index("sync ended") < order.index(f"replaced {MANIFEST_NAME}") == len(order) - 1, order
    manifest = read_manifest(arch)
    assert manifest.bundle is not None
    assert manifest.bundle.bytes == (arch / BUNDLE_NAME).stat().st_size
    assert verify_archive(arch).ok


# A graph walked on a worker, as capture_end starts it: the same record, digest and scan as a walk in line;
# the owner held until the walk ends and let go before the Future is done; wait_beside waits for the walk.
# Every worker waits on ``gate`` until the script has let its own reference to the owner go and is listening
# for the Future: the walk cannot start (nor end) before, so what the script sees does not depend on how the
# threads happen to run. Without the gate, a walk that ended first left the owner alive only because the
# script still held it.
EXTRACT_BESIDE = """
import gc, hashlib, threading, weakref
from foundry.save import beside, extract, extract_beside, wait_beside
n = 64
K = module("fk_scale_f32")
x = buf("x", 4 * n)
s = cu.stream_create()
cu.begin_capture(s)
for _ in range(50):
    cu.launch(K["fk_scale_f32"], (1, 1, 1), (n, 1, 1), [("ptr", x), (c_float, 2.0), (c_int, n)], stream=s)
g = cu.end_capture(s)

class Owner:
    pass

owner = Owner()
gone = threading.Event()
weakref.finalize(owner, gone.set)
done_before_gone = []
gate = threading.Event()
busy = [beside.beside(gate.wait) for _ in range(beside.WORKERS)]  # the walk waits in the queue behind these
future = extract_beside(g, owner)
future.add_done_callback(lambda f: done_before_gone.append(gone.is_set()))
del owner
gate.set()
wait_beside()
assert all(b.result(timeout=30) for b in busy)
beside_result = future.result(timeout=30)
here = extract(g)
emit(
    same_record=beside_result.record == here.record,
    same_functions=beside_result.functions == here.functions,
    same_topology=beside_result.topology == here.topology,
    digest_ok=beside_result.record_sha256.result(timeout=30) == hashlib.sha256(here.record).digest(),
    owner_gone_when_done=done_before_gone,
    nodes=beside_result.scan.counts,
)
"""


def test_a_graph_walked_on_a_worker_is_the_graph_walked_in_line(
    tmp_path: Path, fakecuda_dir: Path, foundry_lib: Path
) -> None:
    code = prelude(tmp_path) + "foundry.set_allocation_region(BASE, '1GB')\n" + EXTRACT_BESIDE
    out = json.loads(run_python(code, lib_dir=fakecuda_dir, preload=foundry_lib).strip().splitlines()[-1])
    assert out["same_record"] and out["same_functions"] and out["same_topology"] and out["digest_ok"]
    assert out["owner_gone_when_done"] == [True]
    assert (out["nodes"]["nodes"], out["nodes"]["kernel"]) == (50, 50)
