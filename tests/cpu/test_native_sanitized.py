"""libfoundry under AddressSanitizer + UBSan: concurrent region traffic and a registry workload from many
threads, and damaged input (the device reads: test_native_sanitized_reads.py).

The library is built with CMake's FOUNDRY_SANITIZE option and the fake driver with ``sanitize=True``;
the application process preloads libasan first, then the sanitized libfoundry. Any sanitizer report
is fatal (halt_on_error) and is also looked for in stderr; the scenarios check their results too, so
a silent wrong answer fails as well.
"""

from __future__ import annotations

from tests.support.sanitized import SKIPS, Sanitized

pytestmark = SKIPS


def test_sanitized_build_is_the_one_preloaded(sanitized: Sanitized) -> None:
    r = sanitized.run("""
    lib = native()
    maps = open("/proc/self/maps").read()
    out(active=lib.fdy_interposer_active(), asan="libasan" in maps, ours=os.environ["FOUNDRY_LIB"] in maps)
    """)
    assert r == {"active": 1, "asan": True, "ours": True}


REGION_STRESS = """
import random
cu = Cuda()
region.set_allocation_region(BASE, "8GB")
THREADS, ROUNDS = 10, 40
errors_seen, live_ptrs, counts = [], {}, {"alloc": 0, "free": 0}
count_lock = threading.Lock()
start = threading.Barrier(THREADS + 1)

tids = {threading.get_native_id()}

def allocator(t):
    cu.make_current()
    tids.add(threading.get_native_id())
    rng = random.Random(t)
    mine = []
    start.wait()
    for i in range(ROUNDS):
        n = rng.choice([1, 4096, 1 << 20, 3 << 20, 5 << 20])
        if t % 3 == 0:
            p = DP(0)
            rc = int(fn("cuMemAllocAsync")(ctypes.byref(p), n, None))
            p = p.value
        else:
            rc, p = alloc_raw(n)
        if rc != 0 or not in_region(p, size=8 << 30):
            errors_seen.append(["alloc", t, i, rc, p])
            continue
        pattern = (t << 24) | i
        if int(fn("cuMemsetD32_v2")(p, pattern, max(n // 4, 1))) != 0:
            errors_seen.append(["memset", t, i])
        mine.append((p, n, pattern))
        with count_lock:
            counts["alloc"] += 1
        if rng.random() < 0.6:
            q, m, pat = mine.pop(rng.randrange(len(mine)))
            words = struct.unpack(f"<{min(m // 4, 64) or 1}I", cu.memcpy_dtoh(q, 4 * (min(m // 4, 64) or 1)))
            if m >= 4 and set(words) != {pat}:
                errors_seen.append(["overwritten", t, i])
            rc = int(fn("cuMemFreeAsync")(q, None)) if t % 3 == 0 else free_raw(q)
            if rc != 0:
                errors_seen.append(["free", t, i, rc])
            with count_lock:
                counts["free"] += 1
    live_ptrs[t] = mine

def vmm_user():
    cu.make_current()
    tids.add(threading.get_native_id())
    start.wait()
    for i in range(15):
        seg = cu.reserve(8 * MIB)
        h = cu.mem_create(2 * MIB)
        cu.mem_map(seg, 2 * MIB, h)
        cu.set_access(seg, 2 * MIB)
        cu.mem_release(h)
        cu.memset_d32(seg, i, 16)
        cu.unmap(seg, 2 * MIB)
        cu.address_free(seg, 8 * MIB)

def observer():
    start.wait()
    for _ in range(200):
        region.allocation_events(max(0, len(region.allocation_events()) - 5))
        region.region_state()
        native().recent_error()

threads = [threading.Thread(target=allocator, args=(t,)) for t in range(THREADS - 2)]
threads += [threading.Thread(target=vmm_user), threading.Thread(target=observer)]
for th in threads:
    th.start()
start.wait()
for th in threads:
    th.join()
ev = region.allocation_events()
spans = sorted((e.offset, e.offset + e.span) for e in ev if int(e.kind) in (1, 3, 5))
overlaps = sum(1 for a, b in zip(spans, spans[1:]) if a[1] > b[0])
live = [x for t in live_ptrs for x in live_ptrs[t]]
ranges_ok = all(address_range(p)[1:] == [p, n] for p, n, _ in live)
for p, n, _ in live:
    free_raw(p)
kinds = [int(e.kind) for e in region.allocation_events()]
out(errors=errors_seen, counts=counts, overlaps=overlaps, ranges_ok=ranges_ok, mapped=state()["mapped_bytes"],
    allocs=kinds.count(1) + kinds.count(3), frees=kinds.count(2) + kinds.count(4),
    vmm=[kinds.count(k) for k in (5, 6, 7, 8)], nthreads=len(tids),
    threads={e.tid for e in region.allocation_events()} == tids)
"""


