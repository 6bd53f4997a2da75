"""Module variables across SAVE -> LOAD on the fake driver, each half in its own process.

The SAVE process writes a ``__constant__`` table and a ``__device__`` table of a kernel image from the
host (cuLibraryGetGlobal + a copy), and device code writes a third variable during warm-up; a captured
graph reads all three, and a pointer variable the image initializes to another variable's address. A
fresh LOAD process gets a fresh copy of the image (the initial values): the loaded graph must still
produce the native graph's outputs bit for bit, on the foreground and the background LOAD paths, with
and without ``load_cuda_modules_and_libraries``. SAVE refuses, naming the image, the variable and the
byte offset, what it cannot carry: a value holding a module address of the SAVE process, an image whose
variables it cannot enumerate, and two graphs (or two loads) needing different values.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from tests.support.archive_damage import edit_doc, flip_byte, stored_doc, unbundle
from tests.support.graphs import JsonRunner, Scenario, load_prefix, prelude, roundtrip, run_save

N = 16
CTAB = [1.5 * i + 0.25 for i in range(N)]  # written by the host into the __constant__ table
DTAB = [-3.0 * i for i in range(N)]  # written by the host into the __device__ table
COUNTER = 41.5  # written by device code during warm-up

# The image: its variables (index = position, which fk_read_var takes) and kernels.
IMAGE = f"""
from tests.fakecuda.images import Variable
VARIABLES = [
    Variable("ctab", {4 * N}, "constant", struct.pack("<{N}f", *[0.5 * i for i in range({N})])),  # 0
    Variable("dtab", {4 * N}),                                                                  # 1
    Variable("dinit", 12, "init", struct.pack("<3i", 7, 8, 9)),                                 # 2
    Variable("dptr", 8, "init", pointer_to=("dinit", 4)),                                       # 3 (&dinit[1])
    Variable("counter", 4),                                                                     # 4
]
KERNELS = ["fk_read_var", "fk_read_var_ptr", "fk_write_var", "fk_add_f32"]
def load_image(library=True):
    image = make_cubin(KERNELS, variables=VARIABLES)
    if library:
        h = cu.load_library(make_fatbin([("elf", image)]))
        return h, {{k: cu.kernel_function(cu.library_kernel(h, k)) for k in KERNELS}}
    h = cu.load_module(image)
    return h, {{k: cu.module_function(h, k) for k in KERNELS}}
def write_var(h, name, data, library=True):
    cu.memcpy_htod(cu.global_address(h, name, library)[0], data)
"""

ALLOC = f"""
n = {N}
buf("x", 4 * n); buf("sum", 4 * n); buf("c", 4 * n); buf("d", 4 * n); buf("p", 8); buf("k", 4); buf("src", 8)
def set_inputs(k):
    cu.write_f32(B["x"], [float(i + 100 * k) for i in range(n)])
READS["vars"] = [("sum", n), ("c", n), ("d", n), ("p", 2), ("k", 1)]
"""

# The graph: reads ctab, dtab, counter and *dptr; adds ctab to the input (so inputs change outputs).
CAPTURE_GRAPH = """
def capture(K, name="vars"):
    s = cu.stream_create()
    one = ((1, 1, 1), (1, 1, 1))
    cu.begin_capture(s)
    cu.launch(K["fk_read_var"], *one, [("ptr", B["c"]), (c_uint, 0), (c_uint64, 4 * n)], stream=s)
    cu.launch(K["fk_read_var"], *one, [("ptr", B["d"]), (c_uint, 1), (c_uint64, 4 * n)], stream=s)
    cu.launch(K["fk_read_var_ptr"], *one, [("ptr", B["p"]), (c_uint, 3), (c_uint64, 8)], stream=s)
    cu.launch(K["fk_read_var"], *one, [("ptr", B["k"]), (c_uint, 4), (c_uint64, 4)], stream=s)
    cu.launch(K["fk_add_f32"], (1, 1, 1), (n, 1, 1), [("ptr", B["x"]), ("ptr", B["c"]), ("ptr", B["sum"]),
              (c_int, n)], stream=s)
    return cu.end_capture(s)
