#!/usr/bin/env python3
"""Checks, without importing anything, that a vLLM source tree has every name the Foundry adapter hooks or
reads (foundry/integration/vllm/patches.py, graphs.py, workspace.py; the module shared/capture.py swaps torch in), where
vLLM 0.26.0 has them.

    python3 scripts/vllm/check_targets.py /path/to/site-packages/vllm     (exit 1 naming what is missing)

It reads module-level definitions and imports, class methods, and the attributes ``self.X = ...`` assigns
in a class; it cannot see attributes set elsewhere, so it complements a real run, it does not replace it.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

# (module file under vllm/, dotted name inside it, what kind of name)
TARGETS = [
    ("v1/worker/gpu_worker.py", "Worker.init_device", "method"),
    ("v1/worker/gpu_worker.py", "Worker.load_model", "method"),
    ("v1/worker/gpu_worker.py", "Worker.determine_available_memory", "method"),
    ("v1/worker/gpu_worker.py", "Worker.initialize_from_config", "method"),
    ("v1/worker/gpu_worker.py", "Worker.compile_or_warm_up_model", "method"),
    ("v1/worker/gpu_worker.py", "init_worker_distributed_environment", "global"),
    ("v1/worker/gpu_worker.py", "kernel_warmup", "global"),
    ("v1/worker/gpu/model_runner.py", "GPUModelRunner.capture_model", "method"),
    ("v1/worker/gpu/model_runner.py", "GPUModelRunner.cudagraph_manager", "attribute"),
    ("v1/worker/gpu/cudagraph_utils.py", "torch", "global"),
    ("v1/worker/gpu/cudagraph_utils.py", "CudaGraphManager.graphs", "attribute"),
    ("v1/worker/gpu/cudagraph_utils.py", "CudaGraphManager._capture_descs", "attribute"),
    ("v1/worker/gpu/cudagraph_utils.py", "CudaGraphManager._graphs_captured", "attribute"),
    ("v1/worker/gpu/cudagraph_utils.py", "CudaGraphManager.is_last_pp_rank", "attribute"),
    ("v1/worker/gpu/cudagraph_utils.py", "ModelCudaGraphManager.hidden_states", "attribute"),
    ("v1/worker/gpu/cudagraph_utils.py", "ModelCudaGraphManager.use_aux_hidden_state_outputs", "attribute"),
    ("v1/worker/gpu/cudagraph_utils.py", "BatchExecutionDescriptor", "global"),
    ("v1/worker/gpu_model_runner.py", "GPUModelRunner.capture_model", "method"),
    ("v1/worker/gpu_model_runner.py", "GPUModelRunner.cudagraph_dispatcher", "attribute"),
    ("v1/worker/workspace.py", "is_workspace_manager_initialized", "global"),
    ("v1/worker/workspace.py", "current_workspace_manager", "global"),
    ("v1/worker/workspace.py", "WorkspaceManager._current_workspaces", "attribute"),
    ("v1/worker/workspace.py", "WorkspaceManager.lock", "method"),
    ("v1/worker/workspace.py", "WorkspaceManager.is_locked", "method"),
    ("v1/worker/gpu_model_runner.py", "set_cudagraph_capturing_enabled", "global"),
    ("compilation/cuda_graph.py", "torch", "global"),
    ("compilation/cuda_graph.py", "CUDAGraphEntry", "global"),
    ("compilation/cuda_graph.py", "CUDAGraphWrapper.concrete_cudagraph_entries", "attribute"),
    ("v1/cudagraph_dispatcher.py", "CudagraphDispatcher.get_capture_descs", "method"),
    ("forward_context.py", "BatchDescriptor", "global"),
    ("plugins/__init__.py", "DEFAULT_PLUGINS_GROUP", "global"),
]
# Calls the capture patch relies on: vLLM must capture through these names of the module's torch.
CAPTURE_CALLS = {
    "v1/worker/gpu/cudagraph_utils.py": ("torch.cuda.CUDAGraph", "torch.cuda.graph"),
    "compilation/cuda_graph.py": ("torch.cuda.CUDAGraph", "torch.cuda.graph"),
}


def module_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def class_members(tree: ast.Module, cls: str) -> tuple[set[str], set[str]]:
    """(methods, attributes) of class ``cls``: attributes are class-level names and ``self.X`` assignments."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
            attrs = {t.id for n in node.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
            attrs |= {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
            for sub in ast.walk(node):
                if isinstance(sub, ast.Assign):
                    targets = sub.targets
                elif isinstance(sub, ast.AnnAssign):
                    targets = [sub.target]
                else:
                    continue
                for t in targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        attrs.add(t.attr)
            return methods, attrs
    return set(), set()


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "vllm")
    missing = []
    trees: dict[str, ast.Module] = {}
    for rel, name, kind in TARGETS:
        path = root / rel
        if rel not in trees:
            if not path.is_file():
                missing.append(f"{rel}: no such file")
                trees[rel] = ast.Module(body=[], type_ignores=[])
                continue
            trees[rel] = ast.parse(path.read_text())
        tree = trees[rel]
        if kind == "global":
            ok = name in module_names(tree)
        else:
            cls, member = name.split(".")
            methods, attrs = class_members(tree, cls)
            ok = member in (methods if kind == "method" else attrs)
        if not ok:
            missing.append(f"{rel}: {kind} {name}")
    for rel, calls in CAPTURE_CALLS.items():
        text = (root / rel).read_text() if (root / rel).is_file() else ""
        missing += [f"{rel}: no call through {c}" for c in calls if f"{c}(" not in text]
    version_file = root / "_version.py"
    version = version_file.read_text().split("version = ")[-1].split("\n")[0] if version_file.is_file() else "?"
    if missing:
        print(f"vLLM at {root} (version {version}) lacks what the Foundry adapter hooks:\n  " + "\n  ".join(missing))
        return 1
    count = len(TARGETS) + sum(map(len, CAPTURE_CALLS.values()))
    print(f"vLLM at {root} (version {version}): all {count} targets present")
    return 0


if __name__ == "__main__":
    sys.exit(main())
