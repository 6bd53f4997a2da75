"""One artifact for a fresh node, in the fake engines (tests/support/fakevllm.py, fakesglang.py) with a stand-in
Triton cache (faketriton.py): SAVE with FOUNDRY_<E>_PACK_CACHES=1 packs the Triton kernels the engine used and
vLLM's AOT compile artifact; LOAD on a machine whose caches are empty copies them out of the signed archive and
points the engine at the copy through its own switches before it compiles, so the engine finds every kernel
and the compiled model there (and only there, even where SAVE's own cache is still on the machine). Caches it
may not use are refused by name and LOAD goes on, the engine compiling as on any fresh machine."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from foundry.integration.sglang import read_metadata as read_sglang_metadata
from foundry.integration.shared import tritoncache
from foundry.integration.vllm import PluginConfigError, UnsupportedConfigError, read_metadata
from tests.support import faketriton
from tests.support.enginecaches import listing, machine, packing
from tests.support.fakefoundry import FakeFoundry
from tests.support.fakesglang import server_args
from tests.support.fakevllm_cache import aot_hash
from tests.support.fakevllm_config import make_config

AOT_DIR = "torch_compile_cache/torch_aot_compile"


def _saves_paths(home: Path) -> dict[str, str]:
    """vLLM's two settings that are paths below the home, with SAVE's values: what a node whose home lies
    elsewhere sets for LOAD to find the compiled model (README, "Ship one artifact to a new node")."""
    return {"VLLM_CONFIG_ROOT": str(home / ".config" / "vllm"),
            "VLLM_XLA_CACHE_PATH": str(home / ".cache" / "vllm" / "xla_cache")}  # fmt: skip


def _save_vllm(engines: Any, monkeypatch: pytest.MonkeyPatch, home: Path, key: Path | None) -> Any:
    packing(monkeypatch, home, key, VLLM_USE_MEGA_AOT_ARTIFACT="1")
    faketriton.jit("other_kernel", "another program")  # another program's kernel, in the same Triton cache
    fake = engines.prepare("save")
    fake.start_engine(make_config(compile_mode="VLLM_COMPILE"))
    monkeypatch.delenv("FOUNDRY_VLLM_PACK_CACHES")
    return fake


def _load_vllm(engines: Any, monkeypatch: pytest.MonkeyPatch, home: Path, key: Path | None, **env: str) -> Any:
    machine(monkeypatch, home)
    if key is not None:
        monkeypatch.setenv("FOUNDRY_SIGNING_KEY", str(key))
    monkeypatch.setenv("VLLM_USE_MEGA_AOT_ARTIFACT", "1")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    fake = engines.prepare("load", FakeFoundry(high_water_saved=read_metadata(engines.archive).high_water))
    fake.start_engine(make_config(compile_mode="VLLM_COMPILE"))
    return fake


def test_save_packs_vllms_aot_artifact_and_only_the_triton_kernels_the_engine_used(
    engines: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: Path
) -> None:
    fake = _save_vllm(engines, monkeypatch, tmp_path / "save-home", key)
    assert "aot_compiled" in fake.trace.events and "triton:compiled" in fake.trace.events
    listed = listing(engines.archive)
    aot = f"{AOT_DIR}/{aot_hash()}"
    assert sorted(listed["vllm"]) == [f"{aot}/inductor_cache/fxgraph.bin", f"{aot}/rank_0_0/model"]
    # the model's kernel, and the sampler's that vLLM's warm-up compiles after capture (packed where start-up ends)
    assert sorted(p.rsplit("/", 1)[1] for p in listed["triton"]) == [
        "__grp___topk_log_softmax_kernel.json", "__grp__triton_poi_fused_add.json",
        "_topk_log_softmax_kernel.cubin", "_topk_log_softmax_kernel.json",
        "triton_poi_fused_add.cubin", "triton_poi_fused_add.json",
    ]  # fmt: skip
    calls = fake.memory.calls
    # the listing is written before the manifest that lists it, and packed again into the finished archive
    assert calls.index("pack_caches") < calls.index("save_manifest") < calls.index("pack_caches again")
    assert fake_session_timings()["caches"]["packed"]["triton"] == 3
    assert fake_session_timings()["caches"]["packed_last"]["triton"] == 6


def test_load_on_a_fresh_node_finds_the_compiled_model_and_kernels_in_the_archives_copy(
    engines: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _save_vllm(engines, monkeypatch, tmp_path / "save-home", key)
    aot = f"{AOT_DIR}/{aot_hash()}"
    caplog.set_level(logging.INFO)
    fake = _load_vllm(engines, monkeypatch, tmp_path / "fresh-home", key, **_saves_paths(tmp_path / "save-home"))
    # vLLM loaded its artifact and Triton found its kernel: nothing compiled on the fresh node
    assert "aot_loaded" in fake.trace.events and "aot_compiled" not in fake.trace.events
    assert "triton:hit" in fake.trace.events
    copy = Path(os.environ["VLLM_CACHE_ROOT"])
    assert copy.name == "vllm" and copy.parent.name.startswith("foundry-caches-")
    assert str(copy).startswith(tempfile_root())
    assert "TRITON_CACHE_DIR" not in os.environ  # Triton's own cache stays the machine's; the copy is read first
    assert Path(os.environ[tritoncache.COPY_ENV]) == copy.parent / "triton"
    assert os.environ["TRITON_CACHE_MANAGER"] == tritoncache.MANAGER
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(copy / aot / "inductor_cache")
    assert "compiled_again" not in fake_session_timings()["caches"] and "compiled it again" not in caplog.text
    # the kernel's files come from the copy, though SAVE's Triton cache is still on this machine
    assert faketriton.jit("triton_poi_fused_add", "inductor kernel") == (
        "hit", str(copy.parent / "triton" / _entry(copy.parent / "triton") / "triton_poi_fused_add.cubin")
    )  # fmt: skip
    assert not [p for p in (tmp_path / "fresh-home").rglob("*") if p.is_file()]  # nothing compiled on this node
    assert "engine caches ['triton', 'vllm'] copied from the archive" in caplog.text


def _entry(triton: Path) -> str:
    return next(p.name for p in triton.iterdir() if (p / "triton_poi_fused_add.cubin").exists())


def tempfile_root() -> str:
    import tempfile

    return tempfile.gettempdir()


def test_load_under_another_home_says_vllm_compiled_again_and_names_the_two_paths(
    engines: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A node whose home lies elsewhere, without SAVE's two paths: vLLM keys the model otherwise and compiles
    it, which LOAD cannot prevent but says, naming the settings to give (the benchmark's first fresh-node run)."""
    _save_vllm(engines, monkeypatch, tmp_path / "save-home", key)
    saved = aot_hash()
    fake = _load_vllm(engines, monkeypatch, tmp_path / "fresh-home", key)
    assert "aot_compiled" in fake.trace.events and "triton:hit" in fake.trace.events  # the kernels still serve
    caches = fake_session_timings()["caches"]
    assert caches["compiled_model_keys"] == [saved] and caches["compiled_again"] == aot_hash() != saved
    here = str(tmp_path / "fresh-home" / ".config" / "vllm")
    assert re_search(rf"vLLM compiled it again.*VLLM_CONFIG_ROOT={here!r}.*VLLM_XLA_CACHE_PATH=.*SAVE's values",
                     caplog.text), caplog.text  # fmt: skip


