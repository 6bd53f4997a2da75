"""Start-up's images into the driver over several threads (foundry.load.startup.load_images_split): every image
loaded once, the shares about equal by size, each share in one call on a loader thread, and a refused
image's error raised once every share has ended (the other shares' images stay loaded)."""

from __future__ import annotations

import threading

import pytest

from foundry import kernels
from foundry.errors import KernelNotFoundError
from foundry.load import startup


def _images(n: int) -> list[tuple[str, bytearray]]:
    """``n`` images, largest first, as start-up hands them over."""
    return [(f"{i:064x}", bytearray(1000 - i)) for i in range(n)]


def test_images_split_over_threads_each_share_in_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, list[str]]] = []
    lock = threading.Lock()

    def load_images(images: list[tuple[str, bytearray]]) -> None:
        with lock:
            calls.append((threading.current_thread().name, [sha for sha, _ in images]))

    monkeypatch.setattr(kernels, "load_images", load_images)
    images = _images(10)
    startup.load_images_split(None, images, 4)
    assert sorted(sha for _, shas in calls for sha in shas) == sorted(sha for sha, _ in images)
    # Four calls on the loaders' threads (a pool: a thread whose call ended may take the next share).
    assert len(calls) == 4 and all(name.startswith("foundry-startup-load") for name, _ in calls)
    assert sorted(len(shas) for _, shas in calls) == [2, 2, 3, 3]
    # Round robin over the sizes, largest first: the first share holds images 0, 4 and 8.
    assert sorted(shas for _, shas in calls)[0] == [images[0][0], images[4][0], images[8][0]]
    calls.clear()
    startup.load_images_split(None, images[:1], 4)  # one image: one call, on the calling thread
    assert calls == [(threading.current_thread().name, [images[0][0]])]


def test_a_refused_image_is_raised_after_every_share_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded: list[str] = []
    lock = threading.Lock()
    images = _images(8)
    bad = images[1][0]

    def load_images(share: list[tuple[str, bytearray]]) -> None:
        for sha, _ in share:
            if sha == bad:
                raise KernelNotFoundError(f"image {sha[:8]} refused")
            with lock:
                loaded.append(sha)

    monkeypatch.setattr(kernels, "load_images", load_images)
    with pytest.raises(KernelNotFoundError, match="refused"):
        startup.load_images_split(None, images, 4)
    # The refused image's share stopped at it; every other share loaded all of its images.
    assert set(loaded) == {sha for sha, _ in images} - {bad, images[5][0]}
