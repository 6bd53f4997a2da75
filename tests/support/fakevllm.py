"""A fake vLLM 0.26 module tree, for CPU tests of the vLLM adapter (the fake Foundry API it runs
under: tests/support/fakefoundry.py).

The fake reproduces only the structure the adapter relies on, with vLLM's module and attribute names:
``Worker.init_device`` calls the module-global ``init_worker_distributed_environment`` after picking the
device; ``compile_or_warm_up_model`` calls the module-global ``kernel_warmup`` and then the runner's
``capture_model``; the V2 runner keeps FULL graphs in ``cudagraph_manager.graphs`` keyed by
``BatchExecutionDescriptor`` and captures them through ``cudagraph_utils.torch.cuda.CUDAGraph/graph``; the
V1 runner wraps the model in ``CUDAGraphWrapper`` whose entries are keyed by ``BatchDescriptor``. Device
memory is a cursor over a fake region: every allocation the fake engine makes is logged, like Foundry's.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any

from tests.support.fakefoundry import FakeFoundry, FakeTensor


class CUDAGraphMode(enum.Enum):
    NONE = 0
    PIECEWISE = 1
    FULL = 2
    FULL_DECODE_ONLY = 3


# ------------------------------------------------------------------------------------------- fake vLLM
@dataclass
class Trace:
    """What the fake engine did, in order."""

    events: list[str] = field(default_factory=list)

    def __call__(self, what: str) -> None:
        self.events.append(what)


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


def make_config(
    runner: str = "v2",
    capture_sizes: Sequence[int] = (1, 2, 4, 8),
    model: str = "/tmp/tiny-qwen3",
    cudagraph_mode: CUDAGraphMode = CUDAGraphMode.FULL_DECODE_ONLY,
    **model_flags: Any,
) -> SimpleNamespace:
    model_config = SimpleNamespace(
        model=model, enable_sleep_mode=False, enable_cumem_allocator=False, enforce_eager=False
    )
    for k, v in model_flags.items():
        setattr(model_config, k, v)
    return SimpleNamespace(
        model_config=model_config,
        parallel_config=SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1),
        speculative_config=None,
        lora_config=None,
        compilation_config=SimpleNamespace(cudagraph_mode=cudagraph_mode, cudagraph_capture_sizes=list(capture_sizes)),
        use_v2_model_runner=runner == "v2",
    )


@dataclass
class FakeVllm:
    """The module tree, the trace, and the allocator every fake vLLM object allocates through."""

    modules: dict[str, ModuleType]
    trace: Trace
    memory: FakeFoundry

    def module(self, name: str) -> ModuleType:
        return self.modules[name]

    def start_engine(self, config: SimpleNamespace, num_blocks: int = 100) -> Any:
        """vLLM's start-up order: init_device, load_model, determine_available_memory, initialize_from_config
        (KV cache), compile_or_warm_up_model. Returns the worker."""
        worker = self.modules["vllm.v1.worker.gpu_worker"].Worker(config)
        worker.init_device()
        worker.load_model()
        available = worker.determine_available_memory()
        worker.initialize_from_config(SimpleNamespace(num_blocks=num_blocks, available=available))
        worker.compile_or_warm_up_model()
        return worker


def build(memory: FakeFoundry, hidden_states_extra: int = 0, kv_extra: int = 0) -> FakeVllm:
    """A fresh fake vLLM. ``kv_extra`` makes the KV-cache phase allocate one more buffer (a LOAD that
    diverges from SAVE)."""
    trace = Trace()
    torch_v2, torch_v1 = _fake_torch(trace), _fake_torch(trace)

    def mod(name: str, **attrs: Any) -> ModuleType:
        m = ModuleType(name)
        m.__dict__.update(attrs)
        return m

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
        def __init__(self, sizes: Sequence[int]) -> None:
            self.graphs: dict[Any, Any] = {}
            self._capture_descs = {
                CUDAGraphMode.FULL: [
                    BatchExecutionDescriptor(CUDAGraphMode.FULL, n, n, 1) for n in sorted(sizes, reverse=True)
                ]
            }
            self.hidden_states: Any = None
            self._graphs_captured = False
            self.use_aux_hidden_state_outputs = False
            self.is_last_pp_rank = True
            self.pool = object()

        def capture(self) -> None:
            t = cudagraph_utils.torch  # read at call time, as vLLM's module-global lookups are
            for desc in self._capture_descs[CUDAGraphMode.FULL]:
                if self.hidden_states is None:  # vLLM allocates it in the first warm-up forward
                    self.hidden_states = memory.allocate(1 << 20)
                graph = t.cuda.CUDAGraph()
                with t.cuda.graph(graph, self.pool):
                    trace(f"capture:{desc.num_tokens}")
                self.graphs[desc] = graph
            self._graphs_captured = True

        def dispatch(self, num_reqs: int) -> Any:
            for desc in sorted(self._capture_descs[CUDAGraphMode.FULL], key=lambda d: d.num_tokens):
                if desc.num_tokens >= num_reqs:
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

        def load_model(self) -> None:
            self.weights = [memory.allocate(3 << 20) for _ in range(3)]

        def initialize_kv_cache(self, kv_cache_config: Any) -> None:
            self.attn_buffer = memory.allocate(8192)
            if kv_extra:
                memory.allocate(kv_extra)
            self.kv_cache = memory.allocate(kv_cache_config.num_blocks << 16)
            self.cudagraph_manager = ModelCudaGraphManager(self.config.compilation_config.cudagraph_capture_sizes)

        def capture_model(self) -> int:
            trace("v2.capture_model")
            self.cudagraph_manager.capture()
            return 123

        def execute_decode(self, num_reqs: int) -> Any:
            desc = self.cudagraph_manager.dispatch(num_reqs)
            self.cudagraph_manager.graphs[desc].replay()
            return self.cudagraph_manager.hidden_states

    model_runner_v2 = mod("vllm.v1.worker.gpu.model_runner", GPUModelRunner=GPUModelRunnerV2)

    # vllm.forward_context, vllm.compilation.cuda_graph, vllm.v1.worker.gpu_model_runner (V1) -----------
    @dataclass(frozen=True)
    class BatchDescriptor:
        num_tokens: int
        num_reqs: int | None = None
        uniform: bool = False
        has_lora: bool = False
        num_active_loras: int = 0

    @dataclass
    class CUDAGraphEntry:
        batch_descriptor: Any
        cudagraph: Any = None
        output: Any = None

    cuda_graph = mod("vllm.compilation.cuda_graph", torch=torch_v1, CUDAGraphEntry=CUDAGraphEntry)

    class CUDAGraphWrapper:
        def __init__(self) -> None:
            self.concrete_cudagraph_entries: dict[Any, Any] = {}

        def __call__(self, desc: Any) -> Any:
            t = cuda_graph.torch
            entry = self.concrete_cudagraph_entries.setdefault(desc, CUDAGraphEntry(desc))
            if entry.cudagraph is None:
                graph = t.cuda.CUDAGraph()
                with t.cuda.graph(graph, pool=None, stream=None):
                    output = memory.allocate(desc.num_tokens * 2048)
                entry.cudagraph, entry.output = graph, output
                return output
            entry.cudagraph.replay()
            return entry.output

    cuda_graph.CUDAGraphWrapper = CUDAGraphWrapper  # type: ignore[attr-defined]

    class Dispatcher:
        def __init__(self, sizes: Sequence[int]) -> None:
            self.descs = [BatchDescriptor(n, n, True) for n in sorted(sizes, reverse=True)]

        def get_capture_descs(self) -> list[tuple[CUDAGraphMode, list[Any]]]:
            return [(CUDAGraphMode.FULL, list(self.descs))]

    class GPUModelRunnerV1:
        def __init__(self, config: Any) -> None:
            self.config = config
            self.input_ids = memory.allocate(4096)

        def load_model(self) -> None:
            self.weights = [memory.allocate(3 << 20) for _ in range(3)]
            self.model = CUDAGraphWrapper()

        def initialize_kv_cache(self, kv_cache_config: Any) -> None:
            self.kv_cache = memory.allocate(kv_cache_config.num_blocks << 16)
            self.cudagraph_dispatcher = Dispatcher(self.config.compilation_config.cudagraph_capture_sizes)

        def capture_model(self) -> int:
            trace("v1.capture_model")
            for desc in self.cudagraph_dispatcher.descs:
                self.model(desc)
            lock_workspace()
            set_cudagraph_capturing_enabled(False)
            return 456

        def execute_decode(self, num_reqs: int) -> Any:
            desc = next(d for d in reversed(self.cudagraph_dispatcher.descs) if d.num_tokens >= num_reqs)
            return self.model(desc)

    def lock_workspace() -> None:
        trace("lock_workspace")

    def set_cudagraph_capturing_enabled(enabled: bool) -> None:
        trace(f"capturing_enabled:{enabled}")

    GPUModelRunnerV1.__module__ = "vllm.v1.worker.gpu_model_runner"
    model_runner_v1 = mod(
        "vllm.v1.worker.gpu_model_runner",
        GPUModelRunner=GPUModelRunnerV1,
        lock_workspace=lock_workspace,
        set_cudagraph_capturing_enabled=set_cudagraph_capturing_enabled,
    )

    # vllm.v1.worker.gpu_worker ---------------------------------------------------------------------------
    gpu_worker = mod("vllm.v1.worker.gpu_worker")

    def init_worker_distributed_environment(
        vllm_config: Any, rank: int, method: str | None = None, local_rank: int = -1, backend: str = "nccl"
    ) -> None:
        trace("init_distributed")
        memory.allocate(1 << 20)  # communication scratch

    def kernel_warmup(worker: Any) -> None:
        trace("kernel_warmup")

    class Worker:
        def __init__(self, vllm_config: Any) -> None:
            self.vllm_config = vllm_config

        def init_device(self) -> None:
            trace("set_device")
            gpu_worker.init_worker_distributed_environment(self.vllm_config, 0, "tcp://x", 0)
            runner = GPUModelRunnerV2 if self.vllm_config.use_v2_model_runner else GPUModelRunnerV1
            self.model_runner = runner(self.vllm_config)

        def load_model(self) -> None:
            trace("load_model")
            self.model_runner.load_model()

        def determine_available_memory(self) -> int:
            trace("profile_run")
            memory.allocate(5 << 20)  # activations the profile leaves cached
            return 1 << 30

        def initialize_from_config(self, kv_cache_config: Any) -> None:
            trace("initialize_kv_cache")
            self.model_runner.initialize_kv_cache(kv_cache_config)

        def compile_or_warm_up_model(self) -> None:
            gpu_worker.kernel_warmup(self)
            self.model_runner.capture_model()
            trace("sampler_warmup")

    gpu_worker.__dict__.update(
        Worker=Worker,
        init_worker_distributed_environment=init_worker_distributed_environment,
        kernel_warmup=kernel_warmup,
    )

    platforms = mod("vllm.platforms", current_platform=SimpleNamespace(get_device_name=lambda: "Fake H200"))
    modules = {
        "vllm": mod("vllm", __version__="0.26.0"),
        "vllm.platforms": platforms,
        "vllm.forward_context": mod("vllm.forward_context", BatchDescriptor=BatchDescriptor),
        "vllm.compilation.cuda_graph": cuda_graph,
        "vllm.v1.worker.gpu.cudagraph_utils": cudagraph_utils,
        "vllm.v1.worker.gpu.model_runner": model_runner_v2,
        "vllm.v1.worker.gpu_model_runner": model_runner_v1,
        "vllm.v1.worker.gpu_worker": gpu_worker,
    }
    return FakeVllm(modules, trace, memory)


def inject(fake: FakeVllm, monkeypatch: Any) -> None:
    """Puts the fake modules in sys.modules for one test (monkeypatch restores them)."""
    for name, module in fake.modules.items():
        monkeypatch.setitem(sys.modules, name, module)
