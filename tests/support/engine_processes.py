"""The fake engines (fakevllm.py, fakesglang.py) under their plugins on Foundry itself, one engine process each.

Run a function here in a process under the interposer over the fake driver (the ``app_json`` fixture) with
``FOUNDRY_VLLM_*`` or ``FOUNDRY_SGLANG_*`` set, as the engine's process would be started. It installs the
stand-in torch (faketorch.py), puts the fake engine's modules where the plugin's import hooks find them, lets
the plugin's entry point register as the engine calls it, and starts the engine: the plugin builds its
session from the environment and talks to the real ``foundry`` package (``PublicFoundryApi``), which captures,
saves, restores and loads graphs on the fake driver. Then every graph the engine dispatches to runs on two
sets of inputs, and the function returns what they wrote, what the engine did, and the graphs' kinds.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Iterable
from typing import Any

from tests.support import faketorch

INPUT_SETS = 2


def _inputs(k: int, n: int) -> list[float]:
    return [float(k * 1000 + i % 97) for i in range(n)]


def _output(device: Any, forward: Callable[[], Any]) -> str:
    """The first values and a digest of what ``forward`` writes into the tensor it returns: run once, the
    tensor cleared, run again (what a graph does not write is then zero in SAVE and LOAD alike)."""
    device.clear(forward())
    values = device.read(forward())
    return f"{values[:3]} {hashlib.sha256(repr(values).encode()).hexdigest()[:16]}"


def _graph_kinds(graphs: Iterable[Any]) -> list[str]:
    """``captured`` or ``loaded`` for each Foundry graph, the class's module otherwise."""
    kinds = []
    for g in graphs:
        if type(g).__module__ != "foundry.capture.cudagraph":
            kinds.append(type(g).__module__)
        else:
            kinds.append("loaded" if g.meta is not None else "captured")
    return sorted(set(kinds))


def _refused(exc: Exception, trace: list[str]) -> dict[str, Any]:
    """What an engine process that stopped in start-up reports: the error, and how far the engine got."""
    return {"refused": f"{type(exc).__name__}: {exc}", "trace": trace}


def vllm_process(
    runner: str = "v2", cudagraph_mode: str = "FULL_AND_PIECEWISE", workspace: int = 0, tp: int = 1, rank: int = 0
) -> dict[str, Any]:
    """A vLLM worker (V2 or V1 model runner; ``workspace``: the bytes its MoE layers ask of vLLM's workspace;
    ``tp``, ``rank``: the worker of rank ``rank`` of a tensor-parallel engine) through start-up, then each batch
    size on each input set, uniform decode batches (FULL graphs) and mixed ones (piecewise graphs)."""
    faketorch.install()
    from foundry.integration.vllm.plugin import register
    from tests.support.fakevllm import build
    from tests.support.fakevllm_compile import CUDAGraphMode
    from tests.support.fakevllm_config import make_config

    device = faketorch.DeviceMemory()
    fake = build(device)
    sys.modules.update(fake.modules)
    register()  # what vLLM calls in each process it starts
    config = make_config(
        runner,
        cudagraph_mode=CUDAGraphMode[cudagraph_mode],
        workspace=workspace,
        tp=tp,
        disable_custom_all_reduce=tp > 1,
    )
    try:
        worker = fake.start_engine(config, rank=rank)
    except Exception as exc:
        return _refused(exc, fake.trace.events)
    model_runner = worker.model_runner
    outputs = {}
    for k in range(INPUT_SETS):
        device.write(model_runner.input_ids, _inputs(k, 1024))
        for n in config.compilation_config.cudagraph_capture_sizes:
            for uniform in (True, False):
                key = f"{n}{'u' if uniform else 'm'}/{k}"
                outputs[key] = _output(device, lambda n=n, uniform=uniform: model_runner.execute(n, uniform))
    if runner == "v2":
        full, compiled = list(model_runner.cudagraph_manager.graphs.values()), model_runner.model
    else:  # the compiled model inside the FULL graphs' wrapper
        full = [e.cudagraph for e in model_runner.model.concrete_cudagraph_entries.values()]
        compiled = model_runner.model.runnable
    pieces = [e.cudagraph for p in compiled.pieces for e in p.concrete_cudagraph_entries.values()]
    buffer = fake.module("vllm.v1.worker.workspace").current_workspace_manager()._current_workspaces[0]
    return {
        "outputs": outputs,
        "trace": fake.trace.events,
        "graphs": {"full": _graph_kinds(full), "pieces": _graph_kinds(pieces)},
        "workspace": None if buffer is None else buffer.data_ptr(),
    }


def sglang_process(tp: int = 1, rank: int = 0, ep: int = 1) -> dict[str, Any]:
    """An SGLang scheduler (of rank ``rank`` of ``tp``, the experts over ``ep`` of them) through start-up, then each
    prefill token count and decode batch size on each input set (prefill: graph segments with eager attention
    between them)."""
    faketorch.install()
    from tests.support.fakesglang import build, server_args

    device = faketorch.DeviceMemory()
    fake = build(device)
    sys.modules.update(fake.modules)
    args = server_args(tp_size=tp, ep_size=ep, disable_custom_all_reduce=tp > 1)
    try:
        runner = fake.start_scheduler(args, tp_rank=rank)  # loads the plugins, as SGLang's scheduler does
    except Exception as exc:
        return _refused(exc, fake.trace.events)
    prefill, decode = runner.prefill_cuda_graph_runner, runner.decode_cuda_graph_runner
    outputs = {}
    for k in range(INPUT_SETS):
        device.write(prefill.input_ids, _inputs(k, prefill.input_ids.nbytes // 4))
        device.write(decode.input_ids, _inputs(k, decode.input_ids.nbytes // 4))
        for n in prefill.capture_num_tokens:
            outputs[f"prefill{n}/{k}"] = _output(device, lambda n=n: prefill.execute(n))
        for bs in decode.capture_bs:
            outputs[f"decode{bs}/{k}"] = _output(device, lambda bs=bs: decode.execute(bs).next_token_logits)
    segments = [s for g in prefill.backend._graphs.values() for s in g._segments]
    maps = [layer.dispatcher.local_expert_mapping for layer in runner.model.layers]
    from foundry.integration.sglang import session as sessions

    return {
        "warm_up_s": sessions.current().timings.get("warm_up_s"),  # LOAD's warm-up, when it ran
        "outputs": outputs,
        "expert_maps": [m.address if m is not None else None for m in maps],
        "trace": [e for e in fake.trace.events if not e.startswith("attention:")],
        "graphs": {"decode": _graph_kinds(decode.backend._graphs.values()), "prefill": _graph_kinds(segments)},
    }
