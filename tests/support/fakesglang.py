"""A fake SGLang 0.5.17 module tree, for CPU tests of the SGLang adapter, over the stand-in Foundry
(tests/support/fakefoundry.py) or over Foundry itself on the fake driver (tests/support/engine_processes.py);
the CUDA-graph runners and backends: tests/support/fakesglang_graphs.py.

It reproduces only the structure the adapter relies on, with SGLang's module and attribute names: the plugin
hook registry (``HookRegistry.register`` / ``apply_hooks``, targets resolved by dotted name, AROUND hooks) and
``load_plugins``, which calls the ``sglang.srt.plugins`` entry point once per process; the scheduler process's
start-up, ``Scheduler.init_model_worker``: ``ModelRunner.__init__`` (``init_torch_distributed``, then
``load_model``), ``alloc_memory_pool`` (``KVCacheConfigurator._profile_available_bytes``, which releases the
allocator's cache through its module's ``get_available_gpu_memory``), ``init_attention_backends`` and
``init_cuda_graphs`` (``cuda_graph_setup.capture_cuda_graphs``: shared logits buffer, eager runner, the prefill
runner unless disabled or refused by ``should_skip_auto_prefill_cuda_graph_for_memory``, the decode runner);
the model's MoE layers, whose ``StandardDispatcher`` makes its expert map on its first dispatch under expert
parallel (the decode runner's warm-up forward). Device memory and the model's layers are the ``EngineDevice``
it is built with (tests/support/faketensor.py).
"""

from __future__ import annotations

import dataclasses
import os
import pkgutil
import sys
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any, ClassVar, NamedTuple

from tests.support import fakesglang_allreduce
from tests.support.enginetrace import Trace
from tests.support.fakesglang_graphs import DECODE, PREFILL, fake_torch, graph_modules, mod
from tests.support.faketensor import EngineDevice

SCHEDULER = "sglang.srt.managers.scheduler"
RUNNER = "sglang.srt.model_executor.model_runner"
KV = "sglang.srt.mem_cache.kv_cache_configurator"
SETUP = "sglang.srt.model_executor.model_runner_components.cuda_graph_setup"
DISPATCHER = "sglang.srt.layers.moe.token_dispatcher.standard"
TOPK = "sglang.srt.layers.moe.topk"
CELL = 1 << 12  # bytes of KV cache per token


@dataclass
class PhaseConfig:
    backend: str
    bs: list[int]


@dataclass
class CudaGraphConfig:
    decode: PhaseConfig = field(default_factory=lambda: PhaseConfig("full", [1, 2, 4, 8]))
    prefill: PhaseConfig = field(default_factory=lambda: PhaseConfig("breakable", [16, 64, 128]))


@dataclass
class ServerArgs:
    """The ServerArgs fields the adapter reads (and a few it must not compare: host, port, nccl_port)."""

    model_path: str = "/tmp/tiny-qwen3"
    mem_fraction_static: float = 0.5
    random_seed: int = 0
    tp_size: int = 1
    dp_size: int = 1
    pp_size: int = 1
    ep_size: int = 1
    moe_a2a_backend: str = "none"
    moe_runner_backend: str = "auto"
    enable_eplb: bool = False
    enable_dp_attention: bool = False
    disable_custom_all_reduce: bool = False
    enable_torch_symm_mem: bool = False
    enable_memory_saver: bool = False
    enable_lora: bool = False
    speculative_algorithm: str | None = None
    disable_cuda_graph: bool = False
    disaggregation_mode: str = "null"
    cuda_graph_config: CudaGraphConfig = field(default_factory=CudaGraphConfig)
    host: str = "127.0.0.1"
    port: int = 30000
    nccl_port: int = 0
    log_level: str = "info"


@dataclass
class FakeSglang:
    modules: dict[str, ModuleType]
    trace: Trace
    memory: EngineDevice

    def module(self, name: str) -> ModuleType:
        return self.modules[name]

    def start_scheduler(self, server_args: ServerArgs, tp_rank: int = 0) -> Any:
        """A scheduler process (of tensor-parallel rank ``tp_rank``): plugins loaded, then the model worker
        built. Returns the model runner."""
        self.modules["sglang.srt.plugins"].load_plugins()
        scheduler = self.modules[SCHEDULER].Scheduler(server_args, tp_rank)
        return scheduler.model_runner