"""

VARS = Scenario(
    alloc=ALLOC,
    capture=IMAGE
    + CAPTURE_GRAPH
    + f"""
h, K = load_image()
write_var(h, "ctab", struct.pack("<{N}f", *{CTAB!r}))      # as cudaMemcpyToSymbol does
write_var(h, "dtab", struct.pack("<{N}f", *{DTAB!r}))
cu.write_f32(B["src"], [{COUNTER!r}])                      # warm-up: device code writes `counter`
cu.launch(K["fk_write_var"], (1, 1, 1), (1, 1, 1), [("ptr", B["src"]), (c_uint, 4), (c_uint64, 4)])
cu.sync()
add_graph("vars", capture(K))
""",
)


def _f32_of_i32(values: list[int]) -> list[float]:
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}i", *values)))


def _expected(k: int) -> dict[str, list[float]]:
    x = [float(i + 100 * k) for i in range(N)]
    return {
        "sum": [struct.unpack("<f", struct.pack("<f", a + c))[0] for a, c in zip(x, CTAB, strict=True)],
        "c": CTAB,
        "d": DTAB,
        "p": _f32_of_i32([8, 9]),  # *(&dinit[1]) in LOAD's own copy: the relocated pointer still works
        "k": [COUNTER],
    }


def test_host_and_device_written_variables_replay_bit_identical_after_load(
    app_json: JsonRunner, tmp_path: Path
) -> None:
    rt = roundtrip(app_json, VARS, tmp_path / "arch")
    native = rt.native("vars")
    assert native == [_expected(0), _expected(1)]
    assert rt.loaded("vars") == native
    # Carried: what the program wrote; not: dinit (untouched) and dptr (its relocated initializer).
    doc = stored_doc(tmp_path / "arch" / "vars.json")
    assert doc["format_version"] == 5  # stored in the bundle: its region's range is the manifest's
    (image,) = doc["images"].values()
    carried = image["variables"]
    assert [v["name"] for v in carried] == ["counter", "ctab", "dtab"]
    assert [v["bytes"] for v in carried] == [4, 4 * N, 4 * N]
    for v in carried:
        assert (tmp_path / "arch" / "memory" / f"{v['sha256']}.bin").stat().st_size == v["bytes"]
    manifest = json.loads((tmp_path / "arch" / "graph_manifest.json").read_text())
    (entry,) = manifest["images"].values()
    assert entry["variables"] == carried


# LOAD paths: how the LOAD process gets a replayable graph `g` of vars.json (and finishes afterwards).
PATHS = {
    "background": (
        "from foundry.load import Loader\n"
        "p = Loader.start([os.path.join(ARCH, 'vars.json')], num_threads=2)\n"
        "g = p.wait_group(0)",
        "p.wait_all()",
    ),
    "foreground": ("from foundry.load import load_graph\ng = load_graph(os.path.join(ARCH, 'vars.json'))", ""),
}
REPLAY = """
runs = []
for k in INPUT_SETS:
    set_inputs(k); g.launch(0); cu.sync(); runs.append(read("vars"))
