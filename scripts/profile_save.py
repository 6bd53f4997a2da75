"""SAVE's host side on a real archive, on any machine (no GPU): the per-graph scan + write that
CUDAGraph.save does after extraction, and save_graph_manifest's grouping and member deltas.

    python scripts/profile_save.py DIR [--profile]

DIR holds a benchmark's graph JSONs and records (``ARCHIVE_META=1 bash scripts/gpu_tier.sh --bench``
brings one back as bench-archive-meta.tar.gz). Members are rebuilt as full records from their
template and delta, then saved again into a scratch copy, as the native worker saved them.
"""

from __future__ import annotations

import cProfile
import dataclasses
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

from foundry.archive import RecordFacts, read_graph, read_manifest, template_path, write_graph
from foundry.native.records import scan_record
from foundry.records import parse_delta, parse_record, topology_key_of
from foundry.save import SavedGraph
from foundry.save.templates import plan_groups, write_member_deltas
from tests.support.encode import encode_record


def _graph_paths(work: Path) -> list[Path]:
    """The graphs in the order SAVE saved them (the manifest's), else every JSON beside a record."""
    for manifest_dir in (work, work / "archive"):
        if (manifest_dir / "graph_manifest.json").is_file():
            return [(manifest_dir / g.json).resolve() for g in read_manifest(manifest_dir).graphs]
    return sorted(p.resolve() for p in work.glob("*.json") if p.with_suffix(".cugraph").is_file())


def _full_records(work: Path) -> dict[Path, tuple[object, bytes]]:
    graphs = {p: read_graph(p) for p in _graph_paths(work)}
    out = {}
    for path, (meta, payload) in graphs.items():
        # An archive of graph format 2 says nothing of module variables; timing SAVE needs none.
        meta = dataclasses.replace(
            meta, images=tuple(dataclasses.replace(r, variables=r.variables or ()) for r in meta.images)
        )
        if meta.template is None:
            out[path] = (meta, payload)
            continue
        _tmeta, template = graphs[template_path(path, meta)]
        parsed, delta = parse_record(template), parse_delta(payload)
        nodes = list(parsed.nodes)
        for i, node in delta.overrides:
            nodes[i] = node
        record = encode_record(dataclasses.replace(parsed, nodes=tuple(nodes), function_count=delta.function_count))
        out[path] = (dataclasses.replace(meta, template=None), record)
    return out


def main() -> None:
    source = Path(sys.argv[1])
    work = Path(tempfile.mkdtemp()) / "archive"
    shutil.copytree(source, work)
    records = _full_records(work)

    def save_side() -> list[SavedGraph]:
        graphs = []
        for path, (meta, record) in records.items():
            scan = scan_record(record)
            assert scan.topology is not None, "a record with child graphs: its key is Python's (parse_record)"
            facts = RecordFacts(scan.function_count, scan.event_count, topology_key_of(scan.topology))
            written = write_graph(path, meta, record, facts, durable=False)  # type: ignore[arg-type]
            graphs.append(SavedGraph(path, written, record, scan))
        return graphs

    t0 = time.perf_counter()
    graphs = save_side()
    t1 = time.perf_counter()
    plans = plan_groups(graphs)
    write_member_deltas(graphs, plans)
    t2 = time.perf_counter()
    nodes = sum(g.scan.node_count for g in graphs)
    print(f"{len(graphs)} graphs, {nodes} nodes, {len(plans)} groups: per-graph scan + write {t1 - t0:.3f} s, "
          f"grouping + member deltas {t2 - t1:.3f} s")  # fmt: skip
    if "--profile" in sys.argv:
        profile = cProfile.Profile()
        profile.enable()
        again = save_side()
        write_member_deltas(again, plan_groups(again))
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(20)
    shutil.rmtree(work.parent)


if __name__ == "__main__":
    main()
