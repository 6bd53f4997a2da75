"""Background LOAD (foundry.load.groups) on the fake driver, SAVE and LOAD in separate processes:
members replay as themselves on their group's shared exec (switched in by node updates) and on
their own execs later, and a damaged archive fails the loader with the archive's own error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cpu.test_roundtrip_fake_manifest import VARIANTS
from tests.support.graphs import JsonRunner, load_prefix, run_save

NAMES = ["v0", "v1", "v2", "v3"]  # one topology group: v0 is the template, the others its members

BACKGROUND = """
from foundry.load import Loader
from foundry.load import threads as builders
warmed = builders._STATE.get().crew  # started by load_cuda_modules_and_libraries
p = Loader.start([os.path.join(ARCH, n + ".json") for n in NAMES], num_threads=4, defer_dedicated=True)
handles = [p.wait_group(i) for i in range(len(NAMES))]
taken = warmed is not None and builders._STATE.get().crew is None and not warmed.pool._closed
def replay(phase):
    runs = []
    for k in INPUT_SETS:
        set_inputs(k)
        for i in (2, 0, 3, 1, 2, 1, 0):  # interleaved: every launch switches the shared exec
            handles[i].launch(0); cu.sync(); runs.append([phase, NAMES[i], k, read(NAMES[i])])
    return runs
shared = replay("shared")
shared_execs = {h.exec for h in handles}
p.build_dedicated(); p.wait_all()
closed = warmed is not None and warmed.pool._closed and warmed._keeps == []
closed = closed and not any(t.is_alive() for t in warmed.pool._threads)
own = replay("own")
group = handles[0].group
released = all(s._payload is None for h in handles for s in (h.source, h.source.template) if s is not None)
own_execs, group_exec, first = [h.exec for h in handles], group.exec, handles
p2 = Loader.start([os.path.join(ARCH, n + ".json") for n in NAMES], num_threads=2)  # records read again
p2.wait_all()
handles = p2.handles
again = replay("again")
# One builder: the members the program launched get their own execs first, in the order it first
# launched them, before the member it did not launch (path order would be v1, v2, v3).
p3 = Loader.start([os.path.join(ARCH, n + ".json") for n in NAMES], num_threads=1, defer_dedicated=True)
later = [p3.wait_group(i) for i in range(len(NAMES))]
from foundry.load import probe
kinds = [probe.next_launch(p3, i) for i in (0, 3)]
for i in (3, 0, 2, 3):
    later[i].launch(0)
cu.sync()
kinds += [probe.next_launch(p3, i) for i in (3, 0)]
p3.build_dedicated(); p3.wait_all()
kinds += [probe.next_launch(p3, i) for i in (0, 1)]
emit(runs=shared + own + again, demand=p.demand, own_order=p3.own_order, demand3=p3.demand,
     released=released, taken=taken, closed=closed, shared_execs=sorted(shared_execs),
     own_execs=own_execs, group_exec=group_exec, switched=p.timings["switches"],
     fallbacks=p.timings["switch_fallbacks"], kinds=kinds,
     same_template=len({id(h.source.template) for h in first[1:]} | {id(first[0].source)}))
"""


def test_members_replay_as_themselves_on_the_shared_exec_and_on_their_own(app_json: JsonRunner, tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    save = run_save(app_json, VARIANTS, arch)
    # SAVE reports where its time went, phase by phase (the benchmark prints it).
    assert {"extract", "parse", "images", "write", "manifest_plan", "manifest_deltas", "sync"} <= set(
        save["save_phases"]
    )
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + BACKGROUND)
    assert len(r["runs"]) == 3 * 2 * 7
    assert r["released"], "records stayed in memory after every graph got its own exec"
    # The builder threads load_cuda_modules_and_libraries started (heaps paged in) did this LOAD's
    # work, and stopped with it.
    assert r["taken"] and r["closed"]
    for phase, name, k, out in r["runs"]:
        assert out == save["native"][name][k], (phase, name, k)
    assert r["shared_execs"] == [0], "no graph had an exec of its own before build_dedicated()"
    assert r["switched"] > 0 and r["fallbacks"] == 0
    own = r["own_execs"]
    assert 0 not in own and len(set(own)) == len(NAMES)
    # The shared exec was switched, so the template got a fresh exec rather than the updated one.
    assert r["group_exec"] == own[0]
    # The template listed in the paths and the members' template are one source, read once.
    assert r["same_template"] == 1
    # Members launched on the shared exec, in the order of their first launch there (the template is none).
    assert r["demand"] == {"2": 0, "3": 1, "1": 2}
    assert r["demand3"] == {"3": 0, "2": 1} and r["own_order"] == [3, 2, 1]
    # How each would replay next (the benchmark's first replays report it): the template on the shared
    # exec as it stands, a member after a switch; the last one launched as it stands; then their own.
    assert r["kinds"] == ["shared", "switch", "shared", "switch", "own", "own"]


FAILING = """
from foundry import errors
from foundry.load import Loader
p = Loader.start([os.path.join(ARCH, n + ".json") for n in NAMES], num_threads=2)
try:
    p.wait_all()
    emit(error=None)
except errors.LoadError as exc:
    emit(error=type(exc.__cause__).__name__, message=str(exc))
"""


def test_a_missing_image_fails_the_loader_with_the_archive_error(app_json: JsonRunner, tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    run_save(app_json, VARIANTS, arch)
    for image in (arch / "images").glob("*.bin"):
        image.unlink()
    r = app_json(load_prefix(VARIANTS, arch, load_images=False) + f"\nNAMES = {NAMES!r}\n" + FAILING)
    assert r["error"] == "ArchiveCorruptError", r
    assert "is missing" in r["message"] and "copy the archive completely" in r["message"].lower()


@pytest.mark.parametrize("damaged", ["v0", "v2"])  # the template's record, a member's delta
def test_a_damaged_record_fails_the_loader_without_hanging(app_json: JsonRunner, tmp_path: Path, damaged: str) -> None:
    """A record fails its checksum on a reader thread while builder threads wait for it: the
    loader reports the archive's error to every waiter, and no thread is left waiting (the app
    runs under the runner's 120 s timeout)."""
    arch = tmp_path / "arch"
    run_save(app_json, VARIANTS, arch)
    container = arch / f"{damaged}.cugraph"
    data = bytearray(container.read_bytes())
    data[-9] ^= 0xFF  # inside the record or delta, past the container's header
    container.write_bytes(bytes(data))
    waiting = FAILING.replace("p.wait_all()", "p.wait_group(0); p.wait_all()")
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + waiting)
    assert r["error"] == "ArchiveCorruptError", r
    assert f"{damaged}.cugraph" in r["message"] and "SHA-256" in r["message"]
