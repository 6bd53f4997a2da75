"""The engine caches past the archive's writing, in the fake engines with the stand-in Triton (faketriton.py):
kernels the engine compiles after capture (SGLang's first request here; vLLM's warm-up step in
test_engine_caches_plugins.py) are packed into the finished archive, whose manifest lists them signed, so a fresh
node finds them; a LOAD on a warm machine reads its own Triton cache beside the archive's copy and keeps what it
compiles, as native does; a pack that is refused leaves the archive as it was. And before the engine process: vLLM's
model-info file of the model, packed by SAVE, is where vLLM's front end looks for it as LOAD registers the plugin."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

import foundry
from foundry.integration.sglang import read_metadata
from foundry.integration.sglang import session as sessions
from foundry.integration.shared import caches, tritoncache
from foundry.schema import CACHES_DOCUMENT
from tests.support import faketriton
from tests.support.enginecaches import listing, machine, packing
from tests.support.fakefoundry import FakeFoundry
from tests.support.fakesglang import server_args


def _save(sglang_engines: Any, monkeypatch: pytest.MonkeyPatch, home: Path, key: Path) -> caches.Keeper:
    packing(monkeypatch, home, key, "SGLANG")
    sglang_engines.prepare("save").start_scheduler(server_args())
    keeper = sessions.current().keeper
    assert isinstance(keeper, caches.Keeper)
    keeper.stop()  # its thread ends: the test decides when it packs (poll, flush)
    return keeper


def _load(sglang_engines: Any, monkeypatch: pytest.MonkeyPatch, home: Path, key: Path) -> Any:
    monkeypatch.delenv("FOUNDRY_SGLANG_PACK_CACHES", raising=False)
    machine(monkeypatch, home)
    monkeypatch.setenv("FOUNDRY_SIGNING_KEY", str(key))
    memory = FakeFoundry(high_water_saved=read_metadata(sglang_engines.archive).high_water)
    fake = sglang_engines.prepare("load", memory)
    fake.start_scheduler(server_args())
    return fake


def _names(archive: Path) -> list[str]:
    return sorted(p.rsplit("/", 1)[1] for p in listing(archive)["triton"])


def test_a_kernel_compiled_at_the_first_request_is_packed_into_the_finished_archive_for_a_fresh_node(
    sglang_engines: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: Path
) -> None:
    keeper = _save(sglang_engines, monkeypatch, tmp_path / "save-home", key)
    assert _names(sglang_engines.archive) == ["__grp___fwd_kernel.json", "_fwd_kernel.cubin", "_fwd_kernel.json"]
    assert keeper.poll(0.0) is False  # nothing compiled since the archive was written
    assert faketriton.jit("_sample_kernel", "sampling")[0] == "compiled"  # the first request's sampling kernel
    assert keeper.poll(10.0) is False  # the compile just seen: its files may still be coming
    assert keeper.poll(10.5) is False  # not quiet for a second yet
    assert keeper.poll(11.0) is True and keeper.repacks == 1
    assert keeper.poll(20.0) is False  # nothing new
    assert _names(sglang_engines.archive) == [
        "__grp___fwd_kernel.json", "__grp___sample_kernel.json", "_fwd_kernel.cubin", "_fwd_kernel.json",
        "_sample_kernel.cubin", "_sample_kernel.json",
    ]  # fmt: skip
    assert read_metadata(sglang_engines.archive).graphs  # the graphs' metadata still listed, under the same key
    report = sessions.current().timings["caches"]
    assert report["packed"] == {"triton": 3} and report["packed_last"] == {"triton": 6}
    assert report["triton_kernels"] == ["_fwd_kernel", "_sample_kernel"]  # what the archive holds now, by name

    fake = _load(sglang_engines, monkeypatch, tmp_path / "fresh-home", key)
    assert "triton:hit" in fake.trace.events
    assert faketriton.jit("_sample_kernel", "sampling")[0] == "hit"  # the first request compiles nothing here
    assert not [p for p in (tmp_path / "fresh-home").rglob("*") if p.is_file()]


def test_a_jit_module_loaded_at_the_first_request_is_packed_into_the_finished_archive(
    sglang_engines: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: Path
) -> None:
    """SGLang builds some tvm-ffi modules only when a request first asks for them, beside a Triton compile (its
    first request built ``clamp_position`` and compiled a kernel within a tenth of a second, H200): the keeper
    sees the module loaded into the process and packs both at once, and a fresh node's first request then builds
    nothing."""
    from foundry.integration.shared import tvmcache
    from tests.support import fakejit

    try:
        keeper = _save(sglang_engines, monkeypatch, tmp_path / "save-home", key)
        assert tvmcache.TVM_FFI not in listing(sglang_engines.archive)
        assert fakejit.load_jit("topk_sampling") == "built"  # the first request's sampling kernel
        assert faketriton.jit("_sample_kernel", "sampling")[0] == "compiled"  # and a Triton kernel beside it
        # packed as soon as seen: a module is whole once loaded, and SGLang may be stopped a second after the
        # request that built it (no quiet second as for Triton's files alone)
        assert keeper.poll(10.0) is True and keeper.repacks == 1
        assert keeper.poll(10.25) is False
        assert "__grp___sample_kernel.json" in _names(sglang_engines.archive)
        from foundry.integration.sglang.caches import PLAN

        before, module = ((1, 0), ()), ("/c/m__arch_sm90/m.so",)
        assert PLAN.whole(before, ((2, 1), module))  # a module loaded, a Triton compile beside it or not
        assert PLAN.whole(before, ((1, 0), module))
        assert not PLAN.whole(before, ((2, 1), ()))  # a Triton compile alone: its files may still be coming
        (path,) = listing(sglang_engines.archive)[tvmcache.TVM_FFI]
        assert path.endswith("/sgl_kernel_jit_topk_sampling.so")
    finally:
        fakejit.unload()
    _load(sglang_engines, monkeypatch, tmp_path / "fresh-home", key)
    try:
        assert fakejit.load_jit("topk_sampling") == "hit"
    finally:
        fakejit.unload()
    assert not [p for p in (tmp_path / "fresh-home").rglob("*") if p.is_file()]


def test_load_on_a_warm_machine_reads_its_own_kernels_beside_the_archives_and_keeps_what_it_compiles(
    sglang_engines: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: Path
) -> None:
    home = tmp_path / "home"
    _save(sglang_engines, monkeypatch, home, key).flush()
    machine(monkeypatch, home)
    _, own = faketriton.jit("_decode_kernel", "compiled natively, after SAVE")  # on this machine, not in the archive
    fake = _load(sglang_engines, monkeypatch, home, key)
    copy = Path(os.environ[tritoncache.COPY_ENV])
    assert "triton:hit" in fake.trace.events
    assert faketriton.jit("_fwd_kernel", "triton attention")[1].startswith(str(copy))  # the archive's, from the copy
    assert faketriton.jit("_decode_kernel", "compiled natively, after SAVE") == ("hit", own)  # the machine's own
    status, path = faketriton.jit("_new_kernel", "first compiled under LOAD")
    assert status == "compiled" and path.startswith(str(home)) and not path.startswith(str(copy))
    assert Path(path).is_file()  # in the machine's own cache: it outlives the copy, as a native compile does


def test_an_entry_the_copy_holds_only_in_part_is_read_from_the_machines_own_cache(tmp_path: Path) -> None:
    own, copy = tmp_path / "own", tmp_path / "copy"
    for d in (own, copy):
        d.mkdir()
    assert tritoncache.from_copy(str(tmp_path / "absent"), str(own)) is False
    assert tritoncache.from_copy(str(copy), str(own)) is False  # empty
    (copy / "k.cubin").write_bytes(b"cubin")
    assert tritoncache.from_copy(str(copy), str(own)) is True  # the machine has nothing better
    (own / "__grp__k.json").write_text("{}")
    assert tritoncache.from_copy(str(copy), str(own)) is False  # the machine's entry is whole, the copy's is not
    (copy / "__grp__k.json").write_text("{}")
    assert tritoncache.from_copy(str(copy), str(own)) is True


def test_a_pack_that_is_refused_is_named_and_the_archive_keeps_the_caches_packed_before(
    sglang_engines: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: Path, caplog: pytest.LogCaptureFixture
) -> None:
    keeper = _save(sglang_engines, monkeypatch, tmp_path / "save-home", key)
    listed, manifest = (sglang_engines.archive / CACHES_DOCUMENT).read_bytes(), _manifest(sglang_engines.archive)
    faketriton.jit("_sample_kernel", "sampling")
    monkeypatch.delenv("FOUNDRY_SIGNING_KEY")  # the key file went away: the manifest cannot be signed again
    caplog.set_level(logging.WARNING)
    assert keeper.flush() is False
    assert "not added to its caches" in caplog.text and "no signing key is configured" in caplog.text
    assert (sglang_engines.archive / CACHES_DOCUMENT).read_bytes() == listed
    assert _manifest(sglang_engines.archive) == manifest
    monkeypatch.setenv("FOUNDRY_SIGNING_KEY", str(key))
    faketriton.jit("_other_kernel", "later")
    assert keeper.flush() is False  # keeping ended with the refusal
    dest = tmp_path / "node"
    assert foundry.open_engine_caches(sglang_engines.archive, _identity(sglang_engines.archive), dest) is not None


def _manifest(archive: Path) -> bytes:
    return (archive / "graph_manifest.json").read_bytes()


def _identity(archive: Path) -> dict[str, str]:
    return dict(foundry.read_archive_document(archive, CACHES_DOCUMENT)["identity"])


QWEN3_INFO = "vllm-model_executor-models-qwen3-Qwen3ForCausalLM.json"


def _save_vllm_with_model_info(engines: Any, monkeypatch: pytest.MonkeyPatch, home: Path, key: Path) -> None:
    """A vLLM SAVE whose front end resolved the model's class into vLLM's model-info cache, beside another model's."""
    from tests.support.fakevllm_config import make_config

    infos = home / ".cache" / "vllm" / "modelinfos"
    infos.mkdir(parents=True)
    (infos / QWEN3_INFO).write_text('{"hash": "abc", "modelinfo": {"is_text_generation_model": true}}')
    (infos / "vllm-model_executor-models-llama-LlamaForCausalLM.json").write_text('{"hash": "other"}')
    packing(monkeypatch, home, key, VLLM_USE_MEGA_AOT_ARTIFACT="1")
    engines.prepare("save").start_engine(make_config(compile_mode="VLLM_COMPILE", architectures=["Qwen3ForCausalLM"]))
    monkeypatch.delenv("FOUNDRY_VLLM_PACK_CACHES")


