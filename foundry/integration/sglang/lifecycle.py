"""What SAVE and LOAD do at each phase of SGLang's start-up in its scheduler process. The hooks (patches.py)
only route SGLang's calls here, as HookRegistry AROUND hooks (``hook(original, *args, **kwargs)``).

Scheduler.init_model_worker, and what each mode does there (phases in quotes, SAVE records them, LOAD checks):

  init_model_worker       refuse unsupported settings; put the hooks below on the model runner's modules
  ModelRunner.init_torch_distributed
                          before: compare the archive (LOAD), load its kernel images (LOAD), set the allocation
                          region (both); after: the custom all-reduce recorded (SAVE) or its setting compared
                          (LOAD) (allreduce.py), "distributed"
  ModelRunner.load_model  weights, "load_model": LOAD then starts building the graphs in the background (which
                          maps SAVE's memory) and goes back to SAVE's cursor
  KVCacheConfigurator._profile_available_bytes
                          SAVE keeps SGLang's measurement; LOAD releases the allocator's cache as the measurement
                          would, and answers SAVE's number
  ModelRunner.alloc_memory_pool        KV cache and request pools, "memory_pool"; LOAD checks the pool's size
  ModelRunner.init_attention_backends  "attention_backends"
  ModelRunner.init_cuda_graphs         expert parallel: the MoE layers' expert maps (moe.py), "expert_maps";
                                       SAVE captures with Foundry, then writes the archive; LOAD checks every
                                       saved graph went to a runner, writes the custom all-reduce's rows again,
                                       then (unless FOUNDRY_SGLANG_WARM_UP=0) replays the smallest prefill graph
                                       once (warmup.py)
    should_skip_auto_prefill_cuda_graph_for_memory   LOAD answers what SAVE's gate answered
    PrefillCudaGraphRunner.capture     "prefill_buffers" (the eager and prefill runners' buffers, the shared
                                       logits buffer); SAVE captures, "prefill_capture"; LOAD installs the
                                       breakable graphs and moves the cursor past what SAVE's capture took
    DecodeCudaGraphRunner.__init__ .. capture        "decode_buffers", isolated (steps.isolated_phase): SAVE
                                       captures, "decode_capture"; LOAD installs the full graphs and moves the
                                       cursor past SAVE's memory

Each runner captures on a stream of its own, made for the capture (``graph_capture()``), and PyTorch's caching
allocator serves a stream only from segments made on it: whatever the capture allocates outside the graph pool
(warm-up activations, cuBLAS's workspace for that stream, the breakable backend's output buffer) lies in
segments made during the capture, a span of the region LOAD maps from SAVE and never allocates from.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time
from contextlib import ExitStack
from typing import Any

from ..shared import allreduce as shared_allreduce
from ..shared import steps
from ..shared.capture import foundry_capture, foundry_device_module
from ..shared.errors import ArchiveMismatchError, UnsupportedConfigError
from ..shared.ranks import Place
from . import allreduce, graphs, moe, warmup
from . import session as sessions
from .config import SGLANG, Mode
from .fingerprint import describe
from .support import check_supported

__all__ = [
    "alloc_memory_pool",
    "capture_decode",
    "capture_prefill",
    "decode_runner_init",
    "init_attention_backends",
    "init_cuda_graphs",
    "init_model_worker",
    "init_torch_distributed",
    "load_model",
    "prefill_memory_gate",
    "profile_available_bytes",
]

# A child of SGLang's logger: these lines go where SGLang's go.
log = logging.getLogger(SGLANG.logger)

KV_MODULE = "sglang.srt.mem_cache.kv_cache_configurator"


def _active(model_runner: Any = None) -> sessions.Session | None:
    """This process's session when the plugin is on (and the runner is the target model's, not a draft's)."""
    s = sessions.current()
    if not s.config.enabled or getattr(model_runner, "is_draft_worker", False):
        return None
    return s


def init_model_worker(original: Any, scheduler: Any, *args: Any, **kwargs: Any) -> Any:
    s = sessions.current()  # raises PluginConfigError for malformed FOUNDRY_SGLANG_* variables
    if s.config.enabled:
        check_supported(scheduler.server_args, os.environ)
        from .patches import install_model_hooks

        t0 = time.perf_counter()
        install_model_hooks()
        s.timings["install_hooks_s"] = time.perf_counter() - t0
    return original(scheduler, *args, **kwargs)


