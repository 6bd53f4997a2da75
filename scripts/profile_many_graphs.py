"""SAVE and LOAD of many small graphs on the fake CUDA driver: the per-graph cost an engine's piecewise
graphs pay (vLLM's default mode saves one graph per compiled piece and batch size: 1,530 for a 28-layer
model), measured without a GPU.

    python scripts/profile_many_graphs.py [--graphs 1530] [--pieces 30] [--nodes 12] [--profile save|load]
        [--model-s S [--busy]] [--no-bundle] [--main-work N]

A SAVE process captures ``--graphs`` graphs of ``--nodes`` kernel launches each, grouped like an engine's
pieces (``--pieces`` per batch size: the middle ones alike but for their pointers), saves each with
``foundry.save.save_graph`` and writes the manifest; a fresh LOAD process calls
``load_cuda_modules_and_libraries``, starts ``Loader`` on all of them and waits until every graph is
replayable and has its own exec. Each prints its phases; ``--profile`` prints the top of cProfile's table
(``$PSORT``, default cumulative) for one step.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.subproc import run_profiles  # noqa: E402

SAVE = r"""
import cProfile, pstats, time
from foundry.save import save_graph, save_graph_manifest, save_phases
foundry.set_allocation_region(BASE, "8GB")
K = module("fk_add_f32", "fk_scale_f32", "fk_copy_f32")
n = 64
weights = [buf(f"w{i}", 4 * n) for i in range(PIECES)]
acts = [buf(f"a{i}", 4 * n) for i in range(PIECES + 1)]
s = cu.stream_create()
graphs = []
for g in range(GRAPHS):
    piece, size = g % PIECES, g // PIECES
    cu.begin_capture(s)
    for j in range(NODES):
        name = ("fk_add_f32", "fk_scale_f32", "fk_copy_f32")[j % 3] if piece else "fk_copy_f32"
        if name == "fk_add_f32":
            args = [("ptr", acts[piece]), ("ptr", weights[piece]), ("ptr", acts[piece + 1]), (c_int, n)]
        elif name == "fk_scale_f32":
            args = [("ptr", acts[piece + 1]), (c_float, 1.0 + size), (c_int, n)]
        else:
            args = [("ptr", acts[piece]), ("ptr", acts[piece + 1]), (c_int, n)]
        cu.launch(K[name], (1, 1, 1), (n, 1, 1), args, stream=s)
    graphs.append(cu.end_capture(s))
prof = cProfile.Profile() if PROFILE == "save" else None
t0 = time.perf_counter()
if prof: prof.enable()
for g, graph in enumerate(graphs):
    out = [OutputSpec(acts[g % PIECES + 1], (n,), (1,), "float32", 4 * n)]
    save_graph(graph, os.path.join(ARCH, f"g{g:04d}.json"), outputs=out, archive_dir=ARCH)
t1 = time.perf_counter()
save_graph_manifest(ARCH)
t2 = time.perf_counter()
if prof:
    prof.disable()
    pstats.Stats(prof, stream=sys.stdout).sort_stats(os.environ.get("PSORT", "cumulative")).print_stats(40)
archive_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(ARCH) for f in fs)
emit(side="save", graphs=len(graphs), save_s=t1 - t0, manifest_s=t2 - t1, archive_bytes=archive_bytes,
     phases={k: round(v, 4) for k, v in sorted(save_phases().seconds.items())})
"""

LOAD = r"""
import cProfile, pstats, time
from foundry.load import Loader
prof = cProfile.Profile() if PROFILE == "modules" else None
if prof: prof.enable()
if NO_BUNDLE:  # the archive as one that stores every graph in its files: start-up reads them one by one
    from pathlib import Path
    from tests.support.archive_damage import unbundle
    unbundle(Path(ARCH))
def main_work():  # the engine's own Python on its thread (MAIN_WORK rounds), timed
    t, x = time.perf_counter(), 0
    for _ in range(MAIN_WORK):
        x += sum(i * i for i in range(2000))
    return round(time.perf_counter() - t, 3)
alone = main_work() if MAIN_WORK else None
t_modules = time.perf_counter()
foundry.load_cuda_modules_and_libraries(ARCH)
t_modules = time.perf_counter() - t_modules
beside = main_work() if MAIN_WORK else None  # while start-up reads and prepares the graphs on its threads
if prof:
    prof.disable()
    pstats.Stats(prof, stream=sys.stdout).sort_stats(os.environ.get("PSORT", "cumulative")).print_stats(40)