def test_vllms_model_info_is_packed_and_a_fresh_front_end_finds_it_before_it_resolves_the_model(
    engines: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from foundry.integration.vllm.plugin import register

    _save_vllm_with_model_info(engines, monkeypatch, tmp_path / "save-home", key)
    assert [p for p in listing(engines.archive)["vllm"] if p.startswith("modelinfos/")] == [f"modelinfos/{QWEN3_INFO}"]

    fresh = tmp_path / "fresh-home"
    machine(monkeypatch, fresh)
    monkeypatch.setenv("FOUNDRY_SIGNING_KEY", str(key))
    caplog.set_level(logging.INFO, logger="vllm.foundry")
    # a LOAD process: vLLM registers the plugin while it parses its arguments, before it resolves the model's class
    engines.prepare("load")
    seeded = fresh / ".cache" / "vllm" / "modelinfos" / QWEN3_INFO
    assert seeded.read_bytes() == (tmp_path / "save-home" / ".cache" / "vllm" / "modelinfos" / QWEN3_INFO).read_bytes()
    assert sorted(p.name for p in seeded.parent.iterdir()) == [QWEN3_INFO]
    assert f"model-info cache seeded from the archive ({QWEN3_INFO})" in caplog.text

    # every vLLM process registers the plugin; the front end's children inherit its environment and read nothing
    read = foundry.read_engine_cache_files
    monkeypatch.setattr(foundry, "read_engine_cache_files", lambda *a, **k: pytest.fail("read again in a child"))
    register()
    monkeypatch.setattr(foundry, "read_engine_cache_files", read)
    # another process of the machine (no seeding inherited): a file already there is the machine's, left as it is
    monkeypatch.delenv("FOUNDRY_VLLM_MODEL_INFO_SEEDED")
    seeded.write_text("this machine's own")
    register()
    assert seeded.read_text() == "this machine's own"


def test_without_a_key_the_model_info_is_not_read_and_vllm_inspects_the_class_itself(
    engines: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: Path
) -> None:
    _save_vllm_with_model_info(engines, monkeypatch, tmp_path / "save-home", key)
    fresh = tmp_path / "fresh-home"
    machine(monkeypatch, fresh)  # no FOUNDRY_SIGNING_KEY
    engines.prepare("load")  # registers the plugin, as vLLM does
    assert not (fresh / ".cache" / "vllm" / "modelinfos").exists()


def test_a_damaged_model_info_file_is_named_and_vllm_inspects_the_class_itself(
    engines: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _save_vllm_with_model_info(engines, monkeypatch, tmp_path / "save-home", key)
    info = (tmp_path / "save-home" / ".cache" / "vllm" / "modelinfos" / QWEN3_INFO).read_bytes()
    blob = next(p for p in (engines.archive / "caches").iterdir() if p.read_bytes() == info)
    blob.write_bytes(info.replace(b"true", b"fals"))  # same size, other bytes
    fresh = tmp_path / "fresh-home"
    machine(monkeypatch, fresh)
    monkeypatch.setenv("FOUNDRY_SIGNING_KEY", str(key))
    caplog.set_level(logging.WARNING, logger="vllm.foundry")
    engines.prepare("load")  # registers the plugin: the refusal is logged, vLLM's start goes on
    assert "model-info cache is not seeded from the archive" in caplog.text and "has SHA-256" in caplog.text
    assert not (fresh / ".cache" / "vllm" / "modelinfos" / QWEN3_INFO).exists()


def test_copies_left_by_killed_load_processes_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    """SGLang ends its scheduler with SIGKILL, so a LOAD's exit handler never removes its copy of the caches:
    the next LOAD removes the copies of processes that are gone, and nothing else."""
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    dead = tmp_path / f"foundry-caches-{dead_pid}-0a1b2c3d4e5f"
    (dead / "triton" / "entry").mkdir(parents=True)
    (dead / "triton" / "entry" / "k.cubin").write_bytes(b"x")
    live = tmp_path / f"foundry-caches-{os.getpid()}-0a1b2c3d4e5f"
    live.mkdir()
    others = [tmp_path / "foundry-caches-notapid-1", tmp_path / "unrelated-123"]
    for other in others:
        other.mkdir()
    link = tmp_path / f"foundry-caches-{dead_pid}-linked"
    link.symlink_to(others[1], target_is_directory=True)
    log = logging.getLogger("test")
    assert caches.sweep_stale_copies(tmp_path, log) == 1
    assert not dead.exists() and live.is_dir() and all(o.is_dir() for o in others) and link.is_symlink()
    assert caches.sweep_stale_copies(tmp_path / "missing", log) == 0