def _place(runner: Any) -> Place:
    """The runner's rank in tensor parallel (with expert parallel over it, the only parallelism support.py lets
    through): SGLang keeps it in the runner's parallel state (``ps``), with the server arguments' ``tp_size``."""
    state = getattr(runner, "ps", runner)
    world = int(getattr(state, "tp_size", None) or getattr(runner.server_args, "tp_size", 1) or 1)
    return Place(int(getattr(state, "tp_rank", 0) or 0), world)


def init_torch_distributed(original: Any, runner: Any, *args: Any, **kwargs: Any) -> Any:
    s = _active(runner)
    if s is not None:
        steps.begin(s, describe(runner), _place(runner))
        log.info("Foundry %s: region set, archive %s", s.config.mode.value, s.archive)
    result = original(runner, *args, **kwargs)
    if s is not None:
        allreduce.attach(s, allreduce.find())  # SGLang's set-up made it, or none
        steps.end_phase(s, "distributed")
    return result


def _then_end_phase(name: str, original: Any, runner: Any, args: Any, kwargs: Any) -> tuple[Any, Any]:
    """Runs SGLang's ``original``, then ends phase ``name`` (LOAD checks it); (its result, the session or None)."""
    result = original(runner, *args, **kwargs)
    s = _active(runner)
    if s is not None:
        steps.end_phase(s, name)
    return result, s


def load_model(original: Any, runner: Any, *args: Any, **kwargs: Any) -> Any:
    result, s = _then_end_phase("load_model", original, runner, args, kwargs)
    if s is not None and s.config.mode is Mode.LOAD:
        steps.start_builds(s)  # maps SAVE's memory and moves the cursor past it
        steps.resume_at(s, "load_model")
    return result


def profile_available_bytes(original: Any, configurator: Any, *args: Any, **kwargs: Any) -> Any:
    s = _active(configurator)
    if s is None or s.config.mode is Mode.SAVE:
        value = original(configurator, *args, **kwargs)
        if s is not None:
            s.state.available_bytes = int(value)
        return value
    # SGLang measures free memory after releasing the caching allocator's cache; LOAD releases it the same way
    # (the next phase's allocations depend on it) but answers SAVE's measurement: here SAVE's memory is mapped.
    sys.modules[KV_MODULE].get_available_gpu_memory(configurator.device, configurator.gpu_id)
    value = s.require_saved().available_bytes
    log.info("Foundry load: memory profiling skipped, KV cache budget %d bytes as saved", value)
    return value


def alloc_memory_pool(original: Any, runner: Any, *args: Any, **kwargs: Any) -> Any:
    result = original(runner, *args, **kwargs)
    s = _active(runner)
    if s is not None:
        pool = (int(runner.max_total_num_tokens), int(runner.max_running_requests))
        if s.config.mode is Mode.SAVE:
            s.state.pool = pool
        else:
            saved = s.require_saved()
            if pool != (saved.max_total_num_tokens, saved.max_running_requests):
                raise ArchiveMismatchError(
                    f"the KV pool holds {pool[0]} tokens for {pool[1]} requests here but {saved.max_total_num_tokens} "
                    f"for {saved.max_running_requests} in SAVE, from the same {saved.available_bytes} bytes: page "
                    "size, KV cache dtype or the model differ. Start with SAVE's settings, or run SAVE again."
                )
        steps.end_phase(s, "memory_pool")
    return result


def init_attention_backends(original: Any, runner: Any, *args: Any, **kwargs: Any) -> Any:
    return _then_end_phase("attention_backends", original, runner, args, kwargs)[0]


def prefill_memory_gate(original: Any, *args: Any, **kwargs: Any) -> Any:
    """SGLang skips prefill graphs when little memory is free before capture; under LOAD SAVE's memory is mapped,
    so LOAD answers what SAVE's gate answered."""
    s = _active()
    if s is not None and s.config.mode is Mode.LOAD and s.require_saved().prefill_gate_skip is not None:
        return s.require_saved().prefill_gate_skip
    value = original(*args, **kwargs)
    if s is not None and s.config.mode is Mode.SAVE:
        s.state.prefill_gate_skip = bool(value)
    return value


