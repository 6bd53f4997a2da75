"""SAVE -> LOAD scenarios on the fake CUDA driver, each half in its own process.

A ``Scenario`` is two pieces of application code:

* ``alloc`` runs in BOTH processes, right after the region is set: it makes the persistent
  allocations with ``buf(name, nbytes)`` (same order and sizes in both, as the README requires),
  defines ``set_inputs(k)`` (writes input set ``k`` into the static inputs) and fills ``READS``
  (graph name -> ``[(buffer, float count), ...]``: what a graph's outputs are). The variable
  ``SAVE`` says which process it runs in (buffers only the SAVE process makes go under ``if SAVE:``).
* ``capture`` runs only in the SAVE process: it loads kernel images (``module(...)``,
  ``library(...)``), captures or builds graphs and registers each one with
  ``add_graph(name, cugraph, rng=None)`` (saved after the native runs) or ``save_now(...)`` (saved
  at once, as a program that saves right after each capture does).

``save_script`` instantiates every graph natively, launches it once per input set and records the
outputs, then saves every graph (and the manifest); ``load_script`` rebuilds each graph from the
archive in a fresh process and launches it on the same input sets. Both also report the graph's
structure (``describe``: node types, kernel names, grids, blocks, shared memory, cluster attribute,
argument bytes, memset/memcpy parameters, edges with their edge data), read back through the driver,
so the test can compare the native graph with the rebuilt one node by node.
"""

from __future__ import annotations

import struct
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Archive helpers now in archive_damage.py, re-exported for existing `from tests.support.graphs import ...`.
from tests.support.archive_damage import (  # noqa: F401
    archive_files,
    copy_archive,
    flip_byte,
    graph_files,
    truncate,
)

BASE = 0x700000000000  # far from where Linux maps libraries, and outside AddressSanitizer's shadow
REGION_SIZE = "1GB"

