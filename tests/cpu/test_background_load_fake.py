"""Background LOAD (foundry.load.groups) on the fake driver, SAVE and LOAD in separate processes:
members replay as themselves on their group's shared exec (switched in by node updates) and on
their own execs later, built from graphs made while the program holds their builds back, and a
damaged archive fails the loader with the archive's own error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cpu.test_roundtrip_fake_manifest import VARIANTS
from tests.support.archive_damage import flip_byte, flip_stored, unbundle
from tests.support.graphs import JsonRunner, load_prefix, run_save

NAMES = ["v0", "v1", "v2", "v3"]  # one topology group: v0 is the template, the others its members

BACKGROUND = """
from foundry.load import Loader
from foundry.load import threads as builders
warmed = builders._STATE.get().crew  # started by load_cuda_modules_and_libraries
p = Loader.start([os.path.join(ARCH, n + ".json") for n in NAMES], num_threads=4, defer_dedicated=True)
handles = [p.wait_group(i) for i in range(len(NAMES))]
graphs_built = p.wait_graphs(60)
member_graphs = [bool(h.graph) for h in handles]
taken = warmed is not None and builders._STATE.get().crew is None and not warmed.pool._closed
def counts(exec_):  # [uploads, launches] the fake driver saw for an exec
    u, n = ctypes.c_uint(), ctypes.c_uint()
    assert cu.lib.fakecuda_exec_counts(ctypes.c_void_p(exec_), ctypes.byref(u), ctypes.byref(n)) == 0
    return [u.value, n.value]
shared_counts = counts(handles[0].group.exec)
def replay(phase):
    runs = []
    for k in INPUT_SETS:
        set_inputs(k)
        for i in (2, 0, 3, 1, 2, 1, 0):  # interleaved: every launch switches the shared exec
            handles[i].launch(0); cu.sync(); runs.append([phase, NAMES[i], k, read(NAMES[i])])
    return runs
shared = replay("shared")
kept_graphs = [h.graph for h in handles]
shared_execs = {h.exec for h in handles}
from foundry import errors
try:  # the own execs are held back: nothing would end this wait
    p.wait_all(); held_wait = None
except errors.LoadError as exc:
    held_wait = str(exc)
p.build_dedicated(); p.wait_all()
own_counts = [counts(h.exec) for h in handles]
# The own execs were instantiated from the graphs built before build_dedicated().
kept_graphs = kept_graphs[1:] == [h.graph for h in handles[1:]]
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
# Builds let go at once: the members' graphs are made by their execs' builds, none ahead of them.
p4 = Loader.start([os.path.join(ARCH, n + ".json") for n in NAMES], num_threads=2, defer_dedicated=True)
p4.build_dedicated(); p4.wait_all()
handles = p4.handles
released_early = replay("released")
graph_phases = ["member_graphs_s" in x.timings for x in (p, p2)]
# One builder: the members the program launched get their own execs first, in the order it first
# launched them, before the member it did not launch (path order would be v1, v2, v3).
p3 = Loader.start([os.path.join(ARCH, n + ".json") for n in NAMES], num_threads=1, defer_dedicated=True)
later = [p3.wait_group(i) for i in range(len(NAMES))]
p3.wait_graphs()
from foundry.load import probe
kinds = [probe.next_launch(p3, i) for i in (0, 3)]
for i in (3, 0, 2, 3):
    later[i].launch(0)
cu.sync()
kinds += [probe.next_launch(p3, i) for i in (3, 0)]
p3.build_dedicated(); p3.wait_all()
kinds += [probe.next_launch(p3, i) for i in (0, 1)]
emit(runs=shared + own + again + released_early, graph_phases=graph_phases, graphs_built=graphs_built,
     member_graphs=member_graphs, kept_graphs=kept_graphs,
     demand=p.demand, own_order=p3.own_order, demand3=p3.demand,
     released=released, taken=taken, closed=closed, shared_execs=sorted(shared_execs),
     own_execs=own_execs, group_exec=group_exec, switched=p.timings["switches"],
     fallbacks=p.timings["switch_fallbacks"], kinds=kinds, shared_counts=shared_counts, own_counts=own_counts,
     held_wait=held_wait, same_template=len({id(h.source.template) for h in first[1:]} | {id(first[0].source)}))
