"""``foundry.CUDAGraph`` and ``foundry.graph``: PyTorch's CUDA graphs, saveable and loadable.

A graph is either captured here (it wraps ``torch.cuda.CUDAGraph(keep_graph=True)``, so PyTorch's
memory pools and RNG bookkeeping work as usual) or loaded from an archive (it wraps an exec rebuilt by
``foundry.load.source``). Both replay on the caller's current stream.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from foundry._state import ProcessState
from foundry.errors import FoundryError
from foundry.load import LoadedGraph, Loader, load_graph
from foundry.native import codec, require_interposer
from foundry.region import capture_window, live_ranges_now, region_state
from foundry.save import (
    Extracted,
    can_drop_launches,
    extract,
    extract_beside,
    gc_paused,
    launches_dropped,
    save_graph,
    save_phases,
    wait_beside,
    work_disabled,
)
from foundry.schema import GraphMeta, RngSpec

from .pool import capture_stream, claim_shared_pool, release_shared_pool, shared_pool
from .rng import RngState, probe_rng
from .tensors import flatten_outputs, output_spec, tensor_at

__all__ = ["CUDAGraph", "graph", "shared_pool"]


@dataclass
class _HandedOut:
    """By background LOAD: the ``(graph, outputs)`` each of its graphs was handed out as, so that asking
    again gives the same objects; kept only as long as the Loader is."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    by_loader: weakref.WeakKeyDictionary[Loader, dict[int, tuple[CUDAGraph, Any]]] = field(
        default_factory=weakref.WeakKeyDictionary
    )


_HANDED_OUT = ProcessState("capture.handed_out", _HandedOut)


def _stream_of(device: int) -> int:
    return int(torch.cuda.current_stream(device).cuda_stream)


# The current stream's handle, without building a torch.cuda.Stream object per call (CUDA builds of PyTorch
# have the raw accessor; the fallback is the public API).
_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", _stream_of)


class Runner(Protocol):
    def launch(self, stream: int) -> None: ...


def blocks_in_use() -> list[tuple[int, int]]:
    """(address, size) of every block PyTorch's caching allocator has handed out on this device."""
    device = torch.cuda.current_device()
    used = []
    for segment in torch.cuda.memory_snapshot():
        if segment.get("device", device) != device:
            continue
        address = segment["address"]
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                used.append((block.get("address", address), block["size"]))
            address += block["size"]
    return used


def _torch_exec(g: torch.cuda.CUDAGraph) -> int:
    """The exec PyTorch replays ``g`` with, instantiated now if it has none yet (as replay() would).
    instantiate() on a graph that has one would destroy it, and with it the handle anyone took."""
    try:
        return int(g.raw_cuda_graph_exec())
    except RuntimeError:
        g.instantiate()
        return int(g.raw_cuda_graph_exec())


