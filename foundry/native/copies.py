"""Spans of device memory read into host memory with one native call (csrc/copies.c): the bytes and the
moment of one synchronous copy per span, for a handful of driver calls in all."""

from __future__ import annotations

import ctypes
from array import array
from dataclasses import dataclass

from foundry.errors import DriverError

from ._abi import ErrorCode, ReadPath, ReadReport
from .driver import error_name
from .lib import check, native

__all__ = ["DeviceRead", "ReadPath", "read_device"]


@dataclass(frozen=True)
class DeviceRead:
    """What one read did: the driver calls it made, the slowest way it read a span (``ReadPath``), what sent
    spans to a slower way (a driver error's name, "" when nothing did), and the span whose copy the driver
    refused (None when it refused none; then ``error`` says why, and the buffer's bytes are undefined)."""

    calls: int
    path: ReadPath
    fallback: str
    refused: int | None = None
    error: DriverError | None = None


def read_device(spans: array[int], buffer: bytearray) -> DeviceRead:
    """Reads ``spans`` (an ``array('Q')`` of (device address, size, offset into ``buffer``) triples) into
    ``buffer``. A span outside ``buffer`` raises ValueError; a failure that is no span's raises DriverError."""
    if spans.typecode != "Q" or len(spans) % 3:
        raise ValueError("spans must be an array('Q') of (device address, size, offset) triples")
    count = len(spans) // 3
    report = ReadReport()
    c_spans = (ctypes.c_uint64 * len(spans)).from_buffer(spans) if spans else None
    c_buffer = (ctypes.c_char * len(buffer)).from_buffer(buffer) if buffer else None
    rc = native().fdy_device_read(c_spans, count, c_buffer, len(buffer), ctypes.byref(report))
    del c_spans, c_buffer  # the exported buffers: both may be resized again
    fallback = _name(report.cause) if report.cause else ""
    read = DeviceRead(report.calls, ReadPath(report.path), fallback)
    if rc == 0:
        return read
    if report.failed >= count:
        if rc == ErrorCode.INVALID:  # a span outside the buffer
            raise ValueError(native().last_error())
        check(rc, "reading device memory")
    message = native().last_error() or f"reading span {report.failed} of device memory failed with code {rc}"
    return DeviceRead(read.calls, read.path, fallback, report.failed, DriverError(message, rc))


def _name(code: int) -> str:
    """A CUresult's name, or a Foundry code's (FDY_ERR_*)."""
    try:
        return f"FDY_ERR_{ErrorCode(code).name}"
    except ValueError:
        return error_name(code)