"""


def test_members_replay_as_themselves_on_the_shared_exec_and_on_their_own(app_json: JsonRunner, tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    save = run_save(app_json, VARIANTS, arch)
    # SAVE reports where its time went, phase by phase (the benchmark prints it).
    assert {"extract", "scan", "images", "write", "manifest_plan", "manifest_deltas", "sync"} <= set(
        save["save_phases"]
    )
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + BACKGROUND)
    assert len(r["runs"]) == 4 * 2 * 7
    # Graphs ahead of the execs only while the builds are held back: not in a LOAD that never held them.
    assert r["graph_phases"] == [True, False]
    # Every member's own graph was built while the execs' builds were held back, and instantiated later.
    assert r["graphs_built"] and r["member_graphs"] == [False, True, True, True] and r["kept_graphs"]
    assert r["released"], "records stayed in memory after every graph got its own exec"
    # The builder threads load_cuda_modules_and_libraries started (heaps paged in) did this LOAD's
    # work, and stopped with it.
    assert r["taken"] and r["closed"]
    for phase, name, k, out in r["runs"]:
        assert out == save["native"][name][k], (phase, name, k)
    assert r["shared_execs"] == [0], "no graph had an exec of its own before build_dedicated()"
    # Waiting for own execs that are held back is refused by name, not a wait that never ends.
    assert r["held_wait"] is not None and "build_dedicated()" in r["held_wait"], r["held_wait"]
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
    # Every exec LOAD makes is uploaded (and the upload waited for) before the program can launch it, so that
    # its first launch does no upload work: the shared exec before any replay, each own exec before its first.
    assert r["shared_counts"] == [1, 0]
    assert r["own_counts"] == [[1, 0]] * len(NAMES)


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


@pytest.mark.parametrize("stored", ["bundle", "files"])
@pytest.mark.parametrize("damaged", ["v0", "v2"])  # the template's record, a member's delta
def test_a_damaged_record_fails_the_loader_without_hanging(
    app_json: JsonRunner, tmp_path: Path, damaged: str, stored: str
) -> None:
    """A record fails its checksum on a reader thread while builder threads wait for it: the
    loader reports the archive's error to every waiter, and no thread is left waiting (the app
    runs under the runner's 120 s timeout). In the graph bundle as in a file: start-up takes a bundled
    graph's container as it is, and LOAD's readers hash its record against its JSON before it is used."""
    arch = tmp_path / "arch"
    run_save(app_json, VARIANTS, arch)
    if stored == "files":
        unbundle(arch)
        flip_byte(arch / f"{damaged}.cugraph", -9)  # inside the record or delta, past the container's header
    else:
        flip_stored(arch / f"{damaged}.json", -9, "container")
    waiting = FAILING.replace("p.wait_all()", "p.wait_group(0); p.wait_all()")
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + waiting)
    assert r["error"] == "ArchiveCorruptError", r
    named = f"{damaged}.cugraph" if stored == "files" else f"graph {damaged!r}"
    assert named in r["message"] and "SHA-256" in r["message"], r


# Loads NAMES (``paths``) in the background and replays each on every input set: ``runs`` by name.
LOAD_AND_REPLAY = """
p = Loader.start(paths, num_threads=2)
handles = [p.wait_group(i) for i in range(len(NAMES))]
p.wait_all()
runs = {}
for i, name in enumerate(NAMES):
    runs[name] = []
    for k in INPUT_SETS:
        set_inputs(k); handles[i].launch(0); cu.sync(); runs[name].append(read(name))
"""

PREPARED = (
    """
