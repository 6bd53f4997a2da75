"""What an SGLang archive is compared on (fingerprint.py): every ServerArgs field but the network, front-end,
logging and metrics ones and the per-start random seed, each by name, with the model's config digest and the
software and GPU every engine's fingerprint holds."""

from __future__ import annotations

import dataclasses
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from foundry.integration.sglang.fingerprint import IGNORED, describe, settings
from tests.support.fakesglang import ServerArgs, server_args


class _Opaque:
    pass


def _runner(args: Any) -> Any:
    hf = SimpleNamespace(to_dict=lambda: {"model_type": "qwen3", "hidden_size": 1024})
    return SimpleNamespace(server_args=args, model_config=SimpleNamespace(hf_config=hf, dtype="bf16", context_len=2048))


@pytest.fixture
def fake_torch_and_sglang(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = SimpleNamespace(current_device=lambda: 0, get_device_name=lambda index: "NVIDIA H100 80GB HBM3")
    torch = SimpleNamespace(__version__="2.11.0", version=SimpleNamespace(cuda="13.0"), cuda=cuda)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "sglang", SimpleNamespace(__version__="0.5.17"))


def test_every_setting_is_a_field_of_its_own_but_the_ignored_ones() -> None:
    found = settings(server_args(decode_bs=[1, 2]))
    names = {f.name for f in dataclasses.fields(ServerArgs)}
    assert set(found) == {f"args.{n}" for n in names - IGNORED}
    assert {"args.host", "args.port", "args.nccl_port", "args.log_level", "args.random_seed"}.isdisjoint(found)
    assert (
        '"bs": [1, 2]' in found["args.cuda_graph_config"]
        and '"backend": "breakable"' in found["args.cuda_graph_config"]
    )


def test_a_setting_without_a_stable_text_never_shows_an_address() -> None:
    @dataclasses.dataclass
    class Args:
        loader: Any = dataclasses.field(default_factory=_Opaque)

    assert settings(Args()) == {"args.loader": '"_Opaque"'}


def test_engine_and_server_settings_that_differ_only_in_ignored_fields_match(fake_torch_and_sglang: None) -> None:
    engine = describe(_runner(server_args(log_level="error", port=30000, random_seed=7)))
    server = describe(_runner(server_args(log_level="info", port=30101, nccl_port=4242, random_seed=1234)))
    assert engine.differences(server) == []
    assert engine.as_dict()["gpu"] == "NVIDIA H100 80GB HBM3" and engine.as_dict()["sglang"] == "0.5.17"


def test_a_compared_setting_that_differs_is_named(fake_torch_and_sglang: None) -> None:
    saved = describe(_runner(server_args()))
    here = describe(_runner(server_args(mem_fraction_static=0.6, decode_bs=[1, 2, 4])))
    names = [name for name, _, _ in saved.differences(here)]
    assert names == ["args.mem_fraction_static", "args.cuda_graph_config"]