# ---------------------------------------------------------------------------------------------- the graphs
def init_cuda_graphs(original: Any, runner: Any, *args: Any, **kwargs: Any) -> Any:
    s = _active(runner)
    if s is None:
        return original(runner, *args, **kwargs)
    if (getattr(runner.server_args, "ep_size", 1) or 1) > 1:
        made = moe.build_expert_maps(runner.model)
        steps.end_phase(s, "expert_maps")
        log.info("Foundry %s: %d MoE layers' expert maps built before the graphs", s.config.mode.value, made)
    if s.config.mode is Mode.LOAD:
        result = original(runner, *args, **kwargs)
        _check_all_installed(s)
        steps.past_saved_memory(s)
        # every runner has its graphs and none has replayed: the custom all-reduce's rows before the warm-up's
        rows = allreduce.install(s, allreduce.find())
        if s.config.warm_up:
            seconds = warmup.warm_prefill(runner)
            if seconds is not None:
                s.timings["warm_up_s"] = seconds
                log.info("Foundry load: prefill warm-up (one replay of the smallest graph) in %.3f s", seconds)
        _report(s, custom_all_reduce_rows=rows)
        return result
    with ExitStack() as stack:
        for module in (graphs.FULL_MODULE, graphs.BREAKABLE_MODULE):
            importlib.import_module(module)
            stack.enter_context(foundry_capture(module, s.api, SGLANG))
        stack.enter_context(shared_allreduce.keeping(s.state.allreduce))  # the rows the saved graphs read
        result = original(runner, *args, **kwargs)
    _save(s)
    return result


def _first_capture(s: sessions.Session | None, name: str) -> bool:
    """Whether this runner's capture is the one of start-up (a later one, after SAVE wrote the archive, is
    SGLang's own business; after LOAD it is refused)."""
    if s is None:
        return False
    if name in s.state.loaded_runners:
        raise UnsupportedConfigError(
            f"SGLang is capturing its {name} CUDA graphs again after LOAD gave it the archive's (weights updated, or "
            "the graphs were rebuilt): those graphs would be made behind Foundry's back. Restart SGLang, or run it "
            "with FOUNDRY_SGLANG_MODE=off."
        )
    return all(r != name for r, _ in s.state.captured)


def capture_prefill(original: Any, runner: Any, *args: Any, **kwargs: Any) -> Any:
    s = _active(runner.model_runner)
    if s is None or not _first_capture(s, "prefill"):
        return original(runner, *args, **kwargs)
    # The logits buffer every runner shares is made when first asked for: in SAVE by the prefill capture, in
    # LOAD by the decode runner. Asked for here, it lies in the same place in both.
    runner._next_token_logits_buffer(1)
    steps.end_phase(s, "prefill_buffers")
    if s.config.mode is Mode.SAVE:
        return _timed_capture(s, "prefill", runner, lambda: original(runner, *args, **kwargs))
    _load_runner(s, "prefill", runner)
    steps.resume_at(s, "prefill_capture")  # past the memory SAVE's capture took: the graphs use it
    return None


def decode_runner_init(original: Any, runner: Any, *args: Any, **kwargs: Any) -> Any:
    s = _active(args[0] if args else kwargs.get("model_runner"))
    if s is None or "decode" in s.state.loaded_runners or any(r == "decode" for r, _ in s.state.captured):
        return original(runner, *args, **kwargs)
    if s.config.mode is Mode.LOAD:
        _check_all_installed(s, ("prefill",))  # SGLang builds the prefill runner first
    phase = ExitStack()
    phase.enter_context(steps.isolated_phase(s, "decode_buffers"))
    s.state.decode_phase = phase
    try:
        return original(runner, *args, **kwargs)
    except BaseException:
        s.state.decode_phase = None
        phase.__exit__(*sys.exc_info())
        raise
    finally:
        _end_decode_buffers(s)


def _end_decode_buffers(s: sessions.Session) -> None:
    phase, s.state.decode_phase = s.state.decode_phase, None
    if phase is not None:
        phase.close()


