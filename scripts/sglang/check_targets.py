#!/usr/bin/env python3
"""Checks, without importing SGLang, that an SGLang source tree has every name the Foundry adapter hooks or
reads (foundry/integration/sglang/patches.py's hook targets, and what lifecycle.py, graphs.py and breaks.py
read), where SGLang 0.5.17 has them.

    python3 scripts/sglang/check_targets.py /path/to/site-packages/sglang     (exit 1 naming what is missing)

It reads module-level definitions and imports, class methods, and the attributes ``self.X = ...`` assigns in
a class (scripts/vllm/check_targets.py's readers); it cannot see attributes set elsewhere, so it complements
a real run, it does not replace it.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from foundry.integration.sglang.patches import ENTRY, MODEL_HOOKS  # noqa: E402


def _readers() -> tuple[object, object]:
    spec = importlib.util.spec_from_file_location("vllm_check_targets", REPO / "scripts" / "vllm" / "check_targets.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.module_names, module.class_members


E = "srt/model_executor/"
BCG = E + "runner_backend_utils/breakable_cuda_graph/breakable_cuda_graph.py"
# (module file under sglang/, dotted name inside it, kind) beyond the hook targets
READ = [
    (E + "runner_backend/full_cuda_graph_backend.py", "torch", "global"),
    (E + "runner_backend/full_cuda_graph_backend.py", "FullCudaGraphBackend._graphs", "attribute"),
    (E + "runner_backend/full_cuda_graph_backend.py", "FullCudaGraphBackend._outputs", "attribute"),
    (E + "runner_backend/full_cuda_graph_backend.py", "FullCudaGraphBackend._device_module", "attribute"),
    (E + "runner_backend/breakable_cuda_graph_backend.py", "BreakableCUDAGraph", "global"),
    (E + "runner_backend/breakable_cuda_graph_backend.py", "BreakableCudaGraphBackend._capture_inputs", "attribute"),
    (BCG, "torch", "global"),
    (
        E + "runner_backend_utils/breakable_cuda_graph/breakable_cuda_graph.py",
        "BreakableCUDAGraph._segments",
        "attribute",
    ),
    (
        E + "runner_backend_utils/breakable_cuda_graph/breakable_cuda_graph.py",
        "BreakableCUDAGraph._break_fns",
        "attribute",
    ),
    (E + "runner/prefill_cuda_graph_runner.py", "PrefillCudaGraphRunner.capture_num_tokens", "attribute"),
    (E + "runner/prefill_cuda_graph_runner.py", "PrefillCudaGraphRunner.use_captured_attn_metadata", "attribute"),
    (E + "runner/prefill_cuda_graph_runner.py", "PrefillCudaGraphRunner._next_token_logits_buffer", "method"),
    (E + "runner/shape_key.py", "ShapeKey", "global"),
    (E + "model_runner.py", "ModelRunner.max_total_num_tokens", "attribute"),
    (E + "model_runner.py", "ModelRunner.max_running_requests", "attribute"),
    ("srt/mem_cache/kv_cache_configurator.py", "get_available_gpu_memory", "global"),
    ("srt/layers/logits_processor.py", "LogitsProcessorOutput", "global"),
    ("srt/layers/radix_attention.py", "unified_attention_with_output", "global"),
    ("srt/plugins/hook_registry.py", "HookRegistry", "global"),
    # expert parallel's lazy expert maps (foundry/integration/sglang/moe.py)
    (E + "model_runner.py", "ModelRunner.model", "attribute"),
    ("srt/layers/moe/token_dispatcher/standard.py", "StandardDispatcher.dispatch", "method"),
    ("srt/layers/moe/token_dispatcher/standard.py", "StandardDispatcher.local_expert_mapping", "attribute"),
    ("srt/layers/moe/token_dispatcher/standard.py", "StandardDispatcher.moe_ep_size", "attribute"),
    ("srt/layers/moe/token_dispatcher/standard.py", "StandardDispatcher.skip_local_expert_mapping", "attribute"),
    ("srt/layers/moe/topk.py", "StandardTopKOutput", "global"),
    # LOAD's warm-up (foundry/integration/sglang/warmup.py)
    (E + "runner/prefill_cuda_graph_runner.py", "PrefillCudaGraphRunner.capture_prepare", "method"),
    (E + "runner/prefill_cuda_graph_runner.py", "PrefillCudaGraphRunner.execute", "method"),
    (E + "runner/base_runner.py", "BaseRunner.device_module", "attribute"),
    ("srt/plugins/hook_registry.py", "HookType", "global"),
]
# Text the capture routing and the eager steps rely on.
TEXT = {
    # each capture makes its own stream: what it allocates outside the graph pool is in segments of its own
    "srt/distributed/parallel_state.py": ("stream = self.device_module.Stream()",),
    E + "runner/decode_cuda_graph_runner.py": ("self.capture_bs, self.compile_bs = ",),  # a tuple target
    E + "runner_backend/full_cuda_graph_backend.py": ("torch.cuda.CUDAGraph(", "self._device_module.graph"),
    BCG: (
        "torch.cuda.CUDAGraph", "captured_inner", "captured_args", "captured_kwargs", "captured_output",
    ),
}  # fmt: skip


def targets(root: Path) -> list[tuple[str, str, str]]:
    """The hook targets as (file, name, kind): the longest dotted prefix that is a file is the module."""
    out = []
    for target in [ENTRY, *MODEL_HOOKS]:
        parts = target.split(".")[1:]  # below sglang/
        for cut in range(len(parts) - 1, 0, -1):
            rel = "/".join(parts[:cut]) + ".py"
            if (root / rel).is_file():
                rest = parts[cut:]
                out.append((rel, ".".join(rest), "method" if len(rest) == 2 else "global"))
                break
        else:
            out.append(("/".join(parts[:-1]) + ".py", parts[-1], "global"))
    return out


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "sglang")
    module_names, class_members = _readers()
    missing = []
    trees: dict[str, ast.Module] = {}
    checks = targets(root) + READ
    for rel, name, kind in checks:
        if rel not in trees:
            path = root / rel
            trees[rel] = ast.parse(path.read_text()) if path.is_file() else ast.Module(body=[], type_ignores=[])
            if not path.is_file():
                missing.append(f"{rel}: no such file")
        if kind == "global":
            ok = name in module_names(trees[rel])  # type: ignore[operator]
        else:
            cls, member = name.split(".")
            methods, attrs = class_members(trees[rel], cls)  # type: ignore[operator]
            ok = member in (methods if kind == "method" else methods | attrs)
        if not ok:
            missing.append(f"{rel}: {kind} {name}")
    for rel, snippets in TEXT.items():
        text = (root / rel).read_text() if (root / rel).is_file() else ""
        missing += [f"{rel}: no {s!r}" for s in snippets if s not in text]
    version = ", ".join(d.name for d in root.parent.glob("sglang-*.dist-info")) or "no dist-info beside it"
    if missing:
        print(f"SGLang at {root} (version {version}) lacks what the Foundry adapter uses:\n  " + "\n  ".join(missing))
        return 1
    print(f"SGLang at {root} (version {version}): all {len(checks) + sum(map(len, TEXT.values()))} targets present")
    return 0


if __name__ == "__main__":
    sys.exit(main())
