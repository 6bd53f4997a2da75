"""SAVE -> LOAD round trips on the fake driver: RNG seed/offset and state memory.

The RNG reads its seed and offset from device memory at LOAD; memory only the SAVE process
wrote (weights) is restored from the snapshot, or not saved at all with a snapshot limit of 0.

See tests/support/roundtrip_fake.py for what every round trip checks.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.support.archive_damage import stored_doc
from tests.support.fakecu import philox_ref
from tests.support.graphs import BASE, JsonRunner, Scenario, load_prefix, roundtrip, run_save
from tests.support.region import offsets_for, span
from tests.support.roundtrip_fake import N
from tests.support.scenarios import GRAN

RNG = Scenario(
    alloc=f"""
    n = {N}
    buf("seed", 8); buf("offset", 8); buf("r", 4 * n)
    SEEDS = [(1234, 10), (987654321, 7000), (42, 1 << 40)]
    INPUT_SETS = (0, 1) if SAVE else (0, 1, 2)
    def set_inputs(k):
        cu.write_u64(B["seed"], SEEDS[k][0])
        cu.write_u64(B["offset"], SEEDS[k][1])
    READS["rng"] = [("r", n)]
    """,
    capture="""
    K = module("fk_philox_f32")
    s = cu.stream_create()
    cu.begin_capture(s)
    cu.launch(K["fk_philox_f32"], (1, 1, 1), (n, 1, 1),
              [("ptr", B["seed"]), ("ptr", B["offset"]), (c_uint, 3), ("ptr", B["r"]), (c_int, n)], stream=s)
    add_graph("rng", cu.end_capture(s), rng=RngSpec(B["seed"], B["offset"], 4))
    """,
)


def test_rng_reads_seed_and_offset_from_device_memory_at_load(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, RNG, tmp_path / "arch")
    native, loaded = rt.native("rng"), rt.loaded("rng")
    assert loaded[:2] == native
    seeds = [(1234, 10), (987654321, 7000), (42, 1 << 40)]
    for (seed, offset), run in zip(seeds, loaded, strict=True):
        assert run["r"] == [philox_ref(seed, offset + 3, i) for i in range(N)]
    assert len({tuple(run["r"]) for run in loaded}) == 3  # new seed/offset values give new numbers
    buffers = rt.save["buffers"]
    assert rt.meta("rng")["rng"] == {
        "seed_address": buffers["seed"],
        "offset_address": buffers["offset"],
        "increment": 4,
    }
    assert rt.load["structure"]["rng"] == rt.save["structure"]["rng"]


STATE = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("out", 4 * n)
    if SAVE:                                # weights: made (and warmed up) only by the SAVE process
        buf("weights", 4 * n)
        cu.write_f32(B["weights"], [float(i % 13) for i in range(n)])
    def set_inputs(k):
        cu.write_f32(B["x"], [100.0 * (k + 1) + i for i in range(n)])
    READS["state"] = [("out", n)]
    """,
    capture="""
    K = module("fk_add_f32", "fk_scale_f32")
    full = ((1, 1, 1), (n, 1, 1))
    cu.launch(K["fk_scale_f32"], *full, [("ptr", B["weights"]), (c_float, 1.5), (c_int, n)])  # warm-up
    s = cu.stream_create()
    cu.begin_capture(s)
    cu.launch(K["fk_add_f32"], *full, [("ptr", B["x"]), ("ptr", B["weights"]), ("ptr", B["out"]), (c_int, n)],
              stream=s)
    add_graph("state", cu.end_capture(s))
    """,
    extra_load=f"""
    SLOT = {span(4 * N)}
    WEIGHTS = BASE + 2 * SLOT               # third allocation of SAVE (small: beside x and out in one granule)
    cu.write_f32(B["x"], [5.0] * n)         # LOAD's own input, written before load_graph
    """,
)


def test_state_memory_restored_from_snapshot_without_overwriting_own_buffers(
    app_json: JsonRunner, tmp_path: Path
) -> None:
    arch = tmp_path / "arch"
    save = run_save(app_json, STATE, arch)
    assert save["buffers"]["weights"] == BASE + offsets_for([4 * N] * 3)[2]
    memory = save["metas"]["state"]["memory"]
    assert memory is not None
    snapshot = arch / "memory" / f"{memory[0]}.bin"
    assert snapshot.stat().st_size == memory[1] and hashlib.sha256(snapshot.read_bytes()).hexdigest() == memory[0]
    r = app_json(_load_code(arch, STATE_LOAD))
    weights = [1.5 * (i % 13) for i in range(N)]
    assert r["weights"] == weights  # the LOAD process never allocated or wrote them
    assert r["x_after_load"] == [5.0] * N  # LOAD's own input survived the restore
    assert r["runs"] == [{"out": [v + w for v, w in zip(x, weights, strict=True)]} for x in _state_inputs()]
    assert r["runs"] == save["native"]["state"]
    # past SAVE's high-water mark: not in the granule LOAD's x and out share with SAVE's weights
    assert r["late"] >= BASE + GRAN


def test_snapshot_limit_zero_saves_no_state_memory(app_json: JsonRunner, tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    save = run_save(app_json, STATE, arch, env={"FOUNDRY_SNAPSHOT_LIMIT": "0"})
    assert save["metas"]["state"]["memory"] is None
    assert stored_doc(arch / "state.json")["memory"] is None
    assert not (arch / "memory").exists()
    r = app_json(_load_code(arch, STATE_LOAD))
    # weights were mapped (they are SAVE's live memory) but not filled: out = x + 0.
    assert r["weights"] == [0.0] * N
    assert r["runs"] == [{"out": x} for x in _state_inputs()]
    assert r["runs"] != save["native"]["state"]


def _state_inputs() -> list[list[float]]:
    return [[100.0 * (k + 1) + i for i in range(N)] for k in (0, 1)]


STATE_LOAD = """
from foundry.load import load_graph
lg = load_graph(os.path.join(ARCH, "state.json"))
x_after = cu.read_f32(B["x"], n)
weights = cu.read_f32(WEIGHTS, n)
late = cu.malloc(4 * n)                 # allocated after LOAD: must not land on SAVE's memory
cu.write_f32(late, [99.0] * n)
runs = []
for k in INPUT_SETS:
    set_inputs(k); lg.launch(0); cu.sync(); runs.append(read("state"))
emit(weights=weights, x_after_load=x_after, runs=runs, late=late)
"""


def _load_code(arch: Path, body: str) -> str:
    return load_prefix(STATE, arch) + "\n" + body
