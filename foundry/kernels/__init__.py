"""Kernel images and kernels: the registry the interposer keeps (SAVE maps each CUfunction a graph
uses to its image and name), and LOAD's loading of archived images and lookup of their kernels."""

from __future__ import annotations

from .registry import (
    FUNC_ATTR_COUNT,
    ImageFormat,
    ImageRecord,
    KernelRef,
    describe_functions,
    function_attrs,
    image_bytes,
    image_entries,
    image_hash,
    image_record,
    is_loaded,
    is_looked_up,
    launch_trace,
    load_image,
    load_images,
    loaded_function,
    loaded_functions,
    loaded_image,
    recorded_images,
    set_function_attrs,
)

__all__ = [
    "FUNC_ATTR_COUNT",
    "ImageFormat",
    "ImageRecord",
    "KernelRef",
    "describe_functions",
    "function_attrs",
    "image_bytes",
    "image_entries",
    "image_hash",
    "image_record",
    "is_loaded",
    "is_looked_up",
    "launch_trace",
    "load_image",
    "load_images",
    "loaded_function",
    "loaded_functions",
    "loaded_image",
    "recorded_images",
    "set_function_attrs",
]