"""


@pytest.mark.parametrize(
    ("path", "modules"),
    [("background", True), ("background", False), ("foreground", False)],
    ids=["background-with-modules", "background-images-by-load", "foreground-images-by-load"],
)
def test_variables_written_on_every_load_path(app_json: JsonRunner, tmp_path: Path, path: str, modules: bool) -> None:
    """Without load_cuda_modules_and_libraries (modules False) the images are loaded by LOAD itself, and
    the variables written by the loader thread or load_graph instead of at process start."""
    arch = tmp_path / "arch"
    save = run_save(app_json, VARS, arch)
    start, finish = PATHS[path]
    code = load_prefix(VARS, arch, load_images=modules) + "\n".join([start, REPLAY, finish, "emit(runs=runs)"])
    assert app_json(code)["runs"] == save["native"]["vars"]


# ------------------------------------------------------------------ refused at SAVE
def _save_attempt(
    app_json: JsonRunner, arch: Path, body: str, alloc: str = ALLOC, image: str = IMAGE + CAPTURE_GRAPH
) -> dict:
    """Runs ``body`` in a SAVE process (region set, buffers made by ``alloc``, the image helpers of
    ``image`` defined); ``body`` sets ``result`` from an ``attempt``. Returns it with the files left in
    the archive."""
    code = "\n".join(
        [
            prelude(arch),
            "SAVE = True",
            "foundry.set_allocation_region(BASE, '1GB')",
            alloc,
            image,
            "from foundry.save import save_graph, save_graph_manifest",
            "def save(name, g):",
            "    return save_graph(g, os.path.join(ARCH, name + '.json'), archive_dir=ARCH).name",
            body,
            "files = sorted(str(p.relative_to(ARCH)) for p in __import__('pathlib').Path(ARCH).rglob('*') "
            "if p.is_file()) if os.path.isdir(ARCH) else []",
            "emit(result=result, files=files)",
        ]
    )
    result: dict = app_json(code)
    return result


def test_variable_holding_a_module_address_is_refused(app_json: JsonRunner, tmp_path: Path) -> None:
    r = _save_attempt(
        app_json,
        tmp_path / "arch",
        """
h, K = load_image()
write_var(h, "dptr", struct.pack("<Q", cu.global_address(h, "dtab", True)[0] + 8))  # &dtab[2]
result = attempt(lambda: save("vars", capture(K)))
""",
    )
    error = r["result"]
    assert error["error"] == "ModuleAddressError"
    assert {"ModuleVariableError", "SaveError", "FoundryError"} <= set(error["bases"])
    message = error["message"]
    assert "module variable dptr" in message and "byte offset 0" in message and "inside module variable dtab" in message
    assert not [f for f in r["files"] if f.endswith((".json", ".cugraph")) or f.startswith("memory/")]


def test_image_whose_variables_cannot_be_enumerated_is_refused(app_json: JsonRunner, tmp_path: Path) -> None:
    # A fatbin whose second entry claims Zstandard compression but holds no Zstandard frame: the driver
    # (the fake takes the first ELF entry) loads it, SAVE cannot read the rest of the image.
    r = _save_attempt(
        app_json,
        tmp_path / "arch",
        """
fat = bytearray(make_fatbin([("elf", make_cubin(KERNELS, variables=VARIABLES)), ("elf", b"not a zstd frame" * 4)]))
second = 16 + 64 + ((len(make_cubin(KERNELS, variables=VARIABLES)) + 7) & ~7)
struct.pack_into("<I", fat, second + 16, 64)          # compressed size
struct.pack_into("<Q", fat, second + 40, 0x8000)      # Zstandard
struct.pack_into("<Q", fat, second + 56, 4096)        # uncompressed size
h = cu.load_library(bytes(fat))
K = {k: cu.kernel_function(cu.library_kernel(h, k)) for k in KERNELS}
result = attempt(lambda: save("vars", capture(K)))
""",
    )
    error = r["result"]
    assert error["error"] == "VariablesUnknownError"
    assert "fatbin entry 1" in error["message"] and "cannot be decompressed" in error["message"]
    assert not [f for f in r["files"] if f.endswith((".json", ".cugraph"))]


def test_two_graphs_needing_different_values_are_refused(app_json: JsonRunner, tmp_path: Path) -> None:
    r = _save_attempt(
        app_json,
        tmp_path / "arch",
        f"""
h, K = load_image()
write_var(h, "ctab", struct.pack("<{N}f", *{CTAB!r}))
first = attempt(lambda: save("first", capture(K)))
write_var(h, "ctab", struct.pack("<{N}f", *[2 * v for v in {CTAB!r}]))   # changed between two saves
result = [first, attempt(lambda: save("second", capture(K)))]
""",
    )
    first, second = r["result"]
    assert first == {"ok": "first"}
    assert second["error"] == "VariableConflictError"
    assert "module variable ctab" in second["message"] and "first.json" in second["message"]
    assert "second.json" not in r["files"]


def test_one_image_loaded_twice_with_different_values_is_refused(app_json: JsonRunner, tmp_path: Path) -> None:
    r = _save_attempt(
        app_json,
        tmp_path / "arch",
        """