# Python that both processes run first. `cu` is the application's view of the (fake) driver.
PRELUDE = r"""
import ctypes, json, os, struct, sys
from ctypes import byref, c_double, c_float, c_int, c_size_t, c_uint, c_uint64, c_void_p
from tests.support.fakecu import *
from tests.fakecuda.images import make_cubin, make_fatbin
import foundry
from foundry.schema import OutputSpec, RngSpec

BASE = {base}
ARCH = {arch!r}
JSON_DIR = ARCH     # where the graphs' .json/.cugraph go (the archive directory unless a test says otherwise)
cu = Cuda()

def emit(**kw):
    print(json.dumps(kw))

def attempt(fn):
    '''{{"ok": fn()}}, or the exception's type, base classes and message.'''
    try:
        return {{"ok": fn()}}
    except Exception as e:
        return {{"error": type(e).__name__, "bases": [c.__name__ for c in type(e).__mro__], "message": str(e)}}

def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]

def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]

B = {{}}        # buffer name -> device address, in allocation order
READS = {{}}    # graph name -> [(buffer name, float count)]
INPUT_SETS = (0, 1)

def buf(name, nbytes):
    B[name] = cu.malloc(nbytes)
    return B[name]

def read(graph):
    return {{b: cu.read_f32(B[b], n) for b, n in READS[graph]}}

def set_inputs(k):
    pass

def module(*names):
    '''CUfunctions of a freshly loaded cubin module holding `names`.'''
    m = cu.load_module(make_cubin(list(names)))
    return {{n: cu.module_function(m, n) for n in names}}

def library(*names, functions=True):
    '''CUfunctions (or CUkernels) of a freshly loaded fatbin library holding `names`.'''
    lib = cu.load_library(make_fatbin([("elf", make_cubin(list(names)))]))
    ks = {{n: cu.library_kernel(lib, n) for n in names}}
    return {{n: cu.kernel_function(k) for n, k in ks.items()}} if functions else ks

class MEMCPY3D(ctypes.Structure):
    _fields_ = [
        ("srcXInBytes", c_size_t), ("srcY", c_size_t), ("srcZ", c_size_t), ("srcLOD", c_size_t),
        ("srcMemoryType", c_int), ("srcHost", c_void_p), ("srcDevice", c_uint64), ("srcArray", c_void_p),
        ("reserved0", c_void_p), ("srcPitch", c_size_t), ("srcHeight", c_size_t),
        ("dstXInBytes", c_size_t), ("dstY", c_size_t), ("dstZ", c_size_t), ("dstLOD", c_size_t),
        ("dstMemoryType", c_int), ("dstHost", c_void_p), ("dstDevice", c_uint64), ("dstArray", c_void_p),
        ("reserved1", c_void_p), ("dstPitch", c_size_t), ("dstHeight", c_size_t),
        ("WidthInBytes", c_size_t), ("Height", c_size_t), ("Depth", c_size_t),
    ]

def _kernel_args(p, f):
    if p.extra:
        words = []
        i = 0
        while (p.extra[i] or 0) != CU_LAUNCH_PARAM_END:
            words.append((p.extra[i] or 0, p.extra[i + 1] or 0))
            i += 2
        opts = dict(words)
        size = ctypes.cast(opts[CU_LAUNCH_PARAM_BUFFER_SIZE], ctypes.POINTER(c_size_t))[0]
        return "extra", ctypes.string_at(opts[CU_LAUNCH_PARAM_BUFFER_POINTER], size).hex()
    data = b"".join(ctypes.string_at(p.kernelParams[i], size) for i, (_, size) in enumerate(cu.param_info(f)))
    return "params", data.hex()

def describe(g, events=None):
    '''The graph as the driver reports it, with node handles replaced by indices.'''
    events = {{}} if events is None else events
    nodes = cu.graph_nodes(g)
    index = {{n: i for i, n in enumerate(nodes)}}
    out = []
    for n in nodes:
        t = cu.node_type(n)
        d = {{"type": t}}
        if t == "kernel":
            p = cu.kernel_node_params(n)
            f = p.func or cu.kernel_function(p.kern)
            attrs = {{}}
            for aid in range(1, 17):              # every launch attribute the node carries (non-zero)
                v = CUlaunchAttributeValue()
                if fn("cuGraphKernelNodeGetAttribute")(n, aid, byref(v)) == 0 and any(v.u32):
                    attrs[str(aid)] = list(v.u32)
            mode, args = _kernel_args(p, f)
            d.update(name=cu.func_name(f), grid=[p.gridDimX, p.gridDimY, p.gridDimZ],
                     block=[p.blockDimX, p.blockDimY, p.blockDimZ], shared=p.sharedMemBytes,
                     cluster=attrs.get("4", [0, 0, 0])[:3], attrs=attrs, mode=mode, args=args,
                     max_dynamic_shared=cu.func_attr(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES))
        elif t == "memset":
            m = CUDA_MEMSET_NODE_PARAMS()
            call("cuGraphMemsetNodeGetParams", n, byref(m))
            d.update(dst=m.dst, pitch=m.pitch, value=m.value, element_size=m.elementSize, width=m.width,
                     height=m.height)
        elif t == "memcpy":
            m = MEMCPY3D()
            f = fn("cuGraphMemcpyNodeGetParams")
            f.argtypes = [c_void_p, c_void_p]
            check(f(n, byref(m)), "cuGraphMemcpyNodeGetParams")
            d.update(src=m.srcDevice, dst=m.dstDevice, src_type=m.srcMemoryType, dst_type=m.dstMemoryType,
                     width=m.WidthInBytes, height=m.Height, depth=m.Depth)
        elif t == "graph":
            child = c_void_p()
            call("cuGraphChildGraphNodeGetGraph", n, byref(child))
            d["child"] = describe(child.value, events)
        elif t in ("event_record", "wait_event"):
            e = c_void_p()
            name = "cuGraphEventRecordNodeGetEvent" if t == "event_record" else "cuGraphEventWaitNodeGetEvent"
            check(fn(name)(c_void_p(n), byref(e)), name)
            d["event"] = events.setdefault(e.value, len(events))  # events numbered by first use
        out.append(d)
    edges = sorted([index[a], index[b], list(data)] for a, b, data in cu.graph_edges(g))
    return {{"nodes": out, "edges": edges}}
"""