def _hook_registry() -> type:
    class HookRegistry:
        """SGLang's registry, AROUND hooks only: ``hook(original, *args, **kwargs)``."""

        _hooks: ClassVar[dict[str, list[Any]]] = {}
        _patched: ClassVar[set[str]] = set()

        @classmethod
        def register(cls, target: str, hook: Any, hook_type: Any = "after") -> None:
            assert hook_type == "around", "the adapter registers AROUND hooks"
            cls._hooks.setdefault(target, []).append(hook)

        @classmethod
        def apply_hooks(cls) -> None:
            for target, hooks in cls._hooks.items():
                if target in cls._patched:
                    continue
                owner_path, name = target.rsplit(".", 1)
                owner = pkgutil.resolve_name(owner_path)
                wrapped = getattr(owner, name)
                for hook in hooks:
                    wrapped = (lambda h, o: lambda *a, **k: h(o, *a, **k))(hook, wrapped)
                setattr(owner, name, wrapped)
                cls._patched.add(target)

    return HookRegistry


def build(
    memory: EngineDevice, available_bytes: int = 64 * CELL, kv_extra: int = 0, free_gb: float = 40.0, cell: int = CELL
) -> Any:
    """A fresh fake SGLang. ``available_bytes``: what its memory measurement finds for the KV cache;
    ``kv_extra``: one more buffer in the memory-pool phase (a LOAD that diverges); ``free_gb``: the free memory
    the prefill-graph memory gate sees; ``cell``: KV bytes per token (another KV layout)."""
    trace = Trace()
    # the TP group's custom all-reduce where tensor parallel asks for it (fakesglang_allreduce.py)
    parallel_state, init_custom_all_reduce = fakesglang_allreduce.modules(memory, trace)
    modules = graph_modules(memory, trace, parallel_state)
    registry = _hook_registry()
    loaded = {"done": False}

    def load_plugins() -> None:
        if loaded["done"]:
            return
        loaded["done"] = True
        from foundry.integration.sglang.plugin import register  # what the entry point names

        register()
        registry.apply_hooks()

    # mem_cache/kv_cache_configurator ------------------------------------------------------------------------
    def get_available_gpu_memory(device: str, gpu_id: int, **kwargs: Any) -> float:
        trace("empty_cache")
        return free_gb

    kv = mod(KV, get_available_gpu_memory=get_available_gpu_memory)

    @dataclass
    class KVCacheConfigurator:
        device: str
        gpu_id: int
        is_draft_worker: bool = False

        def _profile_available_bytes(self, pre_model_load_memory: int) -> int:
            kv.get_available_gpu_memory(self.device, self.gpu_id)
            trace("profile")
            return available_bytes

        def configure(self, pre_model_load_memory: int) -> tuple[int, int]:
            tokens = self._profile_available_bytes(pre_model_load_memory) // cell
            return tokens, min(tokens // 2, 4096)

    kv.KVCacheConfigurator = KVCacheConfigurator  # type: ignore[attr-defined]

    # model_runner_components/cuda_graph_setup ----------------------------------------------------------------
    setup = mod(SETUP)

    def should_skip_auto_prefill_cuda_graph_for_memory(available_memory_gb: float, locked: set[Any]) -> bool:
        return available_memory_gb < 4.0

    def capture_cuda_graphs(*, model_runner: Any) -> Any:
        mr = model_runner
        config = mr.server_args.cuda_graph_config
        mr.graph_shared_output = modules["sglang.srt.model_executor.graph_shared_output"].GraphSharedOutput()
        eager = SimpleNamespace(buffers=memory.allocate(1 << 16))  # the eager runner's buffers
        prefill: Any = eager
        free = kv.get_available_gpu_memory(mr.device, mr.gpu_id)
        if config.prefill.backend != "disabled" and not setup.should_skip_auto_prefill_cuda_graph_for_memory(
            free, set()
        ):
            prefill = modules[PREFILL].PrefillCudaGraphRunner(mr)
        kv.get_available_gpu_memory(mr.device, mr.gpu_id)
        decode = None if config.decode.backend == "disabled" else modules[DECODE].DecodeCudaGraphRunner(mr)
        return SimpleNamespace(eager_runner=eager, prefill=prefill, decode=decode)

    setup.__dict__.update(
        should_skip_auto_prefill_cuda_graph_for_memory=should_skip_auto_prefill_cuda_graph_for_memory,
        capture_cuda_graphs=capture_cuda_graphs,
    )

    # layers/moe: the standard dispatcher, which maps global to local experts on its first dispatch (expert
    # parallel), and the top-k output it takes --------------------------------------------------------------
    class StandardTopKOutput(NamedTuple):
        topk_weights: Any
        topk_ids: Any
        router_logits: Any

    class StandardDispatcher:
        def __init__(self, server_args: Any, rank: int, num_experts: int = 8) -> None:
            self.moe_ep_size, self.moe_ep_rank = server_args.ep_size, rank
            self.num_experts = num_experts
            self.skip_local_expert_mapping = False
            self.local_expert_mapping: Any = None

        def dispatch(self, hidden_states: Any, topk_output: Any) -> Any:
            standard = isinstance(topk_output, StandardTopKOutput)
            if self.moe_ep_size > 1 and standard and self.local_expert_mapping is None:
                trace("expert_map")
                self.local_expert_mapping = memory.allocate(self.num_experts * 4)
            return hidden_states

    class MoeLayer:
        def __init__(self, server_args: Any, rank: int) -> None:
            self.dispatcher = StandardDispatcher(server_args, rank)

    class Model:
        """The model's modules (``modules()`` as a torch module lists them): the MoE layers' dispatchers."""

        def __init__(self, server_args: Any, rank: int) -> None:
            self.layers = [MoeLayer(server_args, rank) for _ in range(2)]

        def modules(self) -> list[Any]:
            return [self, *self.layers]

        def forward(self) -> None:
            """What the MoE layers do of a forward that the adapter depends on: dispatch (each layer's first
            makes its expert map under expert parallel)."""
            for layer in self.layers:
                layer.dispatcher.dispatch(None, StandardTopKOutput(None, None, None))

    # model_executor/model_runner -----------------------------------------------------------------------------
    class AttentionBackend:
        def __init__(self) -> None:
            self.kv_indptr = memory.allocate(1 << 14)

        def init_cuda_graph_state(self, max_bs: int) -> None:
            self.cuda_graph_kv_indices = memory.allocate(max_bs * 1024)

    class ModelRunner:
        def __init__(self, server_args: Any, tp_rank: int = 0) -> None:
            self.server_args = server_args
            # SGLang 0.5.17 keeps the runner's ranks in its parallel state
            self.ps = SimpleNamespace(tp_rank=tp_rank, tp_size=server_args.tp_size)
            self.model_config = SimpleNamespace(
                hf_config=SimpleNamespace(to_dict=lambda: {"model_type": "qwen3"}), dtype="bfloat16", context_len=2048
            )
            self.device, self.gpu_id, self.is_draft_worker = "cuda", 0, False
            self.device_module = fake_torch(trace).cuda
            trace("set_device")
            self.init_torch_distributed()
            self.load_model()

        def init_torch_distributed(self) -> None:
            trace("init_torch_distributed")
            memory.allocate(1 << 20)  # communication scratch
            sa = self.server_args
            if sa.tp_size > 1 and not sa.disable_custom_all_reduce:  # V2 unless SGLang's switch says the legacy one
                legacy = os.environ.get("SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2") == "0"
                init_custom_all_reduce(self.ps.tp_rank, sa.tp_size, legacy)

        def load_model(self) -> None:
            trace("load_model")
            self.weights = [memory.allocate(3 << 20) for _ in range(3)]
            self.model = Model(self.server_args, self.ps.tp_rank)

        def alloc_memory_pool(self) -> None:
            configurator = KVCacheConfigurator(self.device, self.gpu_id)
            self.max_total_num_tokens, self.max_running_requests = configurator.configure(pre_model_load_memory=0)
            self.req_to_token_pool = memory.allocate(self.max_running_requests * 8)
            if kv_extra:
                memory.allocate(kv_extra)
            self.kv_cache = memory.allocate(self.max_total_num_tokens * cell)

        def init_attention_backends(self) -> None:
            self.attn_backend = AttentionBackend()
            if "triton.runtime.cache" in sys.modules:  # the triton backend's kernels, JIT-compiled (faketriton.py)
                from tests.support.faketriton import jit

                trace(f"triton:{jit('_fwd_kernel', 'triton attention')[0]}")
            if os.environ.get("FAKE_SGLANG_JIT"):  # a norm kernel, JIT-built through tvm-ffi (fakejit.py)
                from tests.support.fakejit import load_jit

                trace(f"jit:{load_jit('fused_norm')}")

        def init_cuda_graphs(self) -> None:
            trace("init_cuda_graphs")
            capture = setup.capture_cuda_graphs(model_runner=self)
            self.eager_runner = capture.eager_runner
            self.prefill_cuda_graph_runner = capture.prefill
            self.decode_cuda_graph_runner = capture.decode

    # managers/scheduler --------------------------------------------------------------------------------------
    class Scheduler:
        def __init__(self, server_args: Any, tp_rank: int = 0) -> None:
            self.server_args = server_args
            self.tp_rank = tp_rank
            self.init_model_worker()

        def init_model_worker(self) -> None:
            self.model_runner = ModelRunner(self.server_args, self.tp_rank)
            self.model_runner.alloc_memory_pool()
            self.model_runner.init_attention_backends()
            self.model_runner.init_cuda_graphs()

    modules.update(
        {
            "sglang": mod("sglang", __version__="0.5.17", __path__=[]),
            "sglang.srt.plugins": mod("sglang.srt.plugins", load_plugins=load_plugins, __path__=[]),
            "sglang.srt.plugins.hook_registry": mod(
                "sglang.srt.plugins.hook_registry",
                HookRegistry=registry,
                HookType=SimpleNamespace(AROUND="around", BEFORE="before", AFTER="after", REPLACE="replace"),
            ),
            SCHEDULER: mod(SCHEDULER, Scheduler=Scheduler),
            parallel_state.__name__: parallel_state,
            RUNNER: mod(RUNNER, ModelRunner=ModelRunner),
            KV: kv,
            SETUP: setup,
            DISPATCHER: mod(DISPATCHER, StandardDispatcher=StandardDispatcher),
            TOPK: mod(TOPK, StandardTopKOutput=StandardTopKOutput),
        }
    )
    # every package on the way, so that SGLang's dotted names resolve (pkgutil.resolve_name imports each prefix)
    for name in list(modules):
        parts = name.split(".")
        for i in range(1, len(parts)):
            modules.setdefault(".".join(parts[:i]), mod(".".join(parts[:i]), __path__=[]))
    for name in modules:
        if not hasattr(modules[name], "__path__") and any(other.startswith(name + ".") for other in modules):
            modules[name].__path__ = []  # type: ignore[attr-defined]
    return FakeSglang(modules, trace, memory)


def inject(fake: FakeSglang, monkeypatch: Any) -> None:
    """Puts the fake modules in sys.modules for one test (monkeypatch restores them)."""
    for name, module in fake.modules.items():
        monkeypatch.setitem(sys.modules, name, module)


def server_args(**changes: Any) -> ServerArgs:
    args = ServerArgs()
    config = CudaGraphConfig()
    for phase in ("decode", "prefill"):
        for key in ("backend", "bs"):
            value = changes.pop(f"{phase}_{key}", None)
            if value is not None:
                setattr(getattr(config, phase), key, value)
    return dataclasses.replace(args, cuda_graph_config=config, **changes)