h1, K1 = load_image(library=False)
h2, K2 = load_image(library=False)                  # the same bytes again: another copy of the variables
write_var(h2, "dtab", struct.pack("<4f", 1, 2, 3, 4), library=False)
s = cu.stream_create()
cu.begin_capture(s)
cu.launch(K1["fk_read_var"], (1, 1, 1), (1, 1, 1), [("ptr", B["d"]), (c_uint, 1), (c_uint64, 16)], stream=s)
cu.launch(K2["fk_read_var"], (1, 1, 1), (1, 1, 1), [("ptr", B["c"]), (c_uint, 1), (c_uint64, 16)], stream=s)
g = cu.end_capture(s)
result = attempt(lambda: save("twice", g))
""",
    )
    error = r["result"]
    assert error["error"] == "VariableConflictError"
    assert "loaded twice" in error["message"] and "module variable dtab" in error["message"]


# ------------------------------------------------------------------ refused at LOAD
def test_two_archives_needing_different_values_are_refused_at_load(app_json: JsonRunner, tmp_path: Path) -> None:
    other = Scenario(ALLOC, VARS.capture.replace(f"*{CTAB!r}", f"*{[v + 1 for v in CTAB]!r}"))
    run_save(app_json, VARS, tmp_path / "a")
    run_save(app_json, other, tmp_path / "b")
    code = load_prefix(VARS, tmp_path / "a", load_images=False) + TWO_ARCHIVES.format(b=str(tmp_path / "b"))
    r = app_json(code)
    assert r["first"]["ok"] is None
    assert r["second"]["error"] == "VariableConflictError"
    assert "module variable ctab" in r["second"]["message"]


TWO_ARCHIVES = """
from foundry.load import load_graph
first = attempt(lambda: load_graph(os.path.join(ARCH, "vars.json")) and None)
second = attempt(lambda: load_graph(os.path.join({b!r}, "vars.json")) and None)
emit(first=first, second=second)
"""


def test_a_second_listing_differing_only_in_size_is_refused_at_load(app_json: JsonRunner, tmp_path: Path) -> None:
    """The first listing written for an image stands: a second that names the same bytes but another size
    (8 bytes for the 4-byte counter) is a conflict too, not a match."""
    run_save(app_json, VARS, tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    unbundle(tmp_path / "b")
    (tmp_path / "b" / "graph_manifest.json").unlink()  # the graph alone, in its files: nothing else to keep in step

    def resize(doc: dict) -> None:
        for image in doc["images"].values():
            image["variables"][0]["bytes"] = 8  # counter; its SHA-256 stays that of the 4 bytes written

    edit_doc(tmp_path / "b" / "vars.json", resize)
    code = load_prefix(VARS, tmp_path / "a", load_images=False) + TWO_ARCHIVES.format(b=str(tmp_path / "b"))
    r = app_json(code)
    assert r["first"]["ok"] is None
    assert r["second"]["error"] == "VariableConflictError", r["second"]
    assert "module variable counter" in r["second"]["message"] and "8 bytes" in r["second"]["message"]


def test_a_damaged_value_is_named_a_module_variable_value_at_load(app_json: JsonRunner, tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    run_save(app_json, VARS, arch)
    doc = stored_doc(arch / "vars.json")
    counter = next(iter(doc["images"].values()))["variables"][0]
    flip_byte(arch / "memory" / f"{counter['sha256']}.bin", 0)
    r = app_json(load_prefix(VARS, arch, load_images=False) + ONE_GRAPH)
    message = r["result"]["message"]
    assert r["result"]["error"] == "ArchiveCorruptError", r["result"]
    assert "module variable value" in message and "state memory" not in message, message


ONE_GRAPH = """
from foundry.load import load_graph
emit(result=attempt(lambda: load_graph(os.path.join(ARCH, "vars.json")) and None))
"""