SAVE_BODY = r"""
from foundry.save import save_graph
from foundry.save import save_graph_manifest

GRAPHS = {}   # name -> (CUgraph, RngSpec or None)
SAVED_EARLY = set()
MANIFEST_DOCUMENTS = []  # documents the capture code wrote, for the manifest to list

def add_graph(name, g, rng=None):
    GRAPHS[name] = (g, rng)

def save_now(name, g, rng=None):
    '''Saves a graph at once (as a program saving right after each capture does); still run natively.'''
    add_graph(name, g, rng)
    save_graph(g, os.path.join(JSON_DIR, name + ".json"), outputs=outputs_of(name), rng=rng, archive_dir=ARCH)
    SAVED_EARLY.add(name)

def outputs_of(name):
    return [OutputSpec(B[b], (n,), (1,), "float32", 4 * n) for b, n in READS[name]]
"""

SAVE_TAIL = r"""
native = {}
structure = {}
for name, (g, rng) in GRAPHS.items():
    structure[name] = describe(g)
    ex = cu.instantiate(g)
    runs = []
    for k in INPUT_SETS:
        set_inputs(k)
        cu.graph_launch(ex, 0)
        cu.sync()
        runs.append(read(name))
    native[name] = runs
metas = {}
for name, (g, rng) in GRAPHS.items():
    path = os.path.join(JSON_DIR, name + ".json")
    if name in SAVED_EARLY:
        from foundry.archive import read_meta
        meta = read_meta(path)
    else:
        meta = save_graph(g, path, outputs=outputs_of(name), rng=rng, archive_dir=ARCH)
    metas[name] = {"topology": meta.topology, "stats": dict(meta.stats_dict()), "events": meta.events,
                   "rng": meta.rng.to_json() if meta.rng else None,
                   "memory": None if meta.memory is None else [meta.memory.sha256, meta.memory.bytes],
                   "images": {i.sha256: [i.bytes, i.format.value] for i in meta.images},
                   "functions": [[f.image, f.name, list(f.attrs)] for f in meta.functions]}
if MANIFEST:
    save_graph_manifest(ARCH, documents=MANIFEST_DOCUMENTS)
from foundry.save import save_phases
emit(native=native, structure=structure, metas=metas, buffers=B, save_phases=sorted(save_phases().seconds))
"""

LOAD_HEAD = r"""
from foundry.load import load_graph
if LOAD_IMAGES:
    foundry.load_cuda_modules_and_libraries(ARCH)
foundry.set_allocation_region(BASE, {size!r})
"""

LOAD_TAIL = r"""
loaded, structure, errors = {}, {}, {}
for name in NAMES:
    r = attempt(lambda: load_graph(os.path.join(JSON_DIR, name + ".json"), **LOAD_KWARGS))
    if "error" in r:
        errors[name] = r
        continue
    lg = r["ok"]
    structure[name] = describe(lg.graph)
    runs = []
    for k in INPUT_SETS:
        set_inputs(k)
        lg.launch(0)
        cu.sync()
        runs.append(read(name))
    loaded[name] = runs
emit(loaded=loaded, structure=structure, errors=errors, buffers=B)
"""


@dataclass(frozen=True)
class Scenario:
    """Application code of one SAVE/LOAD pair (see the module docstring)."""

    alloc: str
    capture: str
    extra_load: str = ""  # LOAD-only code run after `alloc` (before any graph is loaded)


def prelude(arch: Path, json_dir: Path | None = None) -> str:
    """PRELUDE for an archive directory: imports, `cu`, helpers, `describe`."""
    code = PRELUDE.format(base=hex(BASE), arch=str(arch))
    return code + (f"JSON_DIR = {str(json_dir)!r}\n" if json_dir is not None else "")


