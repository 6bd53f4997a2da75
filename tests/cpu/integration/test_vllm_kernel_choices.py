"""Inductor's kernel choices by timing across SAVE and LOAD (foundry/integration/shared/autotune.py), in the fake
vLLM 0.26 with a stand-in of Inductor's runtime autotuner: SAVE records the configuration each kernel kept, and
LOAD, whose own timings would choose another, takes SAVE's without timing; a kernel SAVE never ran is timed as
natively and named."""

from __future__ import annotations

from typing import Any

import pytest

from foundry.integration.shared import autotune
from foundry.integration.shared.autotune import Choice, KernelChoices
from foundry.integration.vllm import ArchiveMetadataError, read_metadata
from foundry.integration.vllm import session as sessions
from foundry.integration.vllm.config import VLLM
from tests.support import fakeinductor
from tests.support.fakefoundry import FakeFoundry
from tests.support.fakevllm_config import make_config

NORM, SOFTCAP, LATE = "f" * 52, "a" * 52, "c" * 52  # kernel keys: the hash naming each kernel's generated file


def _favouring(block: int) -> fakeinductor.Clock:
    """A process whose timings make R0_BLOCK ``block`` the fastest (another process's noise favours another)."""
    return lambda name, blocks: 1.0 if blocks.get("R0_BLOCK") == block else 2.0


def _start(
    engines: Any,
    mode: str,
    clock: fakeinductor.Clock,
    kernels: list[tuple[str, str]],
    cache: dict[str, int] | None = None,
    **kw: Any,
) -> Any:
    """An engine whose profile forward runs ``kernels`` (name, key) for the first time in its process, beside
    Inductor's local autotune cache holding ``cache`` (kernel key -> R0_BLOCK), or no cache."""
    fake = engines.prepare(mode, **kw)
    inductor = fakeinductor.build(clock)
    fakeinductor.inject(inductor, engines.monkeypatch, None if cache is None else fakeinductor.build_cache(cache))
    ran: dict[str, Any] = {}
    runner = fake.module("vllm.v1.worker.gpu.model_runner").GPUModelRunner
    profile_run = runner.profile_run

    def profile_run_with_kernels(self: Any) -> None:
        profile_run(self)
        for name, key in kernels:
            ran[name] = fakeinductor.reduction(inductor, name, key)
            ran[name].run()

    engines.monkeypatch.setattr(runner, "profile_run", profile_run_with_kernels)
    fake.start_engine(make_config("v2"))
    return ran


def test_load_takes_the_configuration_each_kernel_chose_in_save_without_timing_it(engines: Any) -> None:
    saved = _start(engines, "save", _favouring(1024), [("triton_red_norm", NORM), ("triton_red_softcap", SOFTCAP)])
    assert all(k.timed == 1 for k in saved.values())  # SAVE times, as natively
    meta = read_metadata(engines.archive)
    choice = Choice((("R0_BLOCK", 1024), ("XBLOCK", 1)), num_warps=4, num_stages=1)
    assert meta.kernel_choices == KernelChoices(
        {NORM: (("triton_red_norm", choice),), SOFTCAP: (("triton_red_softcap", choice),)}
    )

    # LOAD's own timings favour 512; a kernel SAVE never ran (LATE) chooses by timing, as natively, and is named
    kernels = [("triton_red_norm", NORM), ("triton_red_softcap", SOFTCAP), ("triton_red_late", LATE)]
    loaded = _start(engines, "load", _favouring(512), kernels, memory=FakeFoundry(high_water_saved=meta.high_water))
    assert [loaded[n].launchers[0].config.kwargs["R0_BLOCK"] for n, _ in kernels] == [1024, 1024, 512]
    assert [loaded[n].timed for n, _ in kernels] == [0, 0, 1]
    replay = sessions.current().state.replay
    assert replay is not None
    assert replay.summary() == {"replayed": 2, "timed": ["triton_red_late"], "timed_count": 1, "unmatched": [],
                                "unmatched_count": 0, "cache_reads_declined": 0}  # fmt: skip