class CUDAGraph:
    """A CUDA graph that can be saved to and loaded from a Foundry archive."""

    def __init__(self, keep_graph: bool = True) -> None:
        # keep_graph is accepted for call-shape compatibility; the captured graph is always kept,
        # because save() needs it.
        del keep_graph
        self._torch: torch.cuda.CUDAGraph | None = None
        self._runner: Runner | None = None  # a loaded graph: its exec, or its place in a template group
        self._meta: GraphMeta | None = None
        self._rng: RngState | None = None
        self._device = torch.cuda.current_device()
        # The captured graph's record, walked on a worker while the program goes on (see capture_end).
        self._extracted: Future[Extracted] | None = None

    # ------------------------------------------------------------------ capture
    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        require_interposer("capturing a saveable graph")
        wait_beside()  # no graph of this process is walked on a worker while one is captured
        if self._torch is not None or self._runner is not None:
            raise FoundryError("this CUDAGraph already holds a graph; create a new one for another capture")
        try:
            self._torch = torch.cuda.CUDAGraph(keep_graph=True)
        except TypeError as exc:
            raise FoundryError(
                f"torch {torch.__version__} cannot keep a captured graph (CUDAGraph(keep_graph=True)); Foundry needs "
                "torch 2.9 or newer"
            ) from exc
        self._device = torch.cuda.current_device()
        self._torch.capture_begin(pool=pool, capture_error_mode=capture_error_mode)

    def capture_end(self) -> None:
        g = self._require_torch()
        g.capture_end()
        # Instantiated now, as replay() would at first: from here on PyTorch uses only the exec, and the
        # graph is the worker's alone until its record is read (CUDA graphs are not safe to use from two
        # threads at once). save() needs that record; reading it (some 5 us a node) runs beside the
        # program's next warm-up instead of inside save().
        _torch_exec(g)
        self._extracted = extract_beside(int(g.raw_cuda_graph()), g)

    def _require_torch(self) -> torch.cuda.CUDAGraph:
        if self._torch is None:
            raise FoundryError("this CUDAGraph was not captured in this process (it was loaded, or is empty)")
        return self._torch

    def pool(self) -> Any:
        return self._require_torch().pool()

    def raw_cuda_graph(self) -> int:
        return int(self._require_torch().raw_cuda_graph())

    # ------------------------------------------------------------------ replay
    def replay(self) -> None:
        # The hot path of an engine's step (vLLM's piecewise mode replays a graph per layer): a loaded graph
        # costs one raw-stream lookup and one launch, as PyTorch's own replay does.
        runner = self._runner
        if runner is None:
            self._require_torch().replay()
            return
        if self._rng is not None:
            self._rng.prologue()
        runner.launch(_current_raw_stream(self._device))

    def reset(self) -> None:
        if self._extracted is not None:
            self._extracted.exception()  # the worker is done with the graph before it is destroyed
            self._extracted = None
        if self._torch is not None:
            self._torch.reset()
            release_shared_pool(self._device, self._torch)
            self._torch = None
        if isinstance(self._runner, LoadedGraph):
            codec.destroy_exec(self._runner.exec)
            codec.destroy_graph(self._runner.graph)
        self._runner = None
        self._meta = None

    # ------------------------------------------------------------------ SAVE
    @gc_paused()
    def save(
        self,
        path: str | os.PathLike[str],
        output_tensors: Any = None,
        archive_dir: str | os.PathLike[str] | None = None,
    ) -> GraphMeta:
        """Writes ``<stem>.json`` and ``<stem>.cugraph`` (and the kernel images, into the archive directory).

        Saving never runs the graph: to find its generator state (if it draws random numbers) PyTorch
        replays it twice while the interposer drops the launches, which only moves PyTorch's generator,
        whose offset is restored afterwards. The program's memory, and its graph's exec, are as they were
        before the call.
        """
        g = self._require_torch()
        outputs = [output_spec(t) for t in flatten_outputs(output_tensors)]
        state = region_state()
        graph = int(g.raw_cuda_graph())
        if self._extracted is None:
            extracted = extract(graph)
        else:
            with save_phases().span("extract_wait"):
                extracted = self._extracted.result()
        with save_phases().span("rng_probe"):
            rng = self._probe_rng(g, graph, extracted, state.base)
        return save_graph(extracted, path, outputs=outputs, rng=rng, archive_dir=archive_dir)

    def _probe_rng(self, g: torch.cuda.CUDAGraph, graph: int, extracted: Extracted, base: int) -> RngSpec | None:
        """The graph's generator use (probe_rng), found by replays that do not run the graph. Their launches
        are dropped in the interposer, so PyTorch's exec stays as it was. Where that hook is not in the
        runtime's path, the exec's work is switched off instead, and PyTorch then gets a fresh exec: one whose
        nodes were switched off and on replays slower for good (13-22% on an H200, docs/DESIGN.md)."""
        exec_ = _torch_exec(g)
        replays = 0

        def replay() -> None:
            nonlocal replays
            replays += 1
            self.replay()

        if can_drop_launches():
            with launches_dropped(exec_) as dropped:
                rng = probe_rng(replay, extracted, base, live_ranges_now, self._device)
            if dropped.count != replays:
                raise FoundryError(
                    f"SAVE's generator probe replayed the graph {replays} time(s), but Foundry's interposer "
                    f"dropped {dropped.count} of the launches: the rest reached the driver another way and ran "
                    "the graph. Please report this with your PyTorch and CUDA versions."
                )
            return rng
        with work_disabled(graph, exec_, extracted):
            rng = probe_rng(replay, extracted, base, live_ranges_now, self._device)
        g.instantiate()  # destroys the switched exec; replay() launches the fresh one
        return rng

    # ------------------------------------------------------------------ LOAD
    @classmethod
    def _from_runner(cls, runner: Runner, meta: GraphMeta) -> tuple[CUDAGraph, Any]:
        g = cls.__new__(cls)
        g._torch = None
        g._extracted = None
        g._runner = runner
        g._meta = meta
        g._device = torch.cuda.current_device()
        g._rng = RngState(meta.rng, g._device) if meta.rng is not None else None
        device = torch.device("cuda", g._device)
        outputs = [tensor_at(o, device) for o in meta.outputs]
        return g, outputs[0] if len(outputs) == 1 else (outputs or None)

    @classmethod
    def load(cls, path: str | os.PathLike[str], allow_mismatch: tuple[str, ...] = ()) -> tuple[CUDAGraph, Any]:
        """Rebuilds a saved graph: returns ``(graph, outputs)``, outputs at their saved addresses.

        The allocation region must be set with SAVE's base, and the program's persistent tensors
        allocated in SAVE's order, before this call.
        """
        require_interposer("loading a graph")
        loaded = load_graph(Path(path), allow_mismatch=allow_mismatch, occupied=blocks_in_use)
        return cls._from_runner(loaded, loaded.meta)

    @classmethod
    def start_graph_builds(
        cls,
        paths: Iterable[str | os.PathLike[str]],
        num_threads: int = 8,
        allow_mismatch: tuple[str, ...] = (),
        defer_dedicated: bool = False,
    ) -> Loader:
        """Checks the graphs, restores SAVE's memory, and builds the graphs in the background.

        Returns at once; finish_graph_loads / finish_one_graph_load hand out the graphs. A graph is
        replayable as soon as its topology group's template exec exists; it gets its own exec later
        (instantiated after ``pending.build_dedicated()`` when ``defer_dedicated``; its graph is built
        before either way).
        """
        require_interposer("loading graphs")
        return Loader.start(
            [Path(p) for p in paths],
            num_threads,
            allow_mismatch,
            occupied=blocks_in_use,
            defer_dedicated=defer_dedicated,
        )

    @classmethod
    def finish_one_graph_load(cls, pending: Loader, index: int) -> tuple[CUDAGraph, Any]:
        """``(graph, outputs)`` of graph ``index``; waits only until its group's template is ready."""
        state = _HANDED_OUT.get()
        with state.lock:
            done = state.by_loader.setdefault(pending, {}).get(index)
        if done is None:
            handle = pending.wait_group(index)
            made = cls._from_runner(handle, handle.source.meta)
            with state.lock:
                done = state.by_loader.setdefault(pending, {}).setdefault(index, made)
        return done

    @classmethod
    def finish_graph_loads(cls, pending: Loader) -> list[tuple[CUDAGraph, Any]]:
        """``[(graph, outputs), ...]`` in the order the paths were given."""
        return [cls.finish_one_graph_load(pending, i) for i in range(len(pending.handles))]

    @property
    def meta(self) -> GraphMeta | None:
        return self._meta