def test_concurrent_region_traffic_from_many_threads_is_clean(sanitized: Sanitized) -> None:
    r = sanitized.run(REGION_STRESS)
    assert r["errors"] == []
    assert r["overlaps"] == 0 and r["ranges_ok"]
    assert r["allocs"] == r["counts"]["alloc"] and r["allocs"] >= 8 * 40 - 8
    assert r["frees"] == r["allocs"]  # the scenario freed everything it allocated
    assert r["mapped"] == 0
    assert r["vmm"] == [15, 15, 15, 15]
    # 8 allocating threads, the VMM thread and the main thread (final frees), each under its own tid
    assert r["threads"] and r["nthreads"] == 10


REGISTRY_STRESS = """
cu = Cuda()
THREADS, ROUNDS = 8, 12
problems = []
start = threading.Barrier(THREADS)

def worker(t):
    cu.make_current()
    start.wait()
    for i in range(ROUNDS):
        payload = f"{t}/{i}".encode()
        data = images.make_cubin(["fk_fill_f32", f"_Z6kernel{t}_{i}v"], payload=payload, phdrs_last=i % 2 == 0)
        if i % 3 == 0:
            lib = cu.load_library(images.make_fatbin([("elf", data)]))
            f = cu.kernel_function(cu.library_kernel(lib, "fk_fill_f32"))
        else:
            lib = None
            mod = cu.load_module(data)
            f = cu.module_function(mod, "fk_fill_f32")
        index, name = resolve(f)
        rec = registry.recorded_images()[index]
        expected = images.make_fatbin([("elf", data)]) if lib else data
        if name != "fk_fill_f32" or bytes(registry.image_bytes(index)) != expected or rec.size != len(expected):
            problems.append(["record", t, i])
        if sorted(registry.image_entries(index)) != sorted(["fk_fill_f32", f"_Z6kernel{t}_{i}v"]):
            problems.append(["entries", t, i])
        buf = cu.malloc(64)
        with registry.launch_trace():
            cu.launch(f, (1, 1, 1), (16, 1, 1), [("ptr", buf), (ctypes.c_float, float(i)), (ctypes.c_int, 16)])
        attrs = list(registry.function_attrs(f))
        attrs[0] = 48 * 1024 + 1024 * (i + 1)  # above the default: LOAD only raises this limit
        registry.set_function_attrs(f, attrs)
        if registry.function_attrs(f)[0] != 48 * 1024 + 1024 * (i + 1) or cu.read_f32(buf, 1) != [float(i)]:
            problems.append(["attrs/launch", t, i])
        cu.free(buf)
        if lib:
            call("cuLibraryUnload", lib)
        else:
            call("cuModuleUnload", mod)   # forgets functions resolved to it; earlier unloads left holes
        if error_of(resolve, f) is None:
            problems.append(["resolved after unload", t, i])

threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
for th in threads:
    th.start()
for th in threads:
    th.join()
recs = registry.recorded_images()
out(problems=problems, images=len(recs), loaded=sum(r.loaded for r in recs))
"""


def test_concurrent_registry_workload_with_loads_resolves_and_unloads_is_clean(sanitized: Sanitized) -> None:
    r = sanitized.run(REGISTRY_STRESS)
    assert r["problems"] == []
    assert r["images"] == 8 * 12 and r["loaded"] == 0