from foundry import errors
from foundry.load import Loader, wait_for_startup
from foundry.load import source as sources
wait_for_startup()
prepared = sorted(os.path.basename(k[0]) for k in sources._STATE.get().prepared)
held = sources._STATE.get().prepared_bytes
# Files written at the graphs' names after start-up read and checked them: LOAD uses the bytes proven then,
# and reads nothing again.
for changed in NAMES[1:]:
    with open(os.path.join(ARCH, changed + ".json"), "ab") as f:
        f.write(b" ")
paths = [os.path.join(ARCH, n + ".json") for n in NAMES]
"""
    + LOAD_AND_REPLAY
    + """left = (len(sources._STATE.get().prepared), sources._STATE.get().prepared_bytes)
# Taken once: a second LOAD reads the archive as it is now, and refuses the graphs with files beside the bundle.
try:
    Loader.start([os.path.join(ARCH, n + ".json") for n in NAMES], num_threads=2).wait_all()
    again = None
except errors.ArchiveError as exc:
    again = type(exc).__name__
emit(prepared=prepared, held=held, runs=runs, left=left, again=again)
"""
)


def test_graphs_read_at_startup_are_taken_by_load_once(app_json: JsonRunner, tmp_path: Path) -> None:
    """load_cuda_modules_and_libraries reads and checks the manifest's graphs (records included) in the
    background; start_graph_builds takes them as they were proven then, once."""
    arch = tmp_path / "arch"
    save = run_save(app_json, VARIANTS, arch)
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + PREPARED)
    assert set(NAMES) <= {p.removesuffix(".json") for p in r["prepared"]}
    assert r["held"] > 0, "no record was read ahead"
    for name in NAMES:
        assert r["runs"][name] == save["native"][name], name
    assert r["left"][1] == 0 and r["left"][0] == len(r["prepared"]) - len(NAMES)
    assert r["again"] == "ArchiveCorruptError"


def test_graphs_read_at_startup_without_a_key_are_read_again_under_one(app_json: JsonRunner, tmp_path: Path) -> None:
    """A signing key configured after start-up: what start-up proved without it does not count, so an
    unsigned archive is refused."""
    arch = tmp_path / "arch"
    run_save(app_json, VARIANTS, arch)
    (tmp_path / "key").write_bytes(b"k" * 32)
    key = str(tmp_path / "key")
    script = f"""
from foundry import errors
from foundry.load import Loader, wait_for_startup
from foundry.trust import set_signing_key
wait_for_startup()
set_signing_key({key!r})
try:
    Loader.start([os.path.join(ARCH, n + ".json") for n in NAMES], num_threads=2).wait_all()
    emit(error=None)
except errors.ArchiveError as exc:
    emit(error=type(exc).__name__)
"""
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + script)
    assert r["error"] == "ArchiveSignatureError", r


BOUNDED = (
    """
from foundry.load import Loader, wait_for_startup
from foundry.load import readahead
from foundry.load import source as sources
wait_for_startup()
state = sources._STATE.get()
state.prepared.clear(); state.prepared_bytes = 0
readahead.PREPARED_BYTES_MAX = 0  # no room: metadata is checked ahead, records are left for LOAD's readers
paths = [os.path.join(ARCH, n + ".json") for n in NAMES]
count = readahead.prepare_sources(paths)
unread = [src._payload is None for src, _ in state.prepared.values()]
held = state.prepared_bytes
"""
    + LOAD_AND_REPLAY
    + """emit(n=count, unread=unread, held=held, runs=runs, left=state.prepared_bytes)
"""
)


def test_records_read_ahead_are_bounded(app_json: JsonRunner, tmp_path: Path) -> None:
    """Past PREPARED_BYTES_MAX start-up checks graphs' metadata only; LOAD reads their records itself."""
    arch = tmp_path / "arch"
    save = run_save(app_json, VARIANTS, arch)
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + BOUNDED)
    assert r["n"] == len(NAMES) and r["held"] == 0 and r["left"] == 0
    # Members' records were not read ahead (a template may hold its record from an earlier LOAD of this process).
    assert sum(r["unread"]) >= len(NAMES) - 1
    for name in NAMES:
        assert r["runs"][name] == save["native"][name], name


