"""What SAVE and LOAD do at each phase of a vLLM worker's start-up. The patches (patches.py) only route
vLLM's calls here; every decision is made in this module.

Worker start-up (vllm/v1/worker/gpu_worker.py), and what each mode does there:

  init_device          refuse unsupported settings; just before distributed set-up: compare the archive
                       (LOAD), load its kernel images (LOAD), set the allocation region (both)
  load_model           weights: LOAD checks it allocated exactly what SAVE did, then starts building the
                       graphs in the background
  determine_available_memory
                       SAVE profiles as usual and keeps the answer; LOAD returns it without profiling
  initialize_from_config
                       the KV cache, attention metadata buffers, block tables: LOAD moves the cursor to where
                       SAVE began this phase, both allocate from a fresh pool, LOAD checks the result and then
                       moves the cursor past everything SAVE used
  kernel_warmup        LOAD skips it
  capture_model        SAVE captures with Foundry and writes the archive; LOAD hands vLLM the loaded graphs
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from ..shared.capture import foundry_capture
from ..shared.errors import ArchiveMismatchError, PhaseLayoutError, PluginConfigError, UnsupportedConfigError
from ..shared.phases import check_phase
from . import session as sessions
from .config import VLLM, Mode, PluginConfig
from .fingerprint import describe, runner_name
from .graphs import graphs_for, key_text
from .metadata import GraphEntry, VllmMetadata, check_fingerprint, read_metadata, write_metadata

__all__ = [
    "before_distributed",
    "capture_model",
    "check_supported",
    "determine_available_memory",
    "init_device_end",
    "init_device_start",
    "initialize_from_config",
    "kernel_warmup",
    "load_model_end",
]

# A child of vLLM's logger: these lines go where vLLM's go, at vLLM's level (VLLM_LOGGING_LEVEL).
log = logging.getLogger("vllm.foundry")


# ---------------------------------------------------------------------------------------------- init_device
def check_supported(vllm_config: Any) -> None:
    """Refuses settings the adapter cannot save or load, all of them in one message."""
    model = vllm_config.model_config
    parallel = vllm_config.parallel_config
    problems = []
    if getattr(model, "enable_sleep_mode", False) or getattr(model, "enable_cumem_allocator", False):
        problems.append(
            "vLLM's cumem allocator (enable_sleep_mode / enable_cumem_allocator) maps device memory itself, outside "
            "Foundry's region, so LOAD could not put weights and KV cache where SAVE had them: turn both off"
        )
    gpus = getattr(parallel, "tensor_parallel_size", 1) * getattr(parallel, "pipeline_parallel_size", 1)
    if gpus > 1 or getattr(parallel, "data_parallel_size", 1) > 1:
        problems.append("more than one GPU (tensor, pipeline or data parallel): the adapter handles one GPU")
    if getattr(vllm_config, "speculative_config", None) is not None:
        problems.append("speculative decoding: its drafter's graphs are not saved")
    if getattr(vllm_config, "lora_config", None) is not None:
        problems.append("LoRA: adapter-dependent graphs are not saved")
    if getattr(model, "enforce_eager", False):
        problems.append("enforce_eager: there are no CUDA graphs to save or load")
    mode = getattr(vllm_config.compilation_config, "cudagraph_mode", None)
    if getattr(mode, "name", str(mode)) != "FULL_DECODE_ONLY":
        problems.append(
            f"cudagraph_mode {getattr(mode, 'name', mode)}: the adapter saves FULL decode graphs only; pass "
            "compilation_config={'cudagraph_mode': 'FULL_DECODE_ONLY'}"
        )
    if problems:
        raise UnsupportedConfigError(
            "the Foundry vLLM adapter cannot run with these settings:\n  - "
            + "\n  - ".join(problems)
            + "\nChange them, or start vLLM with FOUNDRY_VLLM_MODE=off."
        )


def init_device_start(worker: Any) -> None:
    s = sessions.current()
    if s.config.enabled:
        check_supported(worker.vllm_config)


def before_distributed(vllm_config: Any) -> None:
    """Runs after the worker picked its device and before NCCL (or anything else) allocates device memory."""
    s = sessions.current()
    if not s.config.enabled:
        return
    archive = s.config.require_archive()
    s.runner = runner_name(vllm_config)
    s.fingerprint = describe(vllm_config)
    if s.config.mode is Mode.LOAD:
        s.saved = read_metadata(archive)
        check_fingerprint(s.saved.fingerprint, s.fingerprint, archive)  # before the GPU is touched
        t0 = time.perf_counter()
        s.api.load_modules(archive)
        s.timings["load_modules_s"] = time.perf_counter() - t0
        s.api.set_region(s.saved.region_base, s.saved.region_size)
    else:
        _prepare_save_dir(archive)
        s.api.set_region(s.config.region_base, s.config.region_size)
    s.tracker.start()
    log.info("Foundry %s: region set, archive %s (%s runner)", s.config.mode.value, archive, s.runner)


def _prepare_save_dir(archive: Path) -> None:
    if archive.exists() and (not archive.is_dir() or any(archive.iterdir())):
        raise PluginConfigError(
            f"SAVE writes a fresh archive, and {archive} already exists and is not empty: remove it or point "
            "FOUNDRY_VLLM_ARCHIVE at a new directory"
        )
    archive.mkdir(parents=True, exist_ok=True)


def _end_phase(name: str) -> None:
    """Ends phase ``name``; LOAD checks it against SAVE's."""
    s = sessions.current()
    here = s.tracker.mark(name)
    if s.config.mode is Mode.LOAD:
        check_phase(s.require_saved().phase(name), here)