def test_neither_save_nor_load_takes_a_choice_from_inductors_cache(engines: Any) -> None:
    """Inductor's local autotune cache (a ``.best_config`` beside each kernel, in the compile cache every process of
    the model loads) holds a choice another process wrote: SAVE times its own and records it, and LOAD, when the
    cache holds yet another, takes SAVE's. Each says how many cached choices it declined."""
    machine = {NORM: 2048, SOFTCAP: 2048}  # the machine's cache, written by an earlier process
    kernels = [("triton_red_norm", NORM), ("triton_red_softcap", SOFTCAP)]

    # natively, a kernel whose choice is cached is made with it alone and times nothing
    fakeinductor.inject(native := fakeinductor.build(_favouring(1024)), engines.monkeypatch,
                        fakeinductor.build_cache(machine))  # fmt: skip
    plain = fakeinductor.reduction(native, "triton_red_norm", NORM)
    assert plain.run().kwargs["R0_BLOCK"] == 2048 and plain.timed == 0

    saved = _start(engines, "save", _favouring(1024), kernels, cache=machine)
    assert [(k.launchers[0].config.kwargs["R0_BLOCK"], k.timed) for k in saved.values()] == [(1024, 1), (1024, 1)]
    meta = read_metadata(engines.archive)
    assert {key: [c.blocks for _, c in chosen] for key, chosen in meta.kernel_choices.kernels.items()} == {
        NORM: [(("R0_BLOCK", 1024), ("XBLOCK", 1))], SOFTCAP: [(("R0_BLOCK", 1024), ("XBLOCK", 1))]}  # fmt: skip
    assert sessions.current().report_fields["cache_reads_declined"] == 2

    machine.update({NORM: 512, SOFTCAP: 512})  # a native process since chose otherwise and wrote it
    loaded = _start(engines, "load", _favouring(2048), kernels, cache=machine,
                    memory=FakeFoundry(high_water_saved=meta.high_water))  # fmt: skip
    assert [(k.launchers[0].config.kwargs["R0_BLOCK"], k.timed) for k in loaded.values()] == [(1024, 0), (1024, 0)]
    replay = sessions.current().state.replay
    assert replay is not None and replay.summary()["replayed"] == 2
    assert replay.summary()["cache_reads_declined"] == 2


def test_a_recorded_configuration_the_kernel_does_not_offer_is_timed_and_named(engines: Any) -> None:
    saved = _start(engines, "save", _favouring(2048), [("triton_red_norm", NORM)])
    assert saved["triton_red_norm"].launchers[0].config.kwargs["R0_BLOCK"] == 2048
    meta = read_metadata(engines.archive)
    fake = engines.prepare("load", memory=FakeFoundry(high_water_saved=meta.high_water))
    inductor = fakeinductor.build(_favouring(512))
    fakeinductor.inject(inductor, engines.monkeypatch)
    fake.start_engine(make_config("v2"))
    # the same kernel key compiled with other configurations (another Inductor would have another key: here forged)
    kernel = inductor.CachingAutotuner("triton_red_norm", NORM, [fakeinductor.Config(R0_BLOCK=r) for r in (512, 256)])
    assert kernel.run().kwargs == {"R0_BLOCK": 512} and kernel.timed == 1
    replay = sessions.current().state.replay
    assert replay is not None and replay.unmatched == ["triton_red_norm"] and replay.replayed == 0