PARALLEL = """
import glob
from foundry.load import Loader, wait_for_startup
from foundry.load import readahead
from foundry.load import source as sources
wait_for_startup()
state = sources._STATE.get()
state.prepared.clear(); state.prepared_bytes = 0; state.full.clear()
# One member's record damaged after start-up: its reader drops it, the others stay prepared.
from pathlib import Path
from tests.support.archive_damage import flip_stored
flip_stored(Path(ARCH) / "v2.json", -9, "container")
paths = [os.path.join(ARCH, n + ".json") for n in NAMES]
readahead.PARALLEL_READ_MIN = 0  # every record on a reader thread (the fake's records are small)
count = readahead.prepare_sources(paths, readers=3)
prepared = sorted(os.path.basename(k[0]) for k in state.prepared)
read = sorted(os.path.basename(src.json_path) for src, _ in state.prepared.values() if src._payload is not None)
held = state.prepared_bytes
sizes = sum(size for _, size in state.prepared.values())
try:
    Loader.start(paths, num_threads=2).wait_all()
    error = None
except errors.LoadError as exc:  # the loader's error, caused by the archive's own
    error = type(exc.__cause__).__name__
emit(n=count, prepared=prepared, read=read, held=held, sizes=sizes, error=error)
"""


def test_records_read_ahead_in_parallel_drop_a_damaged_one(app_json: JsonRunner, tmp_path: Path) -> None:
    """prepare_sources with reader threads: records are read and checked beside the metadata checks, a
    record that fails its check leaves its graph unprepared (LOAD reads it again and refuses it by name),
    and the bytes held are exactly those of the graphs kept."""
    arch = tmp_path / "arch"
    run_save(app_json, VARIANTS, arch)
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\nfrom foundry import errors\n" + PARALLEL)
    assert r["n"] == len(NAMES) - 1
    assert r["prepared"] == ["v0.json", "v1.json", "v3.json"]
    assert r["read"] == ["v0.json", "v1.json", "v3.json"]
    assert r["held"] == r["sizes"] > 0
    assert r["error"] == "ArchiveCorruptError"


STOPPED = (
    """
import threading
from foundry.load import Loader, wait_for_startup
from foundry.load import readahead, startup
from foundry.load import source as sources
wait_for_startup()
state = sources._STATE.get()
state.prepared.clear(); state.prepared_bytes = 0; state.full.clear()
paths = [os.path.join(ARCH, n + ".json") for n in NAMES]
stop = threading.Event()
def stopping(paths):
    for i, p in enumerate(paths):
        if i == 2:
            stop.set()  # as start_graph_builds does while the reading is under way
        yield p
count = readahead.prepare_sources(stopping(paths), stop=stop)
prepared = sorted(os.path.basename(k[0]) for k in state.prepared)
"""
    + LOAD_AND_REPLAY
    + """cut = [e.is_set() for e in startup._STATE.get().graphs_cut.values()]
emit(n=count, prepared=prepared, runs=runs, left=len(state.prepared), cut=cut,
     counts=[p.timings["graphs_read_ahead"], p.timings["graphs_read_here"]])
"""
)


def test_graphs_start_up_has_not_read_are_read_by_load(app_json: JsonRunner, tmp_path: Path) -> None:
    """start_graph_builds stops start-up's reading of graphs after the graph in hand (beside a busy engine
    thread its last graphs would take longer than on LOAD's thread), and reads the rest itself: the graphs
    read ahead are taken, the others read then, and every graph replays as natively."""
    arch = tmp_path / "arch"
    save = run_save(app_json, VARIANTS, arch)
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + STOPPED)
    assert r["n"] == 2 and r["prepared"] == ["v0.json", "v1.json"]
    assert r["left"] == 0, "LOAD left graphs read ahead untaken"
    assert r["counts"] == [2, 2], "the loader's timings do not say which graphs it read itself"
    assert r["cut"] and all(r["cut"]), "start_graph_builds did not stop start-up's reading"
    for name in NAMES:
        assert r["runs"][name] == save["native"][name], name