@contextmanager
def graph(
    cuda_graph: CUDAGraph,
    pool: Any = None,
    stream: torch.cuda.Stream | None = None,
    capture_error_mode: str = "global",
) -> Iterator[CUDAGraph]:
    """Captures work into ``cuda_graph``, like ``torch.cuda.graph``.

    Unlike torch.cuda.graph, captures share one memory pool by default (``shared_pool()``), so that
    many graphs (one per batch size) do not each hold their own activations; pass ``pool`` to choose.
    """
    # Graphs captured before are let go by their workers first: the shared pool's users count them.
    wait_beside()
    device = torch.cuda.current_device()
    stream = stream if stream is not None else capture_stream(device)
    chosen_pool = pool if pool is not None else shared_pool()
    # torch's own context manager prepares and enters the capture (it synchronizes first), so that what it does
    # before one is this torch's (it gives the caching allocator's free blocks back to the driver, and the pinned
    # host cache: a SAVE process then holds the memory a native one holds, which engines measure as the drop in
    # free memory), and an engine that switches part of it off (vLLM patches gc.collect and empty_cache for all
    # but its first capture) switches Foundry's off alike. It calls capture_begin and capture_end on the object
    # it is given.
    with torch.cuda.graph(
        _TorchCapture(cuda_graph, device, claim_shared=pool is None),
        pool=chosen_pool,
        stream=stream,
        capture_error_mode=capture_error_mode,
    ):
        yield cuda_graph


class _TorchCapture:
    """The graph ``torch.cuda.graph`` captures into: its capture_begin and capture_end, forwarded to a Foundry
    CUDAGraph inside the region's capture window."""

    def __init__(self, cuda_graph: CUDAGraph, device: int, claim_shared: bool) -> None:
        self._graph = cuda_graph
        self._device = device
        self._claim_shared = claim_shared
        self._window = ExitStack()

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global", **_later_options: Any) -> None:
        # _later_options: what newer torch passes on (check_input_liveness) for its own graphs' bookkeeping.
        self._window.enter_context(capture_window())
        try:
            self._graph.capture_begin(pool=pool, capture_error_mode=capture_error_mode)
            if self._claim_shared:
                claim_shared_pool(self._device, self._graph._require_torch())
        except BaseException:
            self._window.close()
            raise

    def capture_end(self) -> None:
        try:
            self._graph.capture_end()
        finally:
            self._window.close()