def test_the_choices_round_trip_and_anything_save_never_writes_is_refused_by_name() -> None:
    choice = Choice((("R0_BLOCK", 1024), ("XBLOCK", 1)), num_warps=4, num_stages=1)
    choices = KernelChoices({NORM: (("triton_red_norm", choice),)})
    doc = choices.to_json()
    assert doc == [{"kernel": NORM, "instance": 0, "name": "triton_red_norm", "blocks": {"R0_BLOCK": 1024, "XBLOCK": 1},
                    "num_warps": 4, "num_stages": 1}]  # fmt: skip
    assert KernelChoices.from_json(doc) == choices
    assert KernelChoices.from_json(None) == KernelChoices()  # an archive written before choices were recorded
    entry = doc[0]
    # as first written, without ``instance``: the kernel's first autotuner
    assert KernelChoices.from_json([{k: v for k, v in entry.items() if k != "instance"}]) == choices
    bad = [
        {**entry, "kernel": "../../etc"},
        {**entry, "num_warps": 0},
        {**entry, "num_stages": True},
        {**entry, "blocks": {"R0_BLOCK": -4}},
        {**entry, "blocks": {"import os": 4}},
        {**entry, "extra": 1},
        {**entry, "name": 7},
        {**entry, "instance": -1},
        {**entry, "instance": "0"},
    ]
    for forged in bad:
        with pytest.raises(ArchiveMetadataError, match="Inductor kernel choices"):
            KernelChoices.from_json([forged])
    with pytest.raises(ArchiveMetadataError, match="names its kernel twice"):
        KernelChoices.from_json([entry, entry])
    with pytest.raises(ArchiveMetadataError, match="is not a list"):
        KernelChoices.from_json({"kernel": NORM})
    with pytest.raises(ArchiveMetadataError, match=r"lists autotuners \[0, 2\], not 0 to 1"):
        KernelChoices.from_json([entry, {**entry, "instance": 2}])


def test_a_torch_whose_autotuner_lacks_the_methods_records_nothing_and_says_so(monkeypatch: Any) -> None:
    from types import ModuleType

    module = ModuleType(fakeinductor.MODULE)
    module.CachingAutotuner = type("CachingAutotuner", (), {})  # type: ignore[attr-defined]
    fakeinductor.inject(module, monkeypatch)
    autotune.record(VLLM)
    replay = autotune.replay(KernelChoices(), VLLM)
    assert autotune.missing() == [
        f"{fakeinductor.MODULE}.CachingAutotuner.autotune_to_one_config",
        f"{fakeinductor.MODULE}.CachingAutotuner.benchmark_all_configs",
    ]
    assert autotune.recorded() == KernelChoices() and replay.replayed == 0


def test_a_kernel_made_without_a_file_is_keyed_by_its_source(monkeypatch: Any) -> None:
    """Inductor names a kernel's key after its generated file; one made without a file (``kernel_hash`` empty)
    is keyed by a hash of its function's source, the same in every process, and still replayed."""
    from types import SimpleNamespace

    def kernels(clock: fakeinductor.Clock) -> Any:
        inductor = fakeinductor.build(clock)
        fakeinductor.inject(inductor, monkeypatch)
        kernel = fakeinductor.reduction(inductor, "triton_red_norm", "")
        kernel.fn = SimpleNamespace(src="def triton_red_norm(in_ptr0, out_ptr0, xnumel, r0_numel): ...")
        return kernel

    saving = kernels(_favouring(1024))
    autotune.record(VLLM)
    assert saving.run().kwargs["R0_BLOCK"] == 1024
    choices = autotune.recorded()
    (key,) = choices.kernels
    assert key.startswith("src-") and KernelChoices.from_json(choices.to_json()) == choices
    autotune.forget()
    loading = kernels(_favouring(512))
    replay = autotune.replay(choices, VLLM)
    assert loading.run().kwargs["R0_BLOCK"] == 1024 and loading.timed == 0 and replay.replayed == 1