def capture_decode(original: Any, runner: Any, *args: Any, **kwargs: Any) -> Any:
    s = _active(runner.model_runner)
    if s is not None:
        _end_decode_buffers(s)  # the runner's buffers are made; the capture must not allocate from their pool
    if s is None or not _first_capture(s, "decode"):
        return original(runner, *args, **kwargs)
    if s.config.mode is Mode.SAVE:

        def capture() -> Any:
            with foundry_device_module(runner.backend, "_device_module", s.api, SGLANG):
                return original(runner, *args, **kwargs)

        return _timed_capture(s, "decode", runner, capture)
    _load_runner(s, "decode", runner)
    steps.past_saved_memory(s)
    return None


def _timed_capture(s: sessions.Session, name: str, runner: Any, capture: Any) -> Any:
    t0 = time.perf_counter()
    result = capture()
    seconds = time.perf_counter() - t0
    s.timings[f"{name}_capture_s"] = s.timings.get(f"{name}_capture_s", 0.0) + seconds
    s.timings["capture_s"] = s.timings.get("capture_s", 0.0) + seconds
    s.tracker.mark(f"{name}_capture")
    s.state.captured.append((name, runner))
    return result


def _save(s: sessions.Session) -> None:
    items: list[graphs.Item] = []
    breaks: dict[int, Any] = {}
    for name, runner in s.state.captured:
        if name == "prefill":
            found, steps_after = graphs.prefill_items(runner)
            breaks.update({len(items) + i: doc for i, doc in steps_after.items()})
            items += found
        else:
            items += graphs.decode_items(runner)
    if not items:
        raise UnsupportedConfigError(
            "SGLang captured no CUDA graphs (the model or its settings route every batch to the eager runner): "
            "there is nothing to save. Start SGLang with FOUNDRY_SGLANG_MODE=off."
        )
    files = [graphs.file_name(i, key) for i, (key, _, _) in enumerate(items)]
    pool = steps.required(s, s.state.pool, "KV pool size")
    fields = {
        "available_bytes": steps.required(s, s.state.available_bytes, "KV cache budget"),
        "max_total_num_tokens": pool[0],
        "max_running_requests": pool[1],
        "prefill_gate_skip": s.state.prefill_gate_skip,
        "breaks": {files[i]: doc for i, doc in breaks.items()},
        "custom_all_reduce": allreduce.saved_field(s),
    }
    meta = steps.save_graphs(s, items, fields, file_name=lambda i, key: files[i], phase="graphs")
    _report(s, graphs=len(meta.graphs))
    log.info(
        "Foundry save: %d graphs (%d prefill segments) in %s (capture %.2f s, save %.2f s)",
        len(meta.graphs), sum(k["runner"] == "prefill" for k, _, _ in items), s.archive,
        s.timings.get("capture_s", 0.0), s.timings["save_s"],
    )  # fmt: skip


def _load_runner(s: sessions.Session, name: str, runner: Any) -> None:
    saved = s.require_saved()

    def mine(entry: Any) -> bool:
        return entry.key_dict().get("runner") == name

    files = [g.json for g in saved.graphs if mine(g)]

    def install(loaded: list[graphs.Item]) -> None:
        if name == "prefill":
            graphs.install_prefill(runner, loaded, dict(saved.breaks), files)
        else:
            graphs.install_decode(runner, loaded)

    steps.load_graphs(s, install, phase=f"{name}_graphs", only=mine)
    s.state.installed.update(files)
    s.state.loaded_runners.add(name)
    log.info("Foundry load: %d %s graphs installed", len(files), name)


def _check_all_installed(s: sessions.Session, runners: tuple[str, ...] = ("prefill", "decode")) -> None:
    """Refuses an archive whose graphs of ``runners`` went to no runner: this SGLang did not build it."""
    saved = s.require_saved()
    left = sorted(
        {str(g.key_dict().get("runner")) for g in saved.graphs if g.json not in s.state.installed} & set(runners)
    )
    if left:
        raise ArchiveMismatchError(
            f"the archive holds {', '.join(left)} graphs that this SGLang built no runner for (it routes "
            "those batches to the eager runner here): the settings or the free memory differ from SAVE's. Start "
            "with SAVE's settings, or run SAVE again."
        )


def _report(s: sessions.Session, **fields: Any) -> None:
    saved = s.saved
    steps.write_report(
        s,
        graphs=fields.pop("graphs", len(saved.graphs) if saved else None),
        loader=getattr(s.pending, "timings", None),
        **fields,
    )