def init_device_end(worker: Any) -> None:
    del worker
    if sessions.current().config.enabled:
        _end_phase("init_device")


# ----------------------------------------------------------------------------------------------- load_model
def load_model_end(worker: Any) -> None:
    del worker
    s = sessions.current()
    if not s.config.enabled:
        return
    _end_phase("load_model")
    if s.config.mode is Mode.LOAD:
        saved = s.require_saved()
        archive = s.config.require_archive()
        t0 = time.perf_counter()
        # Maps SAVE's memory (it checks this process's allocations first) and builds in the background.
        s.pending = s.api.start_builds([archive / g.json for g in saved.graphs], s.config.threads,
                                       s.config.allow_mismatch)  # fmt: skip
        s.timings["start_graph_builds_s"] = time.perf_counter() - t0


# ------------------------------------------------------------------------------- determine_available_memory
def determine_available_memory(worker: Any, original: Any) -> int:
    s = sessions.current()
    if s.config.mode is Mode.SAVE:
        value = int(original(worker))
        s.kv_cache_bytes = value
        s.tracker.mark("profile")
        return value
    if s.config.mode is Mode.LOAD:
        value = s.require_saved().kv_cache_bytes
        worker.available_kv_cache_memory_bytes = value
        s.tracker.skip()
        log.info("Foundry load: memory profiling skipped, KV cache %d bytes as saved", value)
        return value
    return int(original(worker))


# ----------------------------------------------------------------------------------- initialize_from_config
def initialize_from_config(worker: Any, original: Any, kv_cache_config: Any) -> Any:
    s = sessions.current()
    if not s.config.enabled:
        return original(worker, kv_cache_config)
    blocks = getattr(kv_cache_config, "num_blocks", None)
    if s.config.mode is Mode.SAVE:
        s.tracker.mark("kv_cache_start")
        with s.isolate():
            result = original(worker, kv_cache_config)
        s.tracker.mark("kv_cache")
        s.num_gpu_blocks = blocks
        return result
    saved = s.require_saved()
    if blocks != saved.num_gpu_blocks:
        raise ArchiveMismatchError(
            f"the KV cache has {blocks} blocks here but {saved.num_gpu_blocks} in SAVE, from the same "
            f"{saved.kv_cache_bytes} bytes: block size, max_model_len or the KV cache layout differ. Start with SAVE's "
            "settings, or run SAVE again."
        )
    s.api.set_cursor(saved.phase("kv_cache_start").cursor)
    s.tracker.skip()
    with s.isolate():
        result = original(worker, kv_cache_config)
    _end_phase("kv_cache")
    # Everything from here on lands past SAVE's memory, which the loaded graphs use.
    s.api.set_cursor(max(saved.high_water, s.api.cursor()))
    return result


# ---------------------------------------------------------------------------------------------- warm-up
def kernel_warmup(original: Any, worker: Any) -> Any:
    s = sessions.current()
    if s.config.mode is Mode.LOAD:
        log.info("Foundry load: kernel warm-up skipped")
        return None
    return original(worker)


# -------------------------------------------------------------------------------------------- capture_model
def capture_model(runner: Any, original: Any) -> Any:
    s = sessions.current()
    if s.config.mode is Mode.SAVE:
        return _save(runner, original)
    if s.config.mode is Mode.LOAD:
        return _load(runner)
    return original(runner)


