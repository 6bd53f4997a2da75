"""A table of device function pointers across SAVE -> LOAD on the fake driver, each half in its own process.

NCCL's collective kernels call through ``ncclDevFuncTable``, a ``__device__`` table that nvlink fills with
R_CUDA_64 relocations to functions: every load of the image holds its own code addresses there. The fake
gives each load its own code base and faults a call through an address of another load
(``fk_call_table``), as the GPU did when LOAD wrote SAVE's copy of the table into its own image. SAVE must
leave such words to the loader: the graph that calls through the table replays bit for bit after LOAD, the
archive carries no copy of the table, and a table whose other bytes the program changed is refused by
name, since LOAD writes a carried variable whole.
"""

from __future__ import annotations

from pathlib import Path

from tests.cpu.test_roundtrip_fake_variables import _save_attempt
from tests.support.archive_damage import stored_doc
from tests.support.graphs import JsonRunner, Scenario, roundtrip

# The image: `table` holds the code addresses of two kernels (as nvlink writes them), then 8 bytes of data.
IMAGE = """
from tests.fakecuda.images import Variable
KERNELS = ["fk_call_table", "fk_add_f32", "fk_read_var"]
VARIABLES = [Variable("table", 24, "init", struct.pack("<3Q", 0, 0, 5), code_of=("fk_add_f32", "fk_read_var"))]
def load_image():
    h = cu.load_library(make_fatbin([("elf", make_cubin(KERNELS, variables=VARIABLES))]))
    return h, {k: cu.kernel_function(cu.library_kernel(h, k)) for k in KERNELS}
"""

ALLOC = """
buf("call0", 8); buf("call1", 8)
def set_inputs(k):
    pass
READS["calls"] = [("call0", 2), ("call1", 2)]
"""

CAPTURE = """
def capture(K):
    s = cu.stream_create()
    one = ((1, 1, 1), (1, 1, 1))
    cu.begin_capture(s)
    cu.launch(K["fk_call_table"], *one, [("ptr", B["call0"]), (c_uint, 0), (c_uint, 0)], stream=s)
    cu.launch(K["fk_call_table"], *one, [("ptr", B["call1"]), (c_uint, 0), (c_uint, 1)], stream=s)
    return cu.end_capture(s)
"""

TABLE = Scenario(alloc=ALLOC, capture=IMAGE + CAPTURE + 'h, K = load_image()\nadd_graph("calls", capture(K))\n')


def test_a_call_through_a_function_pointer_table_replays_bit_identical_after_load(
    app_json: JsonRunner, tmp_path: Path
) -> None:
    rt = roundtrip(app_json, TABLE, tmp_path / "arch")
    native = rt.native("calls")
    # Each call landed in this load's code (the fake faults otherwise), at two different functions.
    assert len(native) == 2 and native[0] == native[1]
    assert native[0]["call0"] != native[0]["call1"]
    assert rt.loaded("calls") == native
    (image,) = stored_doc(tmp_path / "arch" / "calls.json")["images"].values()
    assert image.get("variables", []) == []  # the table is the loader's in every load: nothing carried


def test_a_table_whose_other_bytes_the_program_changed_is_refused_by_name(app_json: JsonRunner, tmp_path: Path) -> None:
    r = _save_attempt(
        app_json,
        tmp_path / "arch",
        """
h, K = load_image()
cu.memcpy_htod(cu.global_address(h, "table", True)[0] + 16, struct.pack("<Q", 6))  # the data word
result = attempt(lambda: save("calls", capture(K)))
""",
        alloc=ALLOC,
        image=IMAGE + CAPTURE,
    )
    error = r["result"]
    assert error["error"] == "ModuleAddressError", error
    message = error["message"]
    for needle in ("module variable table", "2 code address(es)", "byte offset 0", "a variable of its own"):
        assert needle in message, (needle, message)
    assert not [f for f in r["files"] if f.endswith((".json", ".cugraph")) or f.startswith("memory/")]


def test_the_words_of_a_function_pointer_table_are_read_from_the_images_relocations() -> None:
    """A cubin nvlink linked (tests/fixtures/funcptr: source and commands there): its `table` of two device
    function pointers is relocated against the functions; `where = &counter` against a variable."""
    from foundry.images import ImageFormat, module_variables

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "funcptr"
    linked = module_variables((fixtures / "funcptr.linked.sm_90.cubin").read_bytes(), ImageFormat.ELF)
    assert linked.complete
    (table,) = [v for name, v in linked.variables.items() if name.endswith("table")]
    assert table.code_words == frozenset({0, 8}) and table.sizes == frozenset({16})
    assert linked.variables["where"].code_words == frozenset()  # a pointer to a variable: compared as before
    assert linked.variables["counter"].code_words == frozenset()
    # Compiled whole (no device link): the table holds offsets the code uses as they are, no relocation.
    whole = module_variables((fixtures / "funcptr.whole.sm_90.cubin").read_bytes(), ImageFormat.ELF)
    assert "table" in whole.variables and all(not v.code_words for v in whole.variables.values())


def test_a_relocation_to_a_symbol_in_an_executable_section_is_code() -> None:
    """A linker may relocate against a section symbol plus an addend (a local function): the symbol's
    section being code makes the word the loader's too. A relocation against a variable stays data."""
    from foundry.images.elf import elf_code_relocations, elf_sections
    from tests.fakecuda.images import Variable, make_cubin

    image = bytearray(
        make_cubin(
            ["k0", "k1"],
            variables=[
                Variable("x", 8, "init"),
                Variable("table", 16, "init", code_of=("k0", "k1")),
                Variable("p", 8, "init", pointer_to=("x", 0)),
            ],
        )
    )
    sections = elf_sections(image)
    assert sections is not None
    symtab = next(s for s in sections if s.type == 2)
    init = next(s.index for s in sections if s.name == ".nv.global.init")
    assert elf_code_relocations(image, sections, frozenset({init})) == {init: frozenset({8, 16})}
    # k0 and k1 (the last two symbols) as section symbols (STT_SECTION) of their .text sections.
    for k in (1, 2):
        image[symtab.offset + symtab.size - 24 * k + 4] = 3
    assert elf_code_relocations(image, sections, frozenset({init})) == {init: frozenset({8, 16})}
    # A relocation table whose symbol table lies past the file: not read, not guessed.
    rela = next(s for s in sections if s.name == ".rela.nv.global.init")
    broken = bytearray(image)
    link_at = int.from_bytes(image[0x28:0x30], "little") + rela.index * 64 + 40
    broken[link_at : link_at + 4] = (len(sections) + 3).to_bytes(4, "little")
    assert elf_code_relocations(bytes(broken), elf_sections(bytes(broken)) or [], frozenset({init})) is None
