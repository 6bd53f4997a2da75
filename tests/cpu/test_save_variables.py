"""SAVE's module variables on plain bytes: reading them in as few copies as the driver allows, every
load of a save with one native read (foundry.save.varread), relocated pointers counted as equal, and
module addresses refused with the byte offset that holds them (foundry.save.variables). The round trips
on the fake driver are in test_roundtrip_fake_variables.py; the native read in test_device_read.py."""

from __future__ import annotations

import struct
from array import array

import pytest

from foundry.errors import DriverError, ModuleAddressError
from foundry.images import ImageFormat
from foundry.native.copies import DeviceRead, ReadPath
from foundry.save import variables as sv
from foundry.save import varread
from foundry.timing import Phases

Value = varread.Value


class Device:
    """Device memory as allocations: a copy must lie inside one (as a strict driver demands). ``read`` plays
    foundry.native.read_device: every read's copies are kept in ``reads``."""

    def __init__(self, *allocations: tuple[int, bytes]) -> None:
        self.allocations = [(base, bytearray(data)) for base, data in allocations]
        self.reads: list[list[tuple[int, int]]] = []

    def read(self, spans: array[int], buffer: bytearray) -> DeviceRead:
        copies = [(spans[i], spans[i + 1]) for i in range(0, len(spans), 3)]
        self.reads.append(copies)
        for i, (src, n) in enumerate(copies):
            at = spans[3 * i + 2]
            inside = [data for base, data in self.allocations if base <= src and src + n <= base + len(data)]
            if not inside:
                error = DriverError(f"cuMemcpyDtoH_v2 of {n} bytes at {src:#x} crosses allocations", 1)
                return DeviceRead(len(copies), ReadPath.SYNC, "CUDA_ERROR_INVALID_VALUE", i, error)
            base = next(base for base, data in self.allocations if data is inside[0])
            buffer[at : at + n] = inside[0][src - base : src - base + n]
        return DeviceRead(4, ReadPath.BATCH, "")

    @property
    def copies(self) -> list[tuple[int, int]]:
        return [copy for read in self.reads for copy in read]


def test_variables_close_together_are_read_in_one_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    device = Device((0x10000, bytes(range(256)) * 64))
    monkeypatch.setattr(varread, "read_device", device.read)
    located = {"a": (0x10000, 4), "b": (0x10010, 8), "far": (0x10000 + 8192, 16)}
    values = varread.read_located(located)
    assert device.reads == [[(0x10000, 0x18), (0x12000, 16)]]
    assert values["b"] == Value(0x10010, bytes(range(16, 24)))
    assert values["far"].data == bytes(range(16))


def test_a_refused_merged_copy_is_made_variable_by_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    device = Device((0x10000, b"\x01" * 16), (0x10100, b"\x02" * 16))  # two allocations, 240 bytes apart
    monkeypatch.setattr(varread, "read_device", device.read)
    values = varread.read_located({"a": (0x10000, 16), "b": (0x10100, 16)})
    assert values == {"a": Value(0x10000, b"\x01" * 16), "b": Value(0x10100, b"\x02" * 16)}
    assert device.reads == [[(0x10000, 0x110)], [(0x10000, 16), (0x10100, 16)]]


def test_a_refused_variable_raises_the_drivers_error(monkeypatch: pytest.MonkeyPatch) -> None:
    device = Device((0x10000, b"\x01" * 16))
    monkeypatch.setattr(varread, "read_device", device.read)
    with pytest.raises(DriverError, match="crosses allocations"):
        varread.read_located({"a": (0x10000, 16), "b": (0x20000, 8)})


def _reads(device: Device, monkeypatch: pytest.MonkeyPatch, *loads: dict[str, tuple[int, int]]) -> varread.Reads:
    monkeypatch.setattr(varread, "read_device", device.read)
    reads = varread.Reads()
    for index, located in enumerate(loads):
        varread.add(reads, index, located)
    return reads


def test_a_save_reads_again_and_keeps_the_values_while_the_bytes_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    device = Device((0x10000, bytes(range(256)) * 64))
    reads = _reads(device, monkeypatch, {"a": (0x10000, 4), "far": (0x10000 + 8192, 16)})
    first, version = varread.refresh(reads, [0], None)[0]
    assert first["far"] == Value(0x12000, bytes(range(16)))
    again = varread.refresh(reads, [0], None)[0]
    assert again[0] is first and again[1] == version  # read again, unchanged: the same values
    assert device.reads == [[(0x10000, 4), (0x12000, 16)]] * 2
    device.allocations[0][1][8192 + 3] = 0xEE  # the program wrote the variable between two saves
    values, changed = varread.refresh(reads, [0], None)[0]
    assert changed == version + 1
    assert values["far"].data == bytes([0, 1, 2, 0xEE, *range(4, 16)])
    assert values["a"] == first["a"]


