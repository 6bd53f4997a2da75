"""The ``variables`` check of ``foundry verify``: the module variables an archive carries are its images'.

A graph's image entry lists the module variables LOAD writes into the image after loading it
(docs/FORMAT.md, "Module variables"). Each must be a variable the stored image defines (read from its
bytes: ELF symbols, PTX definitions, every fatbin entry), of a size the image gives it, and every graph
checked must need the same ones (a process holds one copy of each image: LOAD refuses graphs that
disagree). A listing of format version 2 (None) says nothing and is compared with nothing. That the
bytes are stored whole, and that a graph lists what its manifest lists, are the ``files`` check's
(``check_variable_files``, and ``manifest_disagreement`` as LOAD applies it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from foundry.format import VariableRef

from .findings import Findings, GraphUnderCheck, ImageInfo
from .report import Check, ProblemKind

__all__ = ["check_variables"]


def check_variables(graphs: Sequence[GraphUnderCheck], images: Mapping[str, ImageInfo], found: Findings) -> None:
    """Each carried variable against its image and the other graphs' listings."""
    first: dict[str, tuple[GraphUnderCheck, tuple[VariableRef, ...]]] = {}
    unread: set[str] = set()
    for graph in graphs:
        for ref in graph.meta.images:

            def problem(kind: ProblemKind, message: str, graph: GraphUnderCheck = graph) -> None:
                found.add(Check.VARIABLES, kind, graph.json_path, f"{graph.label}: {message}")

            if ref.variables is None:
                continue  # format version 2: says nothing of the image's variables
            earlier = first.setdefault(ref.sha256, (graph, ref.variables))
            if earlier[1] != ref.variables:
                problem(
                    ProblemKind.MISMATCH,
                    f"needs other module variables of image {ref.sha256} than {earlier[0].label}: LOAD holds one copy "
                    "of each image and refuses the second. Save the graphs again, with the variables written before "
                    "the first capture",
                )
            info = images.get(ref.sha256)
            if info is None or not info.sound or info.variables is None:
                continue
            declared = info.variables.variables
            for v in ref.variables:
                decl = declared.get(v.name)
                if decl is None:
                    if info.variables.complete:
                        problem(
                            ProblemKind.MISMATCH,
                            f"carries module variable {v.name} of image {ref.sha256}, which the image does not "
                            "define: LOAD would refuse the graph",
                        )
                    else:
                        unread.add(ref.sha256[:12])
                elif decl.sizes and v.bytes not in decl.sizes:
                    sizes = " or ".join(str(n) for n in sorted(decl.sizes))
                    problem(
                        ProblemKind.MISMATCH,
                        f"carries {v.bytes} bytes for module variable {v.name} of image {ref.sha256}, which defines "
                        f"it with {sizes} bytes: LOAD would refuse the graph",
                    )
    if unread:
        found.note(
            f"{len(unread)} kernel image(s) could be read only in part, so carried variables not found in the "
            f"readable parts were not reported ({', '.join(sorted(unread))})"
        )
