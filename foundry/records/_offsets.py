"""Generated from csrc/include/format.h by scripts/gen_abi.py: do not edit.

Regenerate with `python scripts/gen_abi.py` after changing the header; CI checks that this file is
what the header gives."""

from __future__ import annotations

# struct -> (size, ((field, offset, struct format), ...)); little-endian, packed
LAYOUTS: dict[str, tuple[int, tuple[tuple[str, int, str], ...]]] = {
    "rec_header": (
        32,
        (
            ("magic", 0, "4s"),
            ("version", 4, "H"),
            ("header_bytes", 6, "H"),
            ("node_count", 8, "I"),
            ("edge_count", 12, "I"),
            ("function_count", 16, "I"),
            ("event_count", 20, "I"),
            ("total_bytes", 24, "Q"),
        ),
    ),
    "rec_node": (
        8,
        (
            ("type", 0, "B"),
            ("reserved0", 1, "B"),
            ("reserved1", 2, "H"),
            ("bytes", 4, "I"),
        ),
    ),
    "rec_kernel": (
        56,
        (
            ("h.type", 0, "B"),
            ("h.reserved0", 1, "B"),
            ("h.reserved1", 2, "H"),
            ("h.bytes", 4, "I"),
            ("function", 8, "I"),
            ("grid", 12, "3I"),
            ("block", 24, "3I"),
            ("shared_mem", 36, "I"),
            ("arg_mode", 40, "B"),
            ("reserved0", 41, "B"),
            ("param_count", 42, "H"),
            ("attr_count", 44, "H"),
            ("reserved1", 46, "H"),
            ("arg_bytes", 48, "I"),
            ("reserved2", 52, "I"),
        ),
    ),
    "rec_param": (
        8,
        (
            ("offset", 0, "I"),
            ("size", 4, "I"),
        ),
    ),
    "rec_attr": (
        72,
        (
            ("id", 0, "I"),
            ("reserved", 4, "I"),
            ("value", 8, "64s"),
        ),
    ),
    "rec_memset": (
        48,
        (
            ("h.type", 0, "B"),
            ("h.reserved0", 1, "B"),
            ("h.reserved1", 2, "H"),
            ("h.bytes", 4, "I"),
            ("dst", 8, "Q"),
            ("pitch", 16, "Q"),
            ("value", 24, "I"),
            ("element_size", 28, "I"),
            ("width", 32, "Q"),
            ("height", 40, "Q"),
        ),
    ),
    "rec_memcpy": (
        136,
        (
            ("h.type", 0, "B"),
            ("h.reserved0", 1, "B"),
            ("h.reserved1", 2, "H"),
            ("h.bytes", 4, "I"),
            ("src_device", 8, "Q"),
            ("src_x", 16, "Q"),
            ("src_y", 24, "Q"),
            ("src_z", 32, "Q"),
            ("src_pitch", 40, "Q"),
            ("src_height", 48, "Q"),
            ("dst_device", 56, "Q"),
            ("dst_x", 64, "Q"),
            ("dst_y", 72, "Q"),
            ("dst_z", 80, "Q"),
            ("dst_pitch", 88, "Q"),
            ("dst_height", 96, "Q"),
            ("width", 104, "Q"),
            ("height", 112, "Q"),
            ("depth", 120, "Q"),
            ("src_type", 128, "I"),
            ("dst_type", 132, "I"),
        ),
    ),
    "rec_event": (
        16,
        (
            ("h.type", 0, "B"),
            ("h.reserved0", 1, "B"),
            ("h.reserved1", 2, "H"),
            ("h.bytes", 4, "I"),
            ("event", 8, "I"),
            ("reserved", 12, "I"),
        ),
    ),
    "rec_edge": (
        16,
        (
            ("from", 0, "I"),
            ("to", 4, "I"),
            ("from_port", 8, "B"),
            ("to_port", 9, "B"),
            ("type", 10, "B"),
            ("reserved", 11, "5s"),
        ),
    ),
    "rec_delta_header": (
        64,
        (
            ("magic", 0, "4s"),
            ("version", 4, "H"),
            ("header_bytes", 6, "H"),
            ("override_count", 8, "I"),
            ("function_count", 12, "I"),
            ("reserved0", 16, "I"),
            ("reserved1", 20, "I"),
            ("total_bytes", 24, "Q"),
            ("template_sha256", 32, "32s"),
        ),
    ),
    "rec_override": (
        8,
        (
            ("node_index", 0, "I"),
            ("reserved", 4, "I"),
        ),
    ),
    "topo_header": (
        8,
        (
            ("node_count", 0, "I"),
            ("edge_count", 4, "I"),
        ),
    ),
    "topo_kernel": (
        14,
        (
            ("type", 0, "B"),
            ("cooperative", 1, "B"),
            ("cluster", 2, "3I"),
        ),
    ),
    "topo_edge": (
        11,
        (
            ("from", 0, "I"),
            ("to", 4, "I"),
            ("from_port", 8, "B"),
            ("to_port", 9, "B"),
            ("type", 10, "B"),
        ),
    ),
    "fatbin_header": (
        16,
        (
            ("magic", 0, "I"),
            ("version", 4, "H"),
            ("header_size", 6, "H"),
            ("fat_size", 8, "Q"),
        ),
    ),
    "fatbin_entry": (
        64,
        (
            ("kind", 0, "H"),
            ("version", 2, "H"),
            ("header_size", 4, "I"),
            ("payload_size", 8, "Q"),
            ("compressed_size", 16, "I"),
            ("unknown0", 20, "I"),
            ("unknown1", 24, "I"),
            ("sm_arch", 28, "I"),
            ("unknown2", 32, "Q"),
            ("flags", 40, "Q"),
            ("unknown3", 48, "Q"),
            ("uncompressed_size", 56, "Q"),
        ),
    ),
    "fatbin_wrapper": (
        24,
        (
            ("magic", 0, "I"),
            ("version", 4, "I"),
            ("data", 8, "Q"),
            ("filename_or_fatbins", 16, "Q"),
        ),
    ),
}