def test_bytes_between_variables_read_with_them_make_no_new_version(monkeypatch: pytest.MonkeyPatch) -> None:
    device = Device((0x10000, bytes(range(256)) * 64))
    reads = _reads(device, monkeypatch, {"a": (0x10000, 4), "b": (0x10010, 8)})
    first, version = varread.refresh(reads, [0], None)[0]
    assert device.reads == [[(0x10000, 0x18)]]  # one copy, the 12 bytes between a and b included
    device.allocations[0][1][0x8] = 0xEE  # between the variables: the driver's, or data of no variable
    phases = Phases()
    again = varread.refresh(reads, [0], phases)[0]
    assert again[0] is first and again[1] == version and "variables.loads_changed" not in phases.counts
    device.allocations[0][1][0x12] = 0xEE  # inside b
    values, changed = varread.refresh(reads, [0], phases)[0]
    assert changed == version + 1 and values["b"].data == bytes([16, 17, 0xEE, *range(19, 24)])
    assert values["a"] == first["a"] and phases.counts["variables.loads_changed"] == 1
    assert [k for k in phases.counts if k.startswith("variables.changed:")] == ["variables.changed:b"]


def test_every_load_of_a_save_is_read_with_one_native_call(monkeypatch: pytest.MonkeyPatch) -> None:
    device = Device((0x10000, bytes(range(256)) * 64), (0x40000, b"\x05" * 64))
    loads = [{"a": (0x10000, 4), "far": (0x10000 + 8192, 16)}, {"x": (0x40000, 8)}, {"y": (0x40020, 32)}]
    reads = _reads(device, monkeypatch, *loads)
    phases = Phases()
    read = varread.refresh(reads, [2, 0], phases)
    # Each load read alone the first time (a refusal then costs that load's copies only), then all together.
    assert device.reads == [
        [(0x40020, 32)],
        [(0x10000, 4), (0x12000, 16)],
        [(0x40020, 32), (0x10000, 4), (0x12000, 16)],
    ]
    phases = Phases()
    read = varread.refresh(reads, [2, 0], phases)
    assert (
        device.reads[-1] == [(0x40020, 32), (0x10000, 4), (0x12000, 16)] and len(device.reads) == 4
    )  # load 1: not this save's
    assert read[2][0] == {"y": Value(0x40020, b"\x05" * 32)} and read[0][0]["a"].data == bytes(range(4))
    assert phases.counts["variables.runs"] == 3 and phases.counts["variables.copies"] == 4
    assert phases.counts["variables.reads_batch"] == 1 and "variables.loads_changed" not in phases.counts
    assert varread.refresh(reads, [1], None)[1][0] == {"x": Value(0x40000, b"\x05" * 8)}


def test_a_refused_merged_copy_is_planned_variable_by_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    device = Device((0x10000, b"\x01" * 16), (0x10100, b"\x02" * 16), (0x30000, b"\x03" * 8))
    reads = _reads(device, monkeypatch, {"z": (0x30000, 8)}, {"a": (0x10000, 16), "b": (0x10100, 16)})
    values, version = varread.refresh(reads, [0, 1], None)[1]
    assert values == {"a": Value(0x10000, b"\x01" * 16), "b": Value(0x10100, b"\x02" * 16)}
    varread.refresh(reads, [1, 0], None)
    # Each new load is read alone until nothing of it is refused, then all together.
    assert device.reads == [
        [(0x30000, 8)],
        [(0x10000, 0x110)],
        [(0x10000, 16), (0x10100, 16)],
        [(0x30000, 8), (0x10000, 16), (0x10100, 16)],
        [(0x10000, 16), (0x10100, 16), (0x30000, 8)],
    ]
    assert version == 1 and varread.refresh(reads, [1], None)[1][1] == 1


def test_what_to_carry_is_worked_out_once_per_image_and_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    versions = {"img": 1, "other": 1}

    def live(sha: str, records: object, read: object) -> tuple[dict, tuple]:
        return {}, ((7 if sha == "img" else 8, versions[sha]),)

    monkeypatch.setattr(sv, "_add_loads", lambda *args: None)
    monkeypatch.setattr(sv, "_live", live)
    formats = {"img": ImageFormat.ELF, "other": ImageFormat.ELF}

    def carried(names: tuple[str, ...], device: tuple[int, int]) -> tuple[int, int]:
        phases = Phases()
        sv.carried_variables({n: {} for n in names}, formats, device, phases)  # type: ignore[misc]
        return phases.counts.get("variables.decisions_made", 0), phases.counts.get("variables.decisions_reused", 0)

    assert carried(("img",), (9, 0)) == (1, 0)
    assert carried(("img",), (9, 0)) == (0, 1)
    # Another batch size's graph: one image more (a GEMM library's other kernels); the first one's outcome stays.
    assert carried(("img", "other"), (9, 0)) == (1, 1)
    versions["img"] = 2  # the load's bytes changed
    assert carried(("img", "other"), (9, 0)) == (1, 1)
    assert carried(("img",), (8, 0)) == (1, 0)


