"""What SAVE and LOAD do at each phase of a vLLM worker's start-up. The patches (patches.py) only route
vLLM's calls here; every decision is made in this module, which calls the steps every engine takes the
same way (shared/steps.py) where vLLM's start-up reaches them.

Worker start-up (vllm/v1/worker/gpu_worker.py), and what each mode does there:

  init_device          refuse unsupported settings (support.py); just before distributed set-up: compare the archive
                       (LOAD), load its kernel images (LOAD), set the allocation region (both); just after it,
                       before vLLM's memory snapshot: open the region's small-allocation granule with the room
                       the driver's page has (SAVE measures it, LOAD takes SAVE's)
  load_model           weights: LOAD checks it allocated exactly what SAVE did, then starts building the
                       graphs in the background
  determine_available_memory
                       SAVE profiles as usual and keeps the answer; LOAD returns it without profiling
  initialize_from_config
                       the KV cache, attention metadata buffers, block tables: LOAD moves the cursor to where
                       SAVE began this phase, both allocate from a fresh pool, LOAD checks the result and then
                       moves the cursor past everything SAVE used, and gives vLLM back the workspace SAVE's
                       profiling grew (workspace.py)
  kernel_warmup        LOAD runs vLLM's profile forward passes and then it (FOUNDRY_VLLM_WARM_UP=0 skips both)
  capture_model        SAVE captures with Foundry and writes the archive (with the workspace as capture left
                       it); LOAD hands vLLM the loaded graphs and locks the workspace where SAVE's was locked
  compile_or_warm_up_model (its end)
                       SAVE packs into the archive's caches what vLLM's warm-up after capture compiled
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time
from contextlib import ExitStack
from typing import Any

from ..shared import autotune, steps
from ..shared.capture import foundry_capture
from ..shared.errors import ArchiveMismatchError, UnsupportedConfigError
from ..shared.ranks import Place
from . import allreduce, caches, memreport, workspace
from . import choices as choice_reports
from . import session as sessions
from .config import ENV_WARM_UP, VLLM, Mode
from .fingerprint import describe, runner_name
from .graphs import graphs_for, key_text
from .metadata import VllmMetadata
from .pieces import PieceId, captured_pieces, install_pieces, piece_of, piece_wrappers
from .support import check_supported

__all__ = [
    "after_distributed",
    "before_distributed",
    "capture_model",
    "determine_available_memory",
    "init_device_end",
    "init_device_start",
    "initialize_from_config",
    "kernel_warmup",
    "load_model_end",
    "warmed_up",
    "wrapper_created",
]

# A child of vLLM's logger: these lines go where vLLM's go, at vLLM's level (VLLM_LOGGING_LEVEL).
log = logging.getLogger(VLLM.logger)


# ---------------------------------------------------------------------------------------------- init_device
def init_device_start(worker: Any) -> None:
    s = sessions.current()
    if s.config.enabled:
        s.timings["init_device_started_at"] = time.time()  # epoch: the report's timeline starts the worker here
        check_supported(worker.vllm_config, s.config.allow_inexact)


def before_distributed(vllm_config: Any, rank: int = 0) -> None:
    """Runs after the worker picked its device and before NCCL (or anything else) allocates device memory;
    ``rank`` is the worker's rank in vLLM's world (tensor parallel only: support.py)."""
    s = sessions.current()
    if not s.config.enabled:
        return
    s.state.runner = runner_name(vllm_config)
    s.state.compiles = compiles(vllm_config)
    s.state.architectures = tuple(getattr(vllm_config.model_config, "architectures", None) or ())
    world = int(getattr(vllm_config.parallel_config, "world_size", 1) or 1)
    steps.begin(s, describe(vllm_config), Place(rank, world))
    # Before the model first runs: Inductor's kernels choose their configuration at their first launch.
    if s.config.mode is Mode.SAVE:
        autotune.record(VLLM)
    else:
        s.state.replay = autotune.replay(s.require_saved().kernel_choices, VLLM)
    log.info("Foundry %s: region set, archive %s (%s runner)", s.config.mode.value, s.archive, s.state.runner)


def after_distributed() -> None:
    """Runs when vLLM's distributed set-up returns, just before ``init_device`` takes the memory snapshot that
    vLLM's profile measures non-torch memory from. Natively the profile's first small allocations outside
    PyTorch (1 KiB and 128 KiB at tensor parallel) land in a page the driver had partly used before the
    snapshot and cost nothing; the region's granule for them would cost a granule inside the window, and the
    KV cache would come out a granule smaller than natively. So the region opens that granule here with the
    room the driver's page has (SAVE measures it; LOAD takes SAVE's, since the granule moves the cursor), and
    the two phase marks up to the profile close no granule (steps.end_phase's ``boundary``)."""
    s = sessions.current()
    if not s.config.enabled:
        return
    room = s.api.small_allocation_room() if s.config.mode is Mode.SAVE else s.require_saved().small_room
    if room:
        s.api.open_small_granule(room)
    s.state.small_room = room
    log.info("Foundry %s: small-allocation room %d bytes before vLLM's memory snapshot", s.config.mode.value, room)


def compiles(vllm_config: Any) -> bool:
    """Whether vLLM torch.compiles the model (any compilation mode but NONE)."""
    mode = getattr(vllm_config.compilation_config, "mode", None)
    return mode is not None and getattr(mode, "name", str(mode)) not in ("NONE", "0")


def init_device_end(worker: Any) -> None:
    del worker
    s = sessions.current()
    if s.config.enabled:
        allreduce.attach(s, allreduce.find())  # vLLM's distributed set-up made it, or none
        # No boundary here or after the weights (after_distributed says why): LOAD runs both phases as SAVE did
        # (checked), and its restore, which moves the cursor past SAVE's memory, closes the granule.
        steps.end_phase(s, "init_device", boundary=False)


# ----------------------------------------------------------------------------------------------- load_model
def load_model_end(worker: Any) -> None:
    del worker
    s = sessions.current()
    if not s.config.enabled:
        return
    steps.end_phase(s, "load_model", boundary=False)
    if s.config.mode is Mode.LOAD:
        steps.start_builds(s)


# ------------------------------------------------------------------------------- determine_available_memory
def determine_available_memory(worker: Any, original: Any) -> int:
    s = sessions.current()
    if s.config.mode is Mode.SAVE:
        value = int(original(worker))
        s.state.kv_cache_bytes = value
        s.tracker.mark("profile")
        log.info("Foundry save: %s", memreport.line(memreport.profile_bytes(worker)))
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
    if s.config.mode is Mode.LOAD:
        saved = s.require_saved()
        if blocks != saved.num_gpu_blocks:
            raise ArchiveMismatchError(
                f"the KV cache has {blocks} blocks here but {saved.num_gpu_blocks} in SAVE, from the same "
                f"{saved.kv_cache_bytes} bytes: block size, max_model_len or the KV cache layout differ. Start with "
                "SAVE's settings, or run SAVE again."
            )
    # After profiling (SAVE) or none (LOAD): at SAVE's cursor, from fresh allocator segments, checked at LOAD.
    with steps.isolated_phase(s, "kv_cache"):
        result = original(worker, kv_cache_config)
    if s.config.mode is Mode.SAVE:
        s.state.num_gpu_blocks = blocks
    else:
        steps.past_saved_memory(s)  # everything from here on lands past SAVE's memory, which the graphs use
        # Before the first eager forward (compile warm-up sizes run next): the buffer SAVE's graphs hold.
        workspace.install(s.require_saved().workspace, s.api.restored_tensor)
    return result


# ---------------------------------------------------------------------------------------------- warm-up
def kernel_warmup(original: Any, worker: Any) -> Any:
    s = sessions.current()
    if s.config.mode is not Mode.LOAD:
        return original(worker)
    if not s.config.warm_up:
        log.info("Foundry load: kernel warm-up skipped (%s=0)", ENV_WARM_UP)
        return None
    # What native ran before its first request, but the memory measurement and the capture: the profile's
    # forward passes (the largest batch, then the sampler's), then vLLM's kernel warm-up. Choices kernels make
    # at their first launch (autotuning by timing) are then made on the shapes native makes them on. Here, not
    # where native profiles: the KV cache phase that follows the profile moves the cursor back to SAVE's
    # boundary, below what the forward leaves cached; past SAVE's memory, nothing moves the cursor again.
    t0 = time.perf_counter()
    worker.model_runner.profile_run()
    result = original(worker)
    s.timings["warm_up_s"] = time.perf_counter() - t0
    log.info("Foundry load: vLLM's profile forward and kernel warm-up run, %.2f s", s.timings["warm_up_s"])
    return result


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
    graphs = graphs_for(s.state.runner or "v2")
    s.tracker.mark("warmup")
    t0 = time.perf_counter()
    with ExitStack() as stack:
        for module_name in graphs.capture_modules:
            importlib.import_module(module_name)
            stack.enter_context(foundry_capture(module_name, s.api, VLLM))
        stack.enter_context(allreduce.capturing(s))
        result = original(runner)
    s.timings["capture_s"] = time.perf_counter() - t0
    captured = graphs.captured(runner)
    expected = sorted(key_text(k) for k in graphs.expected_keys(runner))
    got = sorted(key_text(k) for k, _, _ in captured)
    if got != expected:
        raise UnsupportedConfigError(
            f"vLLM captured FULL graphs for {len(got)} batch keys but dispatches {len(expected)} "
            f"(captured only: {sorted(set(got) - set(expected))[:3]}, "
            f"missing: {sorted(set(expected) - set(got))[:3]}): "
            "the adapter saves exactly the graphs vLLM's dispatcher uses. Report this with the vLLM settings."
        )
    items = [({"graph": "full", **key}, graph, outputs) for key, graph, outputs in captured]
    items += [
        ({"graph": "piece", **piece.key(), **key}, graph, outputs)
        for piece, key, graph, outputs in captured_pieces(graphs.piece_keys(runner))
    ]
    base = s.config.region_base
    vllm_fields = {
        "workspace": workspace.saved((base, base + s.config.region_size)),
        "kernel_choices": autotune.recorded(),
        "runner": graphs.name,
        "kv_cache_bytes": steps.required(s, s.state.kv_cache_bytes, "KV cache size"),
        "num_gpu_blocks": steps.required(s, s.state.num_gpu_blocks, "number of KV cache blocks"),
        "custom_all_reduce": allreduce.saved_field(s),
        "small_room": s.state.small_room,
    }
    meta = steps.save_graphs(s, items, vllm_fields, file_name=_graph_file)
    pieces = sum(1 for key, *_ in items if key["graph"] == "piece")
    choices = meta.kernel_choices.count()
    _report(
        s,
        graphs=len(meta.graphs),
        piece_graphs=pieces,
        kernel_choices=choices,
        autotuner_missing=autotune.missing(),
        cache_reads_declined=autotune.cache_reads_declined(),
    )
    log.info(
        "Foundry save: %d graphs (%d of them pieces) and %d kernel choices in %s (capture %.2f s, save %.2f s)",
        len(meta.graphs), pieces, choices, s.archive, s.timings["capture_s"], s.timings["save_s"],
    )  # fmt: skip
    note = autotune.natives_note(choices, os.environ)
    if note:
        log.info("Foundry save: %s", note)
    choice_reports.after_save(s, choices)
    return result


def warmed_up() -> None:
    """The worker's compile_or_warm_up_model returned: vLLM ran its kernel warm-up after capture (the V2 runner
    runs a whole step to JIT-compile its Triton kernels), the last of its start-up."""
    s = sessions.current()
    if s.config.enabled and s.config.mode is Mode.SAVE:
        steps.engine_ready(s)


def _graph_file(index: int, key: dict[str, Any]) -> str:
    kind = "full" if key["graph"] == "full" else f"p{key['piece']:03d}"
    return f"g{index:04d}_{kind}_t{key.get('num_tokens', 0)}.json"


def _load(runner: Any) -> int:
    s = sessions.current()
    saved = s.require_saved()
    compiled_again = caches.check_found(s)  # vLLM has compiled or loaded the model by now
    if compiled_again:
        log.warning("Foundry load: %s", compiled_again)
    graphs = graphs_for(s.state.runner or saved.runner)
    full = [g for g in saved.graphs if g.key_dict().get("graph") == "full"]
    piece_ids = _check_saved_keys(graphs, runner, saved)

    def install(loaded: list[steps.Captured]) -> None:
        loaded_full = []
        loaded_pieces: dict[PieceId, list[tuple[PieceId, dict[str, Any], Any, Any]]] = {p: [] for p in piece_ids}
        for key, graph, outputs in loaded:
            kind = key.pop("graph")
            if kind == "full":
                loaded_full.append((key, graph, outputs))
            else:
                piece = PieceId.from_key(key)
                batch = {k: v for k, v in key.items() if k not in ("model", "piece", "pieces")}
                loaded_pieces[piece].append((piece, batch, graph, outputs))
        graphs.install(runner, loaded_full)
        s.state.loaded_pieces = loaded_pieces
        install_pieces(piece_wrappers(), [x for xs in loaded_pieces.values() for x in xs], piece_ids)
        _forbid_capture()
        workspace.lock(saved.workspace)

    steps.load_graphs(s, install)
    # Before any graph replays: the custom all-reduce's slots its kernels read, with the peers' inputs opened here.
    slots = allreduce.install(s, allreduce.find())
    pieces = len(saved.graphs) - len(full)
    replay = s.state.replay.summary() if s.state.replay is not None else None
    _report(s, graphs=len(saved.graphs), piece_graphs=pieces, loader=getattr(s.pending, "timings", None),
            kernel_choices=replay, autotuner_missing=autotune.missing(), custom_all_reduce_slots=slots)  # fmt: skip
    log.info(
        "Foundry load: %d graphs installed (%d of them pieces; waited %.3f s)",
        len(saved.graphs), pieces, s.timings["graphs_ready_s"],
    )  # fmt: skip
    choice_reports.after_install(s)
    return 0


def _check_saved_keys(graphs: Any, runner: Any, saved: VllmMetadata) -> frozenset[PieceId]:
    """Refuses an archive whose graphs are not exactly the ones this vLLM dispatches; returns its pieces."""
    expected = sorted(key_text(k) for k in graphs.expected_keys(runner))
    full = [g.key_dict() for g in saved.graphs if g.key_dict().get("graph") == "full"]
    have = sorted(key_text(_without(k, "graph")) for k in full)
    if expected != have:
        raise ArchiveMismatchError(
            f"this vLLM dispatches FULL graphs for {len(expected)} batch keys, the archive holds {len(have)} "
            f"(missing: {sorted(set(expected) - set(have))[:3]}): cudagraph mode, capture sizes or max_num_seqs "
            "differ. Start with SAVE's settings, or run SAVE again."
        )
    want = sorted(key_text(k) for k in graphs.piece_keys(runner))
    by_piece: dict[PieceId, list[str]] = {}
    for g in saved.graphs:
        key = g.key_dict()
        if key.get("graph") == "piece":
            batch = _without(key, "graph", "model", "piece", "pieces")
            by_piece.setdefault(PieceId.from_key(key), []).append(key_text(batch))
    if want and not by_piece:
        raise ArchiveMismatchError(
            "this vLLM dispatches piecewise CUDA graphs and the archive holds none: it was saved with another "
            "cudagraph_mode. Start with SAVE's settings, or run SAVE again."
        )
    for piece, keys in sorted(by_piece.items()):
        if sorted(keys) != want:
            raise ArchiveMismatchError(
                f"the archive holds graphs of {piece} for {len(keys)} batch keys, this vLLM dispatches {len(want)} "
                f"(missing: {sorted(set(want) - set(keys))[:3]}): capture sizes differ. Start with SAVE's settings, "
                "or run SAVE again."
            )
    return frozenset(by_piece)


def _without(key: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in key.items() if k not in names}


def _forbid_capture() -> None:
    """After LOAD, a batch without a loaded graph must fail loudly, not be captured behind Foundry's back
    (V1 does this itself after capturing; V2 does not)."""
    monitor = sys.modules.get("vllm.compilation.monitor")
    forbid = getattr(monitor, "set_cudagraph_capturing_enabled", None)
    if callable(forbid):
        forbid(False)


def wrapper_created(wrapper: Any) -> None:
    """A CUDAGraphWrapper was just made. Under LOAD, a piece compiled after the graphs were installed (vLLM
    compiles at its first forward) gets its graphs now."""
    s = sessions.current()
    loaded_pieces = s.state.loaded_pieces
    if s.config.mode is not Mode.LOAD or loaded_pieces is None:
        return
    piece = piece_of(wrapper)
    if piece is not None:
        install_pieces({piece: wrapper}, loaded_pieces.get(piece, []), loaded_pieces)


def _report(s: sessions.Session, **fields: Any) -> None:
    kv_cache_bytes = s.state.kv_cache_bytes if s.saved is None else s.saved.kv_cache_bytes
    # Where vLLM keeps the compiled model (its AOT artifact's folder, shared/caches.py): under LOAD with the
    # archive's caches, inside their copy when vLLM found its artifact there.
    inductor = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    steps.write_report(s, runner=s.state.runner, kv_cache_bytes=kv_cache_bytes, inductor_cache=inductor, **fields)