def test_load_without_the_key_refuses_the_caches_by_name_and_starts_compiling(
    engines: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _save_vllm(engines, monkeypatch, tmp_path / "save-home", key)
    fake = _load_vllm(engines, monkeypatch, tmp_path / "fresh-home", None)
    assert "aot_compiled" in fake.trace.events and "triton:compiled" in fake.trace.events
    assert "VLLM_CACHE_ROOT" not in os.environ and "TRITON_CACHE_DIR" not in os.environ
    assert re_search(r"engine caches are not used: .*no key is configured.*FOUNDRY_SIGNING_KEY.*LOAD goes on without "
                     r"them", caplog.text)  # fmt: skip
    assert "no key is configured" in fake_session_timings()["caches"]["refused"]


def test_load_with_another_compile_setting_refuses_the_caches_naming_it(
    engines: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _save_vllm(engines, monkeypatch, tmp_path / "save-home", key)
    fake = _load_vllm(engines, monkeypatch, tmp_path / "fresh-home", key, VLLM_USE_MEGA_AOT_ARTIFACT="0")
    assert "aot_compiled" in fake.trace.events
    assert "vllm_mega_aot_artifact: saved 'True', here 'False'" in caplog.text


def test_save_refuses_to_pack_without_a_signing_key_before_start_up(
    engines: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(PluginConfigError, match=r"FOUNDRY_VLLM_PACK_CACHES=1 packs compiled code.*FOUNDRY_SIGNING_KEY"):
        _save_vllm(engines, monkeypatch, tmp_path / "save-home", None)
    assert not engines.archive.exists()


def test_save_refuses_a_compile_cache_that_cannot_move(
    engines: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: Path
) -> None:
    packing(monkeypatch, tmp_path / "save-home", key)
    fake = engines.prepare("save")
    with pytest.raises(UnsupportedConfigError, match=r"mega AOT artifact: set VLLM_USE_MEGA_AOT_ARTIFACT=1"):
        fake.start_engine(make_config(compile_mode="VLLM_COMPILE"))


def test_save_refuses_another_triton_cache_manager(
    engines: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: Path
) -> None:
    packing(monkeypatch, tmp_path / "save-home", key, TRITON_CACHE_MANAGER="remote.cache:Manager")
    fake = engines.prepare("save")
    with pytest.raises(PluginConfigError, match=r"TRITON_CACHE_MANAGER='remote\.cache:Manager' replaces"):
        fake.start_engine(make_config())


def test_a_bad_pack_setting_is_named(engines: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOUNDRY_VLLM_PACK_CACHES", "maybe")
    with pytest.raises(PluginConfigError, match=r"FOUNDRY_VLLM_PACK_CACHES='maybe' is not 1 or 0"):
        engines.prepare("save")


def test_sglang_packs_its_triton_kernels_and_a_fresh_load_finds_them(
    sglang_engines: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: Path
) -> None:
    packing(monkeypatch, tmp_path / "save-home", key, "SGLANG")
    fake = sglang_engines.prepare("save")
    fake.start_scheduler(server_args())
    assert "triton:compiled" in fake.trace.events
    assert sorted(p.rsplit("/", 1)[1] for p in listing(sglang_engines.archive)["triton"]) == [
        "__grp___fwd_kernel.json", "_fwd_kernel.cubin", "_fwd_kernel.json",
    ]  # fmt: skip
    monkeypatch.delenv("FOUNDRY_SGLANG_PACK_CACHES")
    machine(monkeypatch, tmp_path / "fresh-home")
    monkeypatch.setenv("FOUNDRY_SIGNING_KEY", str(key))
    high_water = read_sglang_metadata(sglang_engines.archive).high_water
    fake = sglang_engines.prepare("load", FakeFoundry(high_water_saved=high_water))
    fake.start_scheduler(server_args())
    assert "triton:hit" in fake.trace.events and "open_caches" in fake.memory.calls
    assert Path(os.environ[tritoncache.COPY_ENV]).name == "triton"


def re_search(pattern: str, text: str) -> bool:
    import re

    return re.search(pattern, text, re.S) is not None


def fake_session_timings() -> dict[str, Any]:
    from foundry.integration.vllm import session as sessions

    return sessions.current().timings


def test_sglang_packs_the_jit_modules_it_loaded_and_a_fresh_load_loads_them_without_building(
    sglang_engines: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: Path
) -> None:
    """SGLang's tvm-ffi JIT modules: SAVE packs the shared objects its scheduler loaded from the cache, not the
    other programs' modules beside them; LOAD on a fresh node points tvm-ffi at the copy, where SGLang finds the
    module built, and the machine's own modules are linked in beside it."""
    from foundry.integration.shared import tvmcache
    from tests.support import fakejit

    monkeypatch.setenv("FAKE_SGLANG_JIT", "1")
    packing(monkeypatch, tmp_path / "save-home", key, "SGLANG")
    other = fakejit.folder("another_programs")  # in the machine's cache, never loaded by this engine
    other.mkdir(parents=True)
    (other / "sgl_kernel_jit_another_programs.so").write_bytes(b"\x7fELF")
    try:
        fake = sglang_engines.prepare("save")
        fake.start_scheduler(server_args())
        assert "jit:built" in fake.trace.events
        assert listing(sglang_engines.archive)[tvmcache.TVM_FFI] == [
            "sgl_kernel_jit_fused_norm__arch_sm90__tvmffi_0.1.11/sgl_kernel_jit_fused_norm.so"
        ]
    finally:
        fakejit.unload()
    monkeypatch.delenv("FOUNDRY_SGLANG_PACK_CACHES")
    machine(monkeypatch, tmp_path / "fresh-home")
    monkeypatch.setenv("FOUNDRY_SIGNING_KEY", str(key))
    own = fakejit.folder("this_machines")  # built on this machine before: LOAD must not hide it
    own.mkdir(parents=True)
    high_water = read_sglang_metadata(sglang_engines.archive).high_water
    try:
        fake = sglang_engines.prepare("load", FakeFoundry(high_water_saved=high_water))
        fake.start_scheduler(server_args())
        assert "jit:hit" in fake.trace.events and "jit:built" not in fake.trace.events
    finally:
        fakejit.unload()
    copy = Path(os.environ[tvmcache.CACHE_ENV])
    assert copy.name == tvmcache.TVM_FFI and copy != own.parent
    assert (copy / own.name).resolve() == own.resolve()
