"""Whole-archive checking, the function form kept for callers: ``check_archive``.

``check_archive`` never raises for archive content; it returns one ``Problem`` per defect found by
``foundry.archive.verify.verify_archive`` (checksums from the manifest down to records, deltas,
images and state memory; foreign files; kernels; template members; pointers), in the order found.
Identity and signature need a machine identity and a key; ``verify_archive`` takes them.
"""

from __future__ import annotations

import os

from foundry.archive.problems import Check, Problem, ProblemKind

__all__ = ["Check", "Problem", "ProblemKind", "check_archive"]

PathLike = str | os.PathLike[str]


def check_archive(archive_dir: PathLike) -> list[Problem]:
    """All problems of the archive in ``archive_dir``, in the order found; empty when it is sound.

    Hashes every image and graph file, so it reads the whole archive.
    """
    from foundry.archive.verify import verify_archive

    return list(verify_archive(archive_dir).problems)