foundry.set_allocation_region(BASE, "8GB")
from foundry.load import source as sources
prepared_by = {}
if BUSY:  # the engine building its model in Python (compiling, say) while start-up's background work runs
    t_busy, x = time.perf_counter(), 0
    while time.perf_counter() - t_busy < MODEL_S:
        x += sum(i * i for i in range(2000))
        prepared_by[round(time.perf_counter() - t_busy, 1)] = len(sources._STATE.get().prepared)
else:
    time.sleep(MODEL_S)  # the engine waiting (for the GPU, say) while start-up's background work runs
n = 64
weights = [buf(f"w{i}", 4 * n) for i in range(PIECES)]
acts = [buf(f"a{i}", 4 * n) for i in range(PIECES + 1)]
paths = [os.path.join(ARCH, f"g{g:04d}.json") for g in range(GRAPHS)]
prof = cProfile.Profile() if PROFILE == "load" else None
if prof: prof.enable()
t0 = time.perf_counter()
loader = Loader.start(paths, 8, defer_dedicated=DEFER)
t1 = time.perf_counter()
# The engine's own Python right after LOAD started (vLLM's Dynamo and compiled-graph load run here), while the
# builders build beside it: against main_work_alone_s, what the builders' share of the GIL costs the engine.
beside_builds = main_work() if MAIN_WORK else None
for i in range(len(paths)):
    loader.wait_group(i)
t2 = time.perf_counter()
# What an engine does next with each graph on its own thread (Python work: wrap it, place its outputs),
# while the loader builds members' own execs beside it unless they wait (DEFER) until it is done.
for i in range(len(paths)):
    h = loader.wait_group(i)
    sum(x * x for x in range(INSTALL_WORK))
t_install = time.perf_counter() - t2
loader.build_dedicated()
loader.wait_all()
t3 = time.perf_counter()
if prof:
    prof.disable()
    pstats.Stats(prof, stream=sys.stdout).sort_stats(os.environ.get("PSORT", "cumulative")).print_stats(40)
emit(side="load", prepared_by_s=dict(list(prepared_by.items())[::5]), main_work_alone_s=alone,
     main_work_beside_startup_s=beside, main_work_beside_builds_s=beside_builds,
     modules_s=t_modules, start_s=t1 - t0, all_replayable_s=t2 - t0, install_s=t_install,
     all_own_execs_s=t3 - t0,
     timings={k: round(v, 4) for k, v in sorted(loader.timings.items())})
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", type=int, default=1530)
    parser.add_argument("--pieces", type=int, default=30)
    parser.add_argument("--nodes", type=int, default=12)
    parser.add_argument("--profile", choices=["save", "modules", "load"])
    parser.add_argument("--defer", action="store_true", help="members' own execs only after the install loop")
    parser.add_argument("--install-work", type=int, default=1000, help="Python work per graph after LOAD (x*x terms)")
    parser.add_argument(
        "--model-s", type=float, default=0.0, help="seconds between start-up and LOAD (an engine's model build)"
    )
    parser.add_argument("--busy", action="store_true", help="those seconds running Python, not sleeping: how many "
                        "graphs start-up prepared by when (prepared_by_s)")  # fmt: skip
    parser.add_argument("--main-work", type=int, default=0, help="rounds of Python work on the main thread, timed "
                        "alone and right after start-up began (what its threads take from the engine's)")  # fmt: skip
    parser.add_argument("--no-bundle", action="store_true", help="LOAD from an archive that stores every graph in its "
                        "files, not in the graph bundle")  # fmt: skip
    args = parser.parse_args()
    settings = f"""
        GRAPHS, PIECES, NODES, PROFILE = {args.graphs}, {args.pieces}, {args.nodes}, {args.profile!r}
        MODEL_S, DEFER, INSTALL_WORK = {args.model_s}, {args.defer}, {args.install_work}
        BUSY, NO_BUNDLE, MAIN_WORK = {args.busy}, {args.no_bundle}, {args.main_work}
        """
    run_profiles(settings, [SAVE, LOAD], env={"FOUNDRY_SNAPSHOT_LIMIT": "0"})  # as the engine plugins run SAVE
    return 0


if __name__ == "__main__":
    sys.exit(main())