def _save(runner: Any, original: Any) -> Any:
    s = sessions.current()
    archive = s.config.require_archive()
    graphs = graphs_for(s.runner or "v2")
    s.tracker.mark("warmup")
    t0 = time.perf_counter()
    with foundry_capture(graphs.capture_module, s.api, VLLM):
        result = original(runner)
    t1 = time.perf_counter()
    captured = graphs.captured(runner)
    expected = sorted(key_text(k) for k in graphs.expected_keys(runner))
    got = sorted(key_text(k) for k, _, _ in captured)
    if got != expected:
        raise UnsupportedConfigError(
            f"vLLM captured graphs for {len(got)} batch keys but dispatches {len(expected)} "
            f"(captured only: {sorted(set(got) - set(expected))[:3]}, "
            f"missing: {sorted(set(expected) - set(got))[:3]}): "
            "the adapter saves exactly the graphs vLLM's dispatcher uses. Report this with the vLLM settings."
        )
    entries = []
    for i, (key, graph, outputs) in enumerate(captured):
        path = archive / f"graph_{i:03d}_t{key.get('num_tokens', i)}.json"
        s.api.save_graph(graph, path, outputs, archive)
        entries.append(GraphEntry(path.name, tuple(key.items()), _address(outputs)))
    s.api.save_manifest(archive)
    t2 = time.perf_counter()
    s.tracker.mark("capture")
    s.timings.update(capture_s=t1 - t0, save_s=t2 - t1)
    meta = VllmMetadata(
        fingerprint=_require(s.fingerprint, "fingerprint"),
        runner=graphs.name,
        region_base=s.config.region_base,
        region_size=s.config.region_size,
        kv_cache_bytes=_require(s.kv_cache_bytes, "KV cache size"),
        num_gpu_blocks=_require(s.num_gpu_blocks, "number of KV cache blocks"),
        high_water=s.api.high_water(),
        phases=tuple(s.tracker.marks),
        graphs=tuple(entries),
        timings=tuple({**s.tracker.seconds, **s.timings}.items()),
    )
    write_metadata(archive, meta)  # last: an archive without it is refused
    _report(s.config, s.runner, {"graphs": len(entries)})
    log.info("Foundry save: %d graphs in %s (capture %.2f s, save %.2f s)", len(entries), archive, t1 - t0, t2 - t1)
    return result


def _load(runner: Any) -> int:
    s = sessions.current()
    saved = s.require_saved()
    graphs = graphs_for(s.runner or saved.runner)
    expected = sorted(key_text(k) for k in graphs.expected_keys(runner))
    have = sorted(key_text(g.key_dict()) for g in saved.graphs)
    if expected != have:
        raise ArchiveMismatchError(
            f"this vLLM dispatches decode graphs for {len(expected)} batch keys, the archive holds {len(have)} "
            f"(missing: {sorted(set(expected) - set(have))[:3]}): capture sizes or max_num_seqs differ. Start with "
            "SAVE's settings, or run SAVE again."
        )
    t0 = time.perf_counter()
    loaded = []
    for i, entry in enumerate(saved.graphs):
        graph, outputs = s.api.finish_one(s.pending, i)
        if _address(outputs) != entry.output_address:
            raise PhaseLayoutError(
                f"graph {entry.json} writes its output at {_address(outputs):#x} here but {entry.output_address:#x} in "
                "SAVE: the archive's region does not match this run. Run SAVE again."
            )
        loaded.append((entry.key_dict(), graph, outputs))
    graphs.install(runner, loaded)
    s.timings["graphs_ready_s"] = time.perf_counter() - t0
    s.tracker.mark("capture")
    _report(s.config, s.runner, {"graphs": len(loaded), "loader": getattr(s.pending, "timings", None)})
    log.info("Foundry load: %d graphs installed (waited %.3f s)", len(loaded), s.timings["graphs_ready_s"])
    return 0


def _address(outputs: Any) -> int:
    tensor = outputs[0] if isinstance(outputs, list | tuple) else outputs
    return int(tensor.data_ptr())


def _require(value: Any, what: str) -> Any:
    if value is None:
        raise PhaseLayoutError(
            f"SAVE reached capture without the {what} (a start-up hook did not run): the vLLM start-up order is not "
            "vLLM 0.26.0's. Install vLLM 0.26.0, or run with FOUNDRY_VLLM_MODE=off."
        )
    return value


def _report(config: PluginConfig, runner: str | None, extra: dict[str, Any]) -> None:
    if config.report is None:
        return
    s = sessions.current()
    doc = {
        "mode": config.mode.value,
        "runner": runner,
        "phases": [
            {
                "name": m.name,
                "cursor": m.cursor,
                "allocations": len(m.allocations),
                "seconds": s.tracker.seconds.get(m.name),
            }
            for m in s.tracker.marks
        ],
        "timings": s.timings,
        "kv_cache_bytes": s.kv_cache_bytes if s.saved is None else s.saved.kv_cache_bytes,
        **extra,
    }
    config.report.parent.mkdir(parents=True, exist_ok=True)
    config.report.write_text(json.dumps(doc, indent=1, default=str) + "\n")