def _u64(*words: int) -> bytes:
    return struct.pack(f"<{len(words)}Q", *words)


def test_a_relocated_pointer_counts_as_equal() -> None:
    # `p` points at x[1] in each load: the fresh load's own x, this process's own x.
    fresh = {"x": Value(0x5000, b"\x07" * 12), "p": Value(0x5100, _u64(0x5004, 9))}
    live = {"x": Value(0x9000, b"\x07" * 12), "p": Value(0x9100, _u64(0x9004, 9))}
    assert not sv._differs(live["p"], fresh["p"], live, fresh)
    moved = Value(0x9100, _u64(0x9008, 9))  # the program pointed it elsewhere
    assert sv._differs(moved, fresh["p"], live, fresh)
    changed = Value(0x9100, _u64(0x9004, 10))  # the other word changed
    assert sv._differs(changed, fresh["p"], live, fresh)
    assert sv._differs(live["x"], None, live, fresh)  # not in a fresh load: carried


def test_code_words_are_the_loaders_and_not_compared() -> None:
    # A table of two function pointers and a data word: each load holds its own code addresses.
    fresh = Value(0x5000, _u64(0x7C0100000000, 0x7C0100100000, 5))
    live = Value(0x9000, _u64(0x7C0200000000, 0x7C0200100000, 5))
    assert sv._differs(live, fresh, {}, {})  # without the image's relocations: every word compared
    assert not sv._differs(live, fresh, {}, {}, frozenset({0, 8}))
    assert sv._differs(Value(0x9000, _u64(0x7C0200000000, 0x7C0200100000, 6)), fresh, {}, {}, frozenset({0, 8}))


def test_unaligned_variables_compare_their_partial_words() -> None:
    fresh = Value(0x5003, b"\x00" * 13)
    live = Value(0x9003, b"\x00" * 12 + b"\x01")  # the last byte lies in a partial word
    assert sv._differs(live, fresh, {}, {})
    assert not sv._differs(Value(0x9003, b"\x00" * 13), fresh, {}, {})


def _image(*variables: tuple[int, int, str]) -> sv._Decision:
    ranges = tuple(sorted(variables))
    return sv._Decision((), (), ranges, tuple(r[0] for r in ranges))


def test_a_module_address_is_refused_with_its_byte_offset() -> None:
    images = {"img": _image((0x9000, 0x9010, "x")), "other": _image((0xA000, 0xA100, "table"))}
    value = Value(0x7004, b"\xff" * 4 + _u64(0xA0F8) + b"\x00" * 4)  # aligned words start at offset 4
    with pytest.raises(ModuleAddressError) as caught:
        sv._refuse_addresses("img", "p", value, images)
    error = caught.value
    assert (error.image, error.variable, error.offset) == ("img", "p", 4)
    assert "inside module variable table of image other" in str(error)
    sv._refuse_addresses("img", "q", Value(0x7000, _u64(0x8FF8, 0xA100 + 8)), images)  # outside: fine
    with pytest.raises(ModuleAddressError, match="inside module variable x of this process"):
        sv._refuse_addresses("img", "r", Value(0x7000, _u64(0x9008)), images)


def test_a_load_is_read_alone_only_the_first_time(monkeypatch: pytest.MonkeyPatch) -> None:
    device = Device((0x10000, b"\x01" * 16), (0x10100, b"\x02" * 16), (0x30000, b"\x03" * 8))
    reads = _reads(device, monkeypatch, {"z": (0x30000, 8)})
    varread.refresh(reads, [0], None)  # read together without a refusal: proven
    varread.add(reads, 1, {"a": (0x10000, 16), "b": (0x10100, 16)})
    phases = Phases()
    values = varread.refresh(reads, [0, 1], phases)[1][0]
    assert values == {"a": Value(0x10000, b"\x01" * 16), "b": Value(0x10100, b"\x02" * 16)}
    assert device.reads[1:] == [
        [(0x10000, 0x110)],  # load 1 alone, refused: its merged copy
        [(0x10000, 16), (0x10100, 16)],  # split; load 0 (proven) is not read alone
        [(0x30000, 8), (0x10000, 16), (0x10100, 16)],
    ]
    assert phases.counts["variables.reads_sync"] == 1 and phases.counts["variables.reads_batch"] == 2
    varread.refresh(reads, [1, 0], None)
    assert device.reads[-1] == [(0x10000, 16), (0x10100, 16), (0x30000, 8)]