def test_each_autotuner_of_one_kernel_takes_the_choice_of_its_place_in_save(monkeypatch: Any) -> None:
    """One generated kernel called by two graphs has two autotuners, each timing at its first launch: in SAVE they
    kept different configurations. LOAD's autotuners of that kernel, in the order they first time, take SAVE's in
    the same order; one more than SAVE had is timed, as natively, and named with its place."""
    blocks = iter([1024, 512, 2048, 2048])  # each SAVE autotuner's timings favour the next block size

    def kernels(clock: fakeinductor.Clock, count: int) -> list[Any]:
        inductor = fakeinductor.build(clock)
        fakeinductor.inject(inductor, monkeypatch)
        return [fakeinductor.reduction(inductor, "triton_red_norm", NORM) for _ in range(count)] + [
            fakeinductor.reduction(inductor, "triton_red_sc", SOFTCAP)
        ]

    now = {"block": 0}
    saving = kernels(lambda name, b: 1.0 if b.get("R0_BLOCK") == now["block"] else 2.0, 2)
    autotune.record(VLLM)
    for kernel in saving:
        now["block"] = next(blocks)
        kernel.run()
    saving[0].autotune_to_one_config()  # made to time again: keeps its place and first choice
    choices = autotune.recorded()
    assert {key: [c.blocks for _, c in chosen] for key, chosen in choices.kernels.items()} == {
        NORM: [(("R0_BLOCK", 1024), ("XBLOCK", 1)), (("R0_BLOCK", 512), ("XBLOCK", 1))],
        SOFTCAP: [(("R0_BLOCK", 2048), ("XBLOCK", 1))],
    }
    assert choices.count() == 3 and KernelChoices.from_json(choices.to_json()) == choices
    autotune.forget()

    loading = kernels(_favouring(2048), 3)  # LOAD's own timings would take 2048 everywhere
    replay = autotune.replay(choices, VLLM)
    assert [k.run().kwargs["R0_BLOCK"] for k in (loading[1], loading[0], loading[3], loading[2])] == [
        1024, 512, 2048, 2048]  # fmt: skip
    assert [k.timed for k in loading] == [0, 0, 1, 0]
    assert replay.replayed == 3 and replay.timed == ["triton_red_norm #2"]


def test_save_says_natives_may_differ_when_kernels_chose_by_timing_unless_inductor_is_deterministic(
    engines: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LOAD replays SAVE's choices, but a native process times its own: SAVE names the switch that makes natives
    comparable bit for bit, and says nothing once it is set (Inductor then times nothing that moves numerics)."""
    monkeypatch.delenv("TORCHINDUCTOR_DETERMINISTIC", raising=False)
    with caplog.at_level("INFO"):
        _start(engines, "save", _favouring(1024), [("triton_red_norm", NORM), ("triton_red_softcap", SOFTCAP)])
    notes = [r.getMessage() for r in caplog.records if "chosen by timing" in r.getMessage()]
    assert len(notes) == 1 and "2 Inductor kernel launch configurations" in notes[0], notes
    assert "TORCHINDUCTOR_DETERMINISTIC=1" in notes[0]
    assert autotune.natives_note(2, {"TORCHINDUCTOR_DETERMINISTIC": "1"}) is None
    assert autotune.natives_note(0, {}) is None


def test_kernels_first_launched_while_serving_are_reported_and_logged(
    engines: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A kernel that first launches after start-up (a step outside graphs larger than any before) chooses then: in
    SAVE after the archive was written, which therefore lacks it, and in LOAD after the first report. Each process
    writes its report again with the whole count and logs what LOAD will not (or did not) take from SAVE."""
    import sys

    _start(engines, "save", _favouring(1024), [("triton_red_norm", NORM)])
    meta = read_metadata(engines.archive)
    assert meta.kernel_choices.count() == 1
    with caplog.at_level("WARNING"):
        fakeinductor.reduction(sys.modules[fakeinductor.MODULE], "triton_red_late", LATE).run()
    assert sessions.current().report_fields["kernel_choices_after_save"] == 1
    assert any("after the archive was written" in r.getMessage() for r in caplog.records)
    assert read_metadata(engines.archive).kernel_choices == meta.kernel_choices  # the archive as written

    caplog.clear()
    _start(engines, "load", _favouring(512), [], memory=FakeFoundry(high_water_saved=meta.high_water))
    assert sessions.current().report_fields["kernel_choices"]["replayed"] == 0  # nothing ran before install
    inductor = sys.modules[fakeinductor.MODULE]
    with caplog.at_level("WARNING"):
        served = fakeinductor.reduction(inductor, "triton_red_norm", NORM)
        assert served.run().kwargs["R0_BLOCK"] == 1024 and served.timed == 0  # SAVE's, untimed, while serving
        assert not [r for r in caplog.records if "by timing here" in r.getMessage()]
        fakeinductor.reduction(inductor, "triton_red_late", LATE).run()
    report = sessions.current().report_fields["kernel_choices"]
    assert (report["replayed"], report["timed"]) == (1, ["triton_red_late"])
    timed = [r.getMessage() for r in caplog.records if "by timing here" in r.getMessage()]
    assert len(timed) == 1 and timed[0].startswith("Foundry load: 1 Inductor kernels chose"), timed
