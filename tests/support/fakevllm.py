"""A fake vLLM 0.26 module tree, for CPU tests of the vLLM adapter, over the stand-in Foundry
(tests/support/fakefoundry.py) or over Foundry itself on the fake driver (tests/support/engine_processes.py).

The fake reproduces only the structure the adapter relies on, with vLLM's module and attribute names:
``Worker.init_device`` calls the module-global ``init_worker_distributed_environment`` after picking the
device; ``compile_or_warm_up_model`` calls the module-global ``kernel_warmup`` and then the runner's
``capture_model``; the V2 runner keeps FULL graphs in ``cudagraph_manager.graphs`` keyed by
``BatchExecutionDescriptor`` and captures them through ``cudagraph_utils.torch.cuda.CUDAGraph/graph``; the
V1 runner wraps the model in ``CUDAGraphWrapper`` whose entries are keyed by ``BatchDescriptor``. The
model is "compiled" at its first forward into pieces, each in a PIECEWISE ``CUDAGraphWrapper`` (middle pieces
return a tuple of two tensors, the last one a tensor), as vLLM's piecewise backend does; the cudagraph mode
decides which graphs each runner captures. Device memory and the model's layers are the ``EngineDevice``
it is built with (tests/support/faketensor.py): the stand-in Foundry's logged region, or the fake driver's.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from types import ModuleType, SimpleNamespace
from typing import Any

from tests.support import fakevllm_allreduce
from tests.support.enginetrace import Trace
from tests.support.faketensor import EngineDevice, FakeTensor
from tests.support.fakevllm_cache import envs_module
from tests.support.fakevllm_compile import CUDAGraphMode, compilation, graph_kinds
from tests.support.fakevllm_workspace import workspace_module


# ------------------------------------------------------------------------------------------- fake vLLM
class FakeTorchGraph:
    """torch.cuda.CUDAGraph of the fake torch: capturing into one means the adapter did not route the
    capture to Foundry."""


def _fake_torch(trace: Trace) -> SimpleNamespace:
    @contextmanager
    def graph(cuda_graph: Any, pool: Any = None, stream: Any = None, capture_error_mode: str = "global") -> Any:
        trace("torch.cuda.graph")
        yield cuda_graph

    cuda = SimpleNamespace(CUDAGraph=FakeTorchGraph, graph=graph, synchronize=lambda: None)
    return SimpleNamespace(cuda=cuda, Tensor=FakeTensor)


@dataclass
class FakeVllm:
    """The module tree, the trace, and the allocator every fake vLLM object allocates through."""

    modules: dict[str, ModuleType]
    trace: Trace
    memory: EngineDevice

    def module(self, name: str) -> ModuleType:
        return self.modules[name]

    def start_engine(self, config: SimpleNamespace, num_blocks: int = 100, rank: int = 0) -> Any:
        """vLLM's start-up order: init_device, load_model, determine_available_memory, initialize_from_config
        (KV cache), compile_or_warm_up_model. Returns the worker (of ``rank`` in the config's world)."""
        worker = self.modules["vllm.v1.worker.gpu_worker"].Worker(config, rank)
        worker.init_device()
        worker.load_model()
        available = worker.determine_available_memory()
        worker.initialize_from_config(SimpleNamespace(num_blocks=num_blocks, available=available))
        worker.compile_or_warm_up_model()
        return worker


def _aot(config: Any) -> bool:
    return getattr(config.compilation_config, "mode", None) is not None


def build(memory: EngineDevice, hidden_states_extra: int = 0, kv_extra: int = 0) -> FakeVllm:
    """A fresh fake vLLM. ``kv_extra`` makes the KV-cache phase allocate one more buffer (a LOAD that
    diverges from SAVE)."""
    trace = Trace()
    torch_v2, torch_v1 = _fake_torch(trace), _fake_torch(trace)
    capturing = {"enabled": True}

    def mod(name: str, **attrs: Any) -> ModuleType:
        m = ModuleType(name)
        m.__dict__.update(attrs)
        return m

    def set_cudagraph_capturing_enabled(enabled: bool) -> None:
        trace(f"capturing_enabled:{enabled}")
        capturing["enabled"] = enabled

    monitor = mod("vllm.compilation.monitor", set_cudagraph_capturing_enabled=set_cudagraph_capturing_enabled)
    # vllm.distributed: the TP group's custom all-reduce, where the config asks for one (fakevllm_allreduce.py)
    custom_all_reduce, parallel_state, init_custom_all_reduce = fakevllm_allreduce.modules(memory, trace)
    graph_capture = partial(fakevllm_allreduce.graph_capture, parallel_state)

    # vllm.forward_context, vllm.compilation.cuda_graph: the wrapper, the pieces, the compiled model ---------
    BatchDescriptor, cuda_graph, CompiledModel = compilation(memory, trace, capturing, torch_v1)
    CUDAGraphWrapper = cuda_graph.CUDAGraphWrapper

    # vllm.v1.worker.gpu.cudagraph_utils ---------------------------------------------------------------
    @dataclass(frozen=True)
    class BatchExecutionDescriptor:
        cg_mode: CUDAGraphMode
        num_tokens: int
        num_reqs: int | None
        uniform_token_count: int | None = None
        num_active_loras: int = 0

    cudagraph_utils = mod("vllm.v1.worker.gpu.cudagraph_utils", torch=torch_v2)

    class ModelCudaGraphManager:
        def __init__(self, sizes: Sequence[int], cg_mode: CUDAGraphMode) -> None:
            decode_full, mixed = graph_kinds(cg_mode)
            descs: dict[CUDAGraphMode, list[Any]] = {}
            for n in sorted(sizes, reverse=True):
                if mixed == "PIECEWISE":
                    descs.setdefault(CUDAGraphMode.PIECEWISE, []).append(
                        BatchExecutionDescriptor(CUDAGraphMode.PIECEWISE, n, None)
                    )
                elif mixed == "FULL":
                    descs.setdefault(CUDAGraphMode.FULL, []).append(BatchExecutionDescriptor(CUDAGraphMode.FULL, n, n))
            for n in sorted(sizes, reverse=True):
                if decode_full:
                    descs.setdefault(CUDAGraphMode.FULL, []).append(
                        BatchExecutionDescriptor(CUDAGraphMode.FULL, n, n, 1)
                    )
            self._capture_descs = descs
            self.graphs: dict[Any, Any] = {}
            self.hidden_states: Any = None
            self._graphs_captured = False
            self.use_aux_hidden_state_outputs = False
            self.is_last_pp_rank = True
            self.use_breakable_cg = False
            self.pool = object()

        def capture(self, model: Any) -> None:
            t = cudagraph_utils.torch  # read at call time, as vLLM's module-global lookups are
            for desc in self._capture_descs.get(CUDAGraphMode.PIECEWISE, []):
                model(BatchDescriptor(desc.num_tokens), CUDAGraphMode.NONE)  # warm-up
                model(BatchDescriptor(desc.num_tokens), CUDAGraphMode.PIECEWISE)
            with graph_capture() as ca:  # the FULL graphs all-reduce their output (the custom all-reduce's, if any)
                for desc in self._capture_descs.get(CUDAGraphMode.FULL, []):
                    if self.hidden_states is None:  # vLLM allocates it in the first warm-up forward
                        self.hidden_states = memory.allocate(1 << 20)
                    graph = t.cuda.CUDAGraph()
                    with t.cuda.graph(graph, self.pool):
                        out = model(BatchDescriptor(desc.num_tokens), CUDAGraphMode.NONE)
                        memory.copy(self.hidden_states, out)  # the graph's output: vLLM's persistent buffer
                        fakevllm_allreduce.all_reduce(ca, self.hidden_states)
                        trace(f"capture:{desc.num_tokens}")
                    self.graphs[desc] = graph
            self._graphs_captured = True

        def dispatch(self, num_tokens: int, uniform: bool) -> Any:
            for mode in (CUDAGraphMode.FULL, CUDAGraphMode.PIECEWISE):
                for desc in sorted(self._capture_descs.get(mode, []), key=lambda d: d.num_tokens):
                    if desc.num_tokens >= num_tokens and (uniform or desc.uniform_token_count is None):
                        return desc
            return None

    cudagraph_utils.BatchExecutionDescriptor = BatchExecutionDescriptor  # type: ignore[attr-defined]
    cudagraph_utils.ModelCudaGraphManager = ModelCudaGraphManager  # type: ignore[attr-defined]

    # vllm.v1.worker.gpu.model_runner (V2) ---------------------------------------------------------------
    class GPUModelRunnerV2:
        def __init__(self, config: Any) -> None:
            self.config = config
            self.input_ids = memory.allocate(4096)
            self.cudagraph_manager: Any = None
            self.lora_config = None

        def load_model(self) -> None:
            self.weights = [memory.allocate(3 << 20) for _ in range(3)]
            self.model = CompiledModel(
                self.config.fake_pieces,
                self.config.compilation_config.cudagraph_mode,
                self.input_ids,
                self.weights[0],
                _aot(self.config),
            )

        def initialize_kv_cache(self, kv_cache_config: Any) -> None:
            self.attn_buffer = memory.allocate(8192)
            if kv_extra:
                memory.allocate(kv_extra)
            self.kv_cache = memory.allocate(kv_cache_config.num_blocks << 16)
            compilation = self.config.compilation_config
            self.cudagraph_manager = ModelCudaGraphManager(
                compilation.cudagraph_capture_sizes, compilation.cudagraph_mode
            )

        def capture_model(self) -> int:
            trace("v2.capture_model")
            self.cudagraph_manager.capture(self.model)
            return 123

        def execute(self, num_tokens: int, uniform: bool = True) -> Any:
            """One forward as execute_model dispatches it: a FULL graph, the pieces' graphs, or eager."""
            desc = self.cudagraph_manager.dispatch(num_tokens, uniform)
            if desc is not None and desc.cg_mode == CUDAGraphMode.FULL:
                self.cudagraph_manager.graphs[desc].replay()
                return self.cudagraph_manager.hidden_states
            mode = CUDAGraphMode.NONE if desc is None else CUDAGraphMode.PIECEWISE
            return self.model(BatchDescriptor(num_tokens if desc is None else desc.num_tokens), mode)

        def execute_decode(self, num_reqs: int) -> Any:
            return self.execute(num_reqs)

    def profile_run(runner: Any) -> None:
        """The profile's forward passes, as both runners run them (the worker measures memory around them)."""
        trace("profile_run")
        runner.model(BatchDescriptor(16), CUDAGraphMode.NONE)  # a real forward: compiles
        if runner.config.fake_workspace:
            current_workspace_manager().get(runner.config.fake_workspace)  # the largest batch's (MoE)
        memory.allocate(5 << 20)  # activations the profile leaves cached

    GPUModelRunnerV2.profile_run = profile_run  # type: ignore[attr-defined]
    model_runner_v2 = mod("vllm.v1.worker.gpu.model_runner", GPUModelRunner=GPUModelRunnerV2)

    # vllm.v1.worker.gpu_model_runner (V1) ----------------------------------------------------------------
    class Dispatcher:
        def __init__(self, sizes: Sequence[int], cg_mode: CUDAGraphMode) -> None:
            decode_full, mixed = graph_kinds(cg_mode)
            ordered = sorted(sizes, reverse=True)
            self.keys: dict[CUDAGraphMode, list[Any]] = {}
            if mixed == "PIECEWISE":
                self.keys[CUDAGraphMode.PIECEWISE] = [BatchDescriptor(n) for n in ordered]
            full = [BatchDescriptor(n, n, True) for n in ordered] if decode_full else []
            full += [BatchDescriptor(n) for n in ordered] if mixed == "FULL" else []
            if full:
                self.keys[CUDAGraphMode.FULL] = full
            self.descs = self.keys.get(CUDAGraphMode.FULL, [])

        def get_capture_descs(self) -> list[tuple[CUDAGraphMode, list[Any]]]:
            return [(m, list(self.keys[m])) for m in (CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL) if m in self.keys]

        def dispatch(self, num_tokens: int, uniform: bool) -> tuple[CUDAGraphMode, Any]:
            for mode in (CUDAGraphMode.FULL, CUDAGraphMode.PIECEWISE):
                for desc in reversed(self.keys.get(mode, [])):
                    if desc.num_tokens >= num_tokens and (uniform or not desc.uniform):
                        return mode, desc
            return CUDAGraphMode.NONE, BatchDescriptor(num_tokens)

    class GPUModelRunnerV1:
        def __init__(self, config: Any) -> None:
            self.config = config
            self.input_ids = memory.allocate(4096)

        def load_model(self) -> None:
            self.weights = [memory.allocate(3 << 20) for _ in range(3)]
            compiled = CompiledModel(
                self.config.fake_pieces,
                self.config.compilation_config.cudagraph_mode,
                self.input_ids,
                self.weights[0],
                _aot(self.config),
            )
            has_full = graph_kinds(self.config.compilation_config.cudagraph_mode)[0] or (
                graph_kinds(self.config.compilation_config.cudagraph_mode)[1] == "FULL"
            )
            self.model = CUDAGraphWrapper(compiled, CUDAGraphMode.FULL) if has_full else compiled

        def initialize_kv_cache(self, kv_cache_config: Any) -> None:
            self.kv_cache = memory.allocate(kv_cache_config.num_blocks << 16)
            compilation = self.config.compilation_config
            self.cudagraph_dispatcher = Dispatcher(compilation.cudagraph_capture_sizes, compilation.cudagraph_mode)

        def capture_model(self) -> int:
            trace("v1.capture_model")
            with graph_capture() as ca:
                for mode, descs in self.cudagraph_dispatcher.get_capture_descs():
                    for desc in descs:
                        self.model(desc, CUDAGraphMode.NONE)  # warm-up
                        self.model(desc, mode)
                        fakevllm_allreduce.all_reduce(ca, self.input_ids)
            lock_workspace()
            set_cudagraph_capturing_enabled(False)
            return 456

        def execute(self, num_tokens: int, uniform: bool = True) -> Any:
            mode, desc = self.cudagraph_dispatcher.dispatch(num_tokens, uniform)
            return self.model(desc, mode)

        def execute_decode(self, num_reqs: int) -> Any:
            return self.execute(num_reqs)

    def lock_workspace() -> None:
        trace("lock_workspace")
        current_workspace_manager().lock()

    GPUModelRunnerV1.profile_run = profile_run  # type: ignore[attr-defined]
    GPUModelRunnerV1.__module__ = "vllm.v1.worker.gpu_model_runner"
    model_runner_v1 = mod(
        "vllm.v1.worker.gpu_model_runner",
        GPUModelRunner=GPUModelRunnerV1,
        lock_workspace=lock_workspace,
        set_cudagraph_capturing_enabled=set_cudagraph_capturing_enabled,
    )

    # vllm.v1.worker.workspace: grown on demand, locked by V1's capture_model (fakevllm_workspace.py) -------
    workspace = workspace_module(memory.allocate, trace)
    current_workspace_manager = workspace.current_workspace_manager

    # vllm.v1.worker.gpu_worker ---------------------------------------------------------------------------
    gpu_worker = mod("vllm.v1.worker.gpu_worker")

    def init_worker_distributed_environment(
        vllm_config: Any, rank: int, method: str | None = None, local_rank: int = -1, backend: str = "nccl"
    ) -> None:
        trace("init_distributed")
        memory.allocate(1 << 20)  # communication scratch
        parallel = vllm_config.parallel_config
        if parallel.tensor_parallel_size > 1 and not parallel.disable_custom_all_reduce and vllm_config.fake_custom_ar:
            init_custom_all_reduce(rank, parallel.tensor_parallel_size)

    def kernel_warmup(worker: Any) -> None:
        trace("kernel_warmup")

    class Worker:
        def __init__(self, vllm_config: Any, rank: int = 0) -> None:
            self.vllm_config, self.rank = vllm_config, rank

        def init_device(self) -> None:
            trace("set_device")
            gpu_worker.init_worker_distributed_environment(self.vllm_config, self.rank, "tcp://x", self.rank)
            # vLLM's memory snapshot (its profile's baseline): what Foundry did by then (none kept over Foundry)
            self.foundry_calls_at_snapshot = list(getattr(memory, "calls", ()))
            workspace.init_workspace_manager()
            runner = GPUModelRunnerV2 if self.vllm_config.use_v2_model_runner else GPUModelRunnerV1
            self.model_runner = runner(self.vllm_config)

        def load_model(self) -> None:
            trace("load_model")
            self.model_runner.load_model()

        def determine_available_memory(self) -> int:
            self.model_runner.profile_run()
            if not self.vllm_config.use_v2_model_runner:  # profile_cudagraph_memory: throwaway graphs (V1 only)
                fakevllm_allreduce.throwaway_capture(parallel_state, memory)
            self.non_torch_memory, self.available_kv_cache_memory_bytes = 2 << 20, 1 << 30  # left as vLLM leaves them
            return self.available_kv_cache_memory_bytes

        def initialize_from_config(self, kv_cache_config: Any) -> None:
            trace("initialize_kv_cache")
            self.model_runner.initialize_kv_cache(kv_cache_config)

        def compile_or_warm_up_model(self) -> None:
            if self.vllm_config.fake_compile_before_capture:
                self.model_runner.model(BatchDescriptor(16), CUDAGraphMode.NONE)  # a compile warm-up size
                if self.vllm_config.fake_workspace:
                    current_workspace_manager().get(self.vllm_config.fake_workspace // 2)
            gpu_worker.kernel_warmup(self)
            self.model_runner.capture_model()
            trace("sampler_warmup")
            self.model_runner.model(BatchDescriptor(16), CUDAGraphMode.NONE)  # eager: compiles if not yet
            if "triton.runtime.cache" in sys.modules:  # V2's warm-up step JIT-compiles the sampler's kernels
                from tests.support.faketriton import jit

                trace(f"triton:{jit('_topk_log_softmax_kernel', 'sampler')[0]}")
            if self.vllm_config.fake_workspace:
                current_workspace_manager().get(self.vllm_config.fake_workspace // 4)  # an eager MoE layer

    gpu_worker.__dict__.update(
        Worker=Worker,
        init_worker_distributed_environment=init_worker_distributed_environment,
        kernel_warmup=kernel_warmup,
    )

    platforms = mod("vllm.platforms", current_platform=SimpleNamespace(get_device_name=lambda: "Fake H200"))
    modules = {
        "vllm": mod("vllm", __version__="0.26.0"),
        "vllm.platforms": platforms,
        "vllm.envs": envs_module(),
        "vllm.forward_context": mod("vllm.forward_context", BatchDescriptor=BatchDescriptor),
        "vllm.compilation.monitor": monitor,
        "vllm.compilation.cuda_graph": cuda_graph,
        "vllm.v1.worker.gpu.cudagraph_utils": cudagraph_utils,
        "vllm.v1.worker.gpu.model_runner": model_runner_v2,
        "vllm.v1.worker.gpu_model_runner": model_runner_v1,
        "vllm.v1.worker.gpu_worker": gpu_worker,
        "vllm.v1.worker.workspace": workspace,
        "vllm.distributed.parallel_state": parallel_state,
        fakevllm_allreduce.MODULE: custom_all_reduce,
    }
    return FakeVllm(modules, trace, memory)


def inject(fake: FakeVllm, monkeypatch: Any) -> None:
    """Puts the fake modules in sys.modules for one test (monkeypatch restores them)."""
    for name, module in fake.modules.items():
        monkeypatch.setitem(sys.modules, name, module)
