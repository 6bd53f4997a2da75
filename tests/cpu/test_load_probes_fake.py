"""The benchmark's probes inside LOAD (foundry.load.probe) on the fake driver, SAVE and LOAD in separate
processes: switches measured whole and node by node, the switch-penalty probe's pairs (an own exec switched
both ways, nodes switched away and back before launch, updates that change nothing, execs for device
launch), the override kinds, and the driver probe's parallel image loads. Every exec a probe builds
replays as the graph it stands for."""

from __future__ import annotations

from pathlib import Path

from tests.cpu.test_roundtrip_fake_manifest import VARIANTS
from tests.support.graphs import JsonRunner, load_prefix, run_save

NAMES = ["v0", "v1", "v2", "v3"]  # one topology group: v0 is the template, the others its members

PROBES = """
from foundry.load import Loader, probe
p = Loader.start([os.path.join(ARCH, n + ".json") for n in NAMES], num_threads=2, defer_dedicated=True)
handles = [p.wait_group(i) for i in range(len(NAMES))]
differences = probe.varying_differences(p)
pair = probe.exec_pairs(p, 1)[0]
times = pair.switch_times()  # ends node by node on the member's values
runs = []
for k in INPUT_SETS:
    set_inputs(k); pair.switched.launch(0); cu.sync(); runs.append(read(pair.member.source.meta.name))
pair.close()
emit(differences=differences, times=times, runs=runs, member=pair.member.source.meta.name, nodes=pair.nodes)
"""


def test_the_switch_probes_measure_real_switches(app_json: JsonRunner, tmp_path: Path) -> None:
    """The benchmark's switch probes (foundry.load.probe): a switched exec moved whole and node by node
    between its template's values and a member's ends replaying as the member; the count of varying nodes
    that differ between graphs launched in turn is bounded by the group's varying nodes."""
    arch = tmp_path / "arch"
    save = run_save(app_json, VARIANTS, arch)
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + PROBES)
    assert set(r["times"]) == {
        "whole_to_template_us",
        "whole_to_member_us",
        "nodes_to_template_us",
        "nodes_to_member_us",
    }
    assert all(t > 0 for t in r["times"].values())
    assert r["runs"] == save["native"][r["member"]]
    [d] = r["differences"]
    assert d["nodes"] == r["nodes"] and d["switches"] == len(NAMES) - 1
    assert 0 < d["differ_min"] <= d["differ_max"] <= d["varying"] <= d["nodes"]


MEMBER_PAIRS = """
from foundry.load import Loader, probe
p = Loader.start([os.path.join(ARCH, n + ".json") for n in NAMES], num_threads=2, defer_dedicated=True)
handles = [p.wait_group(i) for i in range(len(NAMES))]
rows = []
def run(e, name):
    out = []
    for k in INPUT_SETS:
        set_inputs(k); e.launch(0); cu.sync(); out.append(read(name))
    return out
for pair in probe.member_pairs(p):
    member, template = pair.member.source.meta.name, pair.group.template.meta.name
    row = {"member": member, "kinds": pair.override_kinds(), "own": run(pair.own, member),
           "switched": run(pair.switched, member)}
    dl = pair.switched_device_launch(0); row["switched_dl"] = run(dl, member); dl.close()
    rt = pair.own_round_trip(sorted(pair.node_changes())); row["round_trip"] = run(rt, member); rt.close()
    row["unchanged"] = [pair.update_own_unchanged(f) for f in (0.5, 1.0)]
    row["own_unchanged"] = run(pair.own, member)
    pair.switch_own(to_template=True)
    row["own_as_template"] = run(pair.own, template)
    t = pair.template_exec(); row["template"] = run(t, template); t.close()
    pair.switch_own(to_template=False)
    row["own_back"] = run(pair.own, member)
    rows.append(row)
    pair.close()
from foundry import kernels
images = probe.images_used(p)
walls = probe.load_again_together(images, 2, "again")
again = [kernels.is_loaded("again-" + i.sha256) and all(
    kernels.is_looked_up(kernels.KernelRef("again-" + i.sha256, n)) for n in i.kernels) for i in images]
emit(rows=rows, template=handles[0].group.template.meta.name, walls=walls, again=again,
     kernels=sorted(n for i in images for n in i.kernels))
"""


def test_member_pairs_switch_an_own_exec_both_ways(app_json: JsonRunner, tmp_path: Path) -> None:
    """The switch-penalty probe's pairs (foundry.load.probe.member_pairs): one per member; the member's own
    exec switched to its template's values replays as the template, and switched back as the member; the
    override kinds count each varying kernel node once as arguments-only or by what else differs. And the
    driver probe's parallel image loads."""
    arch = tmp_path / "arch"
    save = run_save(app_json, VARIANTS, arch)
    r = app_json(load_prefix(VARIANTS, arch) + f"\nNAMES = {NAMES!r}\n" + MEMBER_PAIRS)
    assert [row["member"] for row in r["rows"]] == NAMES[1:]
    native = save["native"]
    for row in r["rows"]:
        m = row["member"]
        for key in ("own", "switched", "switched_dl", "round_trip", "own_unchanged", "own_back"):
            assert row[key] == native[m], (m, key)
        assert row["unchanged"] == [2, 3], m  # half of the 3 varying nodes rounds to 2
        assert row["own_as_template"] == row["template"] == native[r["template"]], m
    # The driver probe's images loaded again on two threads, each under its new key, kernels looked up.
    assert len(r["walls"]) == 2 and all(w > 0 for w in r["walls"]) and r["again"] and all(r["again"])
    assert {"fk_axpy_f32", "fk_sum_f32"} <= set(r["kernels"])
    # VARIANTS' members against v0 (each delta holds every node the group varies: memset, kernel, memcpy):
    # v1's kernel another grid and block; v2's another kernel (fewer arguments) and block; v3's the kernel
    # from a library and another block.
    kinds = {row["member"]: row["kinds"] for row in r["rows"]}
    same = {"varying": 3, "other_nodes": 2, "changed": 1, "shared_mem": 0, "args_only": 0}
    assert kinds["v1"] == {**same, "function": 0, "grid": 1, "block": 1, "args_size": 0}
    assert kinds["v2"] == {**same, "function": 1, "grid": 0, "block": 1, "args_size": 1}
    assert kinds["v3"] == {**same, "function": 1, "grid": 0, "block": 1, "args_size": 0}