EDGE_CASES = """
cu = Cuda()
region.set_allocation_region(BASE, 64 * MIB)
lib = native()
res = {}
res["escape"] = alloc_raw(128 * MIB)[0]
res["oom"] = alloc_raw(40 * MIB)[0]                      # FAKECUDA_PHYS_LIMIT is 32 MiB
seg = cu.reserve(8 * MIB)                                # [0, 8 MiB)
h = cu.mem_create(2 * MIB)
cu.mem_map(seg, 2 * MIB, h)
res["free_mapped_seg"] = int(fn("cuMemAddressFree")(seg, 8 * MIB))
cu.unmap(seg, 2 * MIB)
cu.mem_release(h)
cu.address_free(seg, 8 * MIB)
res["restore"] = [lib.fdy_region_map_range(16 * MIB, 2 * MIB), lib.fdy_region_map_range(8 * MIB, 40 * MIB)]
res["mapped"] = state()["mapped_bytes"]
region.preallocate_region("16MB")                        # [8, 24 MiB) around the restored [16, 18)
res["in_prealloc"] = [alloc_raw(MIB)[0] for _ in range(4)]
res["free_prealloc"] = error_of(region.free_preallocated_region)[0]
res["managed"] = int(fn("cuMemAllocManaged")(ctypes.byref(DP(0)), ctypes.c_size_t(10), ctypes.c_uint(1)))
s = cu.stream_create()
cu.begin_capture(s)
res["capture"] = int(fn("cuMemAllocAsync")(ctypes.byref(DP(0)), 10, s))
cu.end_capture(s)
long_name = "_Z" + "x" * 5000
mod = cu.load_module(images.make_ptx([long_name]))
res["long_name"] = resolve(cu.module_function(mod, long_name))[1] == long_name
for _ in range(50):                                      # more failures than the error log keeps
    free_raw(BASE + 60 * MIB)
seq, msg = native().recent_error()
res["log"] = [seq >= 50, "not the start of a live allocation" in msg]
region.release_allocation_region()
res["released"] = state()["reserved"]
out(**res)
"""


def test_region_edge_cases_are_clean(sanitized: Sanitized) -> None:
    r = sanitized.run(EDGE_CASES, env={"FAKECUDA_PHYS_LIMIT": str(32 << 20)})
    assert r["escape"] == 2 and r["oom"] == 2
    assert r["free_mapped_seg"] == 1
    assert r["restore"] == [0, 2]  # the second restore does not fit in 32 MiB and is undone
    assert r["mapped"] == 2 << 20
    assert r["in_prealloc"] == [0, 0, 0, 0] and r["free_prealloc"] == "RegionStateError"
    assert r["managed"] == 801 and r["capture"] == 801
    assert r["long_name"] and r["log"] == [True, True]
    assert r["released"] is False


DELTA_WALK = """
from pathlib import Path
from foundry.archive import read_graph
from foundry.errors import CodecError
from foundry.native import codec
F = Path("tests/fixtures/gpu_archive")
_m, delta = read_graph(F / "ew_bs32.json")
_t, template = read_graph(F / "ew_bs64.json")
n = int.from_bytes(template[8:12], "little")
indices = codec.delta_indices(delta, n)
refused = 0
for cut in range(len(delta)):
    try:
        codec.delta_indices(delta[:cut], n)
    except CodecError:
        refused += 1
for pos in range(len(delta)):
    flipped = bytearray(delta)
    flipped[pos] ^= 0xFF
    try:
        codec.delta_indices(bytes(flipped), n)
    except CodecError:
        pass
back = codec.delta_from_record(template, indices, "ab" * 32)
out(indices=indices, refused=refused, cuts=len(delta), back=codec.delta_indices(back, n))
"""


def test_delta_walk_under_damage_is_clean(sanitized: Sanitized) -> None:
    """LOAD's native delta walk (shared with applying overrides) on the real member's delta, every
    truncation and every byte flipped: refused or accepted, never out of bounds."""
    r = sanitized.run(DELTA_WALK)
    assert r["indices"] and r["back"] == r["indices"]
    assert r["refused"] == r["cuts"]


POINTED_WORDS = """
from pathlib import Path
from foundry.archive import read_graph
from foundry.errors import CodecError
from foundry.native import codec
_t, record = read_graph(Path("tests/fixtures/gpu_archive") / "ew_bs64.json")
words = sorted(int.from_bytes(record[i:i + 8], "little") for i in range(0, len(record) - 7, 8))
ranges = [(w, w + 8) for w in words[-3:]]  # no device memory there: every read fails and is left out
whole = codec.pointed_words(record, ranges)
refused = 0
for cut in range(0, len(record), 8):
    try:
        codec.pointed_words(record[:cut], ranges)
    except CodecError:
        refused += 1
for pos in range(0, len(record), 3):
    flipped = bytearray(record)
    flipped[pos] ^= 0xFF
    try:
        codec.pointed_words(bytes(flipped), ranges)
    except CodecError:
        pass
out(whole=len(whole), refused=refused, cuts=len(range(0, len(record), 8)))
"""


def test_pointed_words_walk_under_damage_is_clean(sanitized: Sanitized) -> None:
    """SAVE's native walk of a record's argument words (the RNG probe), on the real template's record,
    every truncation and every third byte flipped: refused or answered, never out of bounds; words whose
    memory cannot be read are left out, not an error."""
    r = sanitized.run(POINTED_WORDS)
    assert r["whole"] == 0
    assert r["refused"] == r["cuts"]