def save_script(
    sc: Scenario, arch: Path, *, manifest: bool = True, region: bool = True, json_dir: Path | None = None
) -> str:
    """Python for the SAVE process of ``sc`` (prints one JSON line: native outputs, structure, metas)."""
    head = f"foundry.set_allocation_region(BASE, {REGION_SIZE!r})\n" if region else ""
    return "\n".join(
        [
            prelude(arch, json_dir),
            "SAVE = True",
            f"MANIFEST = {manifest!r}",
            head,
            textwrap.dedent(sc.alloc),
            SAVE_BODY,
            textwrap.dedent(sc.capture),
            SAVE_TAIL,
        ]
    )


def load_prefix(
    sc: Scenario, arch: Path, *, load_images: bool = True, region_size: str = REGION_SIZE, json_dir: Path | None = None
) -> str:
    """Python for a LOAD process up to (not including) load_graph: images, region, allocations."""
    return "\n".join(
        [
            prelude(arch, json_dir),
            "SAVE = False",
            f"LOAD_IMAGES = {load_images!r}",
            LOAD_HEAD.format(size=region_size),
            textwrap.dedent(sc.alloc),
            textwrap.dedent(sc.extra_load),
        ]
    )


def load_script(
    sc: Scenario,
    arch: Path,
    names: Sequence[str],
    *,
    load_images: bool = True,
    load_kwargs: str = "{}",
    json_dir: Path | None = None,
) -> str:
    """Python for the LOAD process: rebuilds graphs ``names`` and runs them on every input set."""
    return "\n".join(
        [
            load_prefix(sc, arch, load_images=load_images, json_dir=json_dir),
            f"NAMES = {list(names)!r}",
            f"LOAD_KWARGS = {load_kwargs}",
            LOAD_TAIL,
        ]
    )


JsonRunner = Callable[..., Any]


@dataclass
class RoundTrip:
    """What the SAVE and the LOAD process reported."""

    arch: Path
    save: dict[str, Any]
    load: dict[str, Any] = field(default_factory=dict)

    def native(self, graph: str) -> list[dict[str, list[float]]]:
        return list(self.save["native"][graph])

    def loaded(self, graph: str) -> list[dict[str, list[float]]]:
        assert not self.load["errors"], f"LOAD failed: {self.load['errors']}"
        return list(self.load["loaded"][graph])

    def meta(self, graph: str) -> dict[str, Any]:
        return dict(self.save["metas"][graph])


def run_save(
    app_json: JsonRunner,
    sc: Scenario,
    arch: Path,
    env: Mapping[str, str] | None = None,
    manifest: bool = True,
    json_dir: Path | None = None,
) -> dict[str, Any]:
    code = save_script(sc, arch, manifest=manifest, json_dir=json_dir)
    result: dict[str, Any] = app_json(code, env=dict(env or {}))
    return result


def run_load(
    app_json: JsonRunner,
    sc: Scenario,
    arch: Path,
    names: Sequence[str],
    env: Mapping[str, str] | None = None,
    load_images: bool = True,
    load_kwargs: str = "{}",
    json_dir: Path | None = None,
) -> dict[str, Any]:
    code = load_script(sc, arch, names, load_images=load_images, load_kwargs=load_kwargs, json_dir=json_dir)
    result: dict[str, Any] = app_json(code, env=dict(env or {}))
    return result


def roundtrip(
    app_json: JsonRunner,
    sc: Scenario,
    arch: Path,
    save_env: Mapping[str, str] | None = None,
    load_env: Mapping[str, str] | None = None,
    json_dir: Path | None = None,
) -> RoundTrip:
    """SAVE in one process, LOAD every saved graph in another; both reports."""
    save = run_save(app_json, sc, arch, save_env, json_dir=json_dir)
    rt = RoundTrip(arch, save)
    rt.load = run_load(app_json, sc, arch, list(save["native"]), load_env, json_dir=json_dir)
    return rt


def f32(x: float) -> float:
    """``x`` rounded to float32, as the kernels compute it."""
    return float(struct.unpack("<f", struct.pack("<f", x))[0])
