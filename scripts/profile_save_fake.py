"""SAVE of a decoder's graphs on the fake CUDA driver: where SAVE's time goes, measured without a GPU.

    python scripts/profile_save_fake.py [--graphs 67] [--nodes 980] [--images 12] [--archs 8]
                                        [--profile] [--sort cumulative]

A SAVE process loads ``--images`` kernel images shaped like the PyTorch wheels' (a fatbin per image: the
ELF the driver loads, then ``--archs`` - 1 Zstandard-compressed entries for other architectures, a few
hundred kernels and a few module variables each), captures ``--graphs`` graphs of ``--nodes`` kernel
launches over kernels of every image (grouped like a decoder's batch sizes: a few topologies, members
differing in their pointers and sizes), and saves each as ``CUDAGraph.save`` does without torch: the RNG
probe's native part (its launch dropped in the interposer, the pointed-to argument words read), then
``save_graph``; then ``save_graph_manifest``. It prints seconds per SAVE phase
(``save_phases``), the probe's, and the totals; ``--profile`` prints cProfile's table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.subproc import run_profiles  # noqa: E402

SAVE = r"""
import cProfile, pstats, resource, time
import zstandard
from foundry.records import parse_record
from foundry.records._layout import FATBIN_COMPRESSED_ZSTD, FatbinEntry
from foundry.region import live_ranges_now
from foundry.save import save_graph, save_graph_manifest, save_phases
from foundry.save.rngprobe import launches_dropped, pointed_words
from tests.fakecuda.images import Variable, make_cubin

foundry.set_allocation_region(BASE, "8GB")
KERNELS = ("fk_add_f32", "fk_scale_f32", "fk_copy_f32")

def image(i):
    names = [f"{k}" for k in KERNELS] + [f"other_{i}_{j}" for j in range(FILLER)]
    variables = [Variable(f"var_{i}_{j}", 256, "init", init=bytes([j + 1]) * 8) for j in range(4)]
    # cuRAND's precalc_xorwow_matrix and precalc_xorwow_offset_matrix: 100 KB each, in .nv.global.init
    variables += [Variable(f"big_{i}_{j}", BIG_BYTES, "init", init=bytes(range(256)) * 4) for j in range(BIG)]
    elf = make_cubin(names, payload=bytes(2048), variables=variables)
    fb = make_fatbin([("elf", elf)])
    body = bytearray(fb[16:])
    packed = zstandard.ZstdCompressor(level=3).compress(elf)
    for a in range(ARCHS - 1):
        head = FatbinEntry.unpack_from(bytes(64))._replace(
            kind=2, header_size=64, payload_size=(len(packed) + 7) // 8 * 8, compressed_size=len(packed),
            sm_arch=50 + 10 * a, flags=FATBIN_COMPRESSED_ZSTD, uncompressed_size=len(elf))
        body += head.pack() + packed + bytes((len(packed) + 7) // 8 * 8 - len(packed))
    return fb[:8] + struct.pack("<Q", len(body)) + bytes(body)

functions = []
for i in range(IMAGES):
    lib = cu.load_library(image(i))
    for k in KERNELS:
        functions.append((k, cu.kernel_function(cu.library_kernel(lib, k))))
        gvar, size = cu.global_address(lib, f"var_{i}_0", library=True)
        cu.memcpy_htod(gvar, bytes([0xAB]) * size)  # the program wrote a module variable: SAVE carries it

n = 64
sizes = [1 + b for b in range(GRAPHS)]
acts = [buf(f"a{j}", 4 * n) for j in range(64)]
s = cu.stream_create()
captured = []
for g, size in enumerate(sizes):
    topology = g % TOPOLOGIES
    cu.begin_capture(s)
    for j in range(NODES):
        name, f = functions[(j * 7 + topology) % len(functions)]
        a, b, c = acts[(j + g) % 64], acts[(j * 3) % 64], acts[(j * 5 + 1) % 64]
        if name == "fk_add_f32":
            args = [("ptr", a), ("ptr", b), ("ptr", c), (c_int, n)]
        elif name == "fk_scale_f32":
            args = [("ptr", a), (c_float, 1.0 + size), (c_int, n)]
        else:
            args = [("ptr", a), ("ptr", c), (c_int, n)]
        cu.launch(f, (1, 1, 1), (n, 1, 1), args, stream=s)
    graph = cu.end_capture(s)
    captured.append((graph, cu.instantiate(graph)))

from foundry.save import extract
prof = cProfile.Profile() if PROFILE else None
faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
probe_s = 0.0
t0 = time.perf_counter()
if prof: prof.enable()
for g, (graph, exec_) in enumerate(captured):
    extracted = extract(graph)
    t1 = time.perf_counter()
    with launches_dropped(exec_):
        cu.graph_launch(exec_, s)
        cu.stream_sync(s)
        words = pointed_words(extracted, BASE, live_ranges_now())
    probe_s += time.perf_counter() - t1
    out = [OutputSpec(acts[g % 64], (n,), (1,), "float32", 4 * n)]
    save_graph(extracted, os.path.join(ARCH, f"g{g:03d}.json"), outputs=out, archive_dir=ARCH)
t_saves = time.perf_counter() - t0
t1 = time.perf_counter()
save_graph_manifest(ARCH)
t_manifest = time.perf_counter() - t1
if prof:
    prof.disable()
    pstats.Stats(prof, stream=sys.stdout).sort_stats(SORT).print_stats(45)
emit(graphs=len(captured), nodes=NODES, saves_s=round(t_saves, 3), manifest_s=round(t_manifest, 3),
     rng_probe_s=round(probe_s, 3), pointed_words=len(words),
     minor_faults=resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0,
     phases={k: round(v, 3) for k, v in sorted(save_phases().seconds.items())},
     counts=dict(sorted(getattr(save_phases(), "counts", {}).items())))  # none before counters existed
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", type=int, default=67)
    parser.add_argument("--nodes", type=int, default=980)
    parser.add_argument("--images", type=int, default=12)
    parser.add_argument("--archs", type=int, default=8)
    parser.add_argument("--filler", type=int, default=300, help="kernels per image besides the launched ones")
    parser.add_argument("--topologies", type=int, default=5)
    parser.add_argument("--big", type=int, default=2, help="large initialized variables per image (cuRAND's tables)")
    parser.add_argument("--big-bytes", type=int, default=102400, help="bytes of each large variable")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--sort", default="cumulative")
    args = parser.parse_args()
    settings = f"""
        GRAPHS, NODES, IMAGES, ARCHS = {args.graphs}, {args.nodes}, {args.images}, {args.archs}
        FILLER, TOPOLOGIES, PROFILE, SORT = {args.filler}, {args.topologies}, {args.profile!r}, {args.sort!r}
        BIG, BIG_BYTES = {args.big}, {args.big_bytes}
        """
    run_profiles(settings, [SAVE], env={"FOUNDRY_SNAPSHOT_LIMIT": "0"})  # as the engine plugins run SAVE
    return 0


if __name__ == "__main__":
    sys.exit(main())
