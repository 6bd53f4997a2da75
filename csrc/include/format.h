/*
 * What the archive format and the native code share (docs/FORMAT.md): the byte layouts of the graph
 * record and of a delta, their magics and versions, the per-function attributes a function table
 * records, and the fatbin layout both sides read kernel images with. The one source of truth:
 * foundry/records/_layout.py is generated from this file (scripts/gen_abi.py), with a named Python
 * type per struct, and CI fails when the two differ.
 *
 * Every multi-byte integer is little-endian. x86-64 and aarch64 are little-endian, so the packed
 * structs below are the on-disk layout.
 */
#ifndef FOUNDRY_FORMAT_H
#define FOUNDRY_FORMAT_H

#include <stdint.h>

#define FDY_RECORD_MAGIC "FGR1"
#define FDY_RECORD_VERSION 1
#define FDY_DELTA_MAGIC "FGD1"
#define FDY_DELTA_VERSION 1

/* Deepest child-graph nesting a reader accepts (the top-level graph is depth 0). */
#define FDY_MAX_DEPTH 64

/* Each (record version, delta version) pair has one layout: scripts/gen_abi.py hashes the field names,
 * C types, array lengths and offsets of every rec_* struct below and refuses to generate while the
 * digest of the versions in force is not the one listed here. Changing a layout therefore means raising
 * FDY_RECORD_VERSION (a record's layout) or FDY_DELTA_VERSION (a delta's), and adding the new pair's
 * digest; a listed digest never changes. */
#define FDY_LAYOUT_1_1 "197b92223a49a818"

/* How a kernel node's arguments were given to the driver. */
enum fdy_arg_mode {
  FDY_ARG_PARAMS = 0, /* kernelParams: one pointer per parameter, laid out by the parameter table */
  FDY_ARG_EXTRA = 1,  /* extra: the raw CU_LAUNCH_PARAM_BUFFER_POINTER buffer */
};

/* Values Foundry takes from cuda.h are named here, never typed: X(prefix, NAME) is the cuda.h enumerator
 * prefix##NAME. C expands a list with FDY_CUDA_VALUE; scripts/gen_abi.py asks the compiler for each value
 * and generates a Python IntEnum of the list (FDY_NODE_TYPES -> NodeType, its members the NAMEs). */
#define FDY_CUDA_VALUE(prefix, name) prefix##name,
#define FDY_COUNT_ONE(prefix, name) +1

/* rec_node.type: the CUgraphNodeType of the node (every type, so that a reader can name one it refuses). */
#define FDY_NODE_TYPES(X)                                                                                          \
  X(CU_GRAPH_NODE_TYPE_, KERNEL) X(CU_GRAPH_NODE_TYPE_, MEMCPY) X(CU_GRAPH_NODE_TYPE_, MEMSET)                  \
  X(CU_GRAPH_NODE_TYPE_, HOST) X(CU_GRAPH_NODE_TYPE_, GRAPH) X(CU_GRAPH_NODE_TYPE_, EMPTY)                      \
  X(CU_GRAPH_NODE_TYPE_, WAIT_EVENT) X(CU_GRAPH_NODE_TYPE_, EVENT_RECORD) X(CU_GRAPH_NODE_TYPE_, EXT_SEMAS_SIGNAL) \
  X(CU_GRAPH_NODE_TYPE_, EXT_SEMAS_WAIT) X(CU_GRAPH_NODE_TYPE_, MEM_ALLOC) X(CU_GRAPH_NODE_TYPE_, MEM_FREE)    \
  X(CU_GRAPH_NODE_TYPE_, BATCH_MEM_OP) X(CU_GRAPH_NODE_TYPE_, CONDITIONAL)

/* Launch attributes a kernel node may carry (rec_attr.id): the CUlaunchAttributeID values documented as
 * valid for graph nodes. Only non-zero values are stored. */
#define FDY_LAUNCH_ATTRS(X)                                                                                        \
  X(CU_LAUNCH_ATTRIBUTE_, ACCESS_POLICY_WINDOW) X(CU_LAUNCH_ATTRIBUTE_, COOPERATIVE)                           \
  X(CU_LAUNCH_ATTRIBUTE_, CLUSTER_DIMENSION) X(CU_LAUNCH_ATTRIBUTE_, CLUSTER_SCHEDULING_POLICY_PREFERENCE)      \
  X(CU_LAUNCH_ATTRIBUTE_, PRIORITY) X(CU_LAUNCH_ATTRIBUTE_, MEM_SYNC_DOMAIN_MAP)                               \
  X(CU_LAUNCH_ATTRIBUTE_, MEM_SYNC_DOMAIN) X(CU_LAUNCH_ATTRIBUTE_, PREFERRED_CLUSTER_DIMENSION)                \
  X(CU_LAUNCH_ATTRIBUTE_, DEVICE_UPDATABLE_KERNEL_NODE) X(CU_LAUNCH_ATTRIBUTE_, NVLINK_UTIL_CENTRIC_SCHEDULING)

/* Function attributes the driver keeps per function and graphs do not carry: the CUfunction_attribute
 * values a function table records, one int32 each, in this order (Python reads them by name: FuncAttrs).
 * A value the driver would not report is stored as FDY_FUNC_ATTR_UNKNOWN and never set at LOAD. */
#define FDY_FUNC_ATTRS(X)                                                                                          \
  X(CU_FUNC_ATTRIBUTE_, MAX_DYNAMIC_SHARED_SIZE_BYTES) X(CU_FUNC_ATTRIBUTE_, PREFERRED_SHARED_MEMORY_CARVEOUT)  \
  X(CU_FUNC_ATTRIBUTE_, REQUIRED_CLUSTER_WIDTH) X(CU_FUNC_ATTRIBUTE_, REQUIRED_CLUSTER_HEIGHT)                 \
  X(CU_FUNC_ATTRIBUTE_, REQUIRED_CLUSTER_DEPTH) X(CU_FUNC_ATTRIBUTE_, NON_PORTABLE_CLUSTER_SIZE_ALLOWED)        \
  X(CU_FUNC_ATTRIBUTE_, CLUSTER_SCHEDULING_POLICY_PREFERENCE)
#define FDY_FUNC_ATTR_COUNT (0 FDY_FUNC_ATTRS(FDY_COUNT_ONE))
#define FDY_FUNC_ATTR_UNKNOWN INT32_MIN

#pragma pack(push, 1)
typedef struct {
  char magic[4];
  uint16_t version, header_bytes;
  uint32_t node_count, edge_count, function_count, event_count;
  uint64_t total_bytes;
} rec_header;

typedef struct {
  uint8_t type, reserved0;
  uint16_t reserved1;
  uint32_t bytes;
} rec_node;

typedef struct {
  rec_node h;
  uint32_t function;
  uint32_t grid[3], block[3];
  uint32_t shared_mem;
  uint8_t arg_mode, reserved0;
  uint16_t param_count, attr_count, reserved1;
  uint32_t arg_bytes, reserved2;
} rec_kernel;

typedef struct {
  uint32_t offset, size;
} rec_param;

typedef struct {
  uint32_t id, reserved;
  uint8_t value[64];
} rec_attr;

typedef struct {
  rec_node h;
  uint64_t dst, pitch;
  uint32_t value, element_size;
  uint64_t width, height;
} rec_memset;

typedef struct {
  rec_node h;
  uint64_t src_device, src_x, src_y, src_z, src_pitch, src_height;
  uint64_t dst_device, dst_x, dst_y, dst_z, dst_pitch, dst_height;
  uint64_t width, height, depth;
  uint32_t src_type, dst_type;
} rec_memcpy;

typedef struct {
  rec_node h;
  uint32_t event, reserved;
} rec_event;

typedef struct {
  uint32_t from, to;
  uint8_t from_port, to_port, type, reserved[5];
} rec_edge;

/* A delta: node records that replace a template's nodes of the same index. The side that encodes a
 * delta writes its whole header, template hash included. */
typedef struct {
  char magic[4];
  uint16_t version, header_bytes;
  uint32_t override_count, function_count, reserved0, reserved1;
  uint64_t total_bytes;
  uint8_t template_sha256[32];
} rec_delta_header;

typedef struct {
  uint32_t node_index, reserved;
} rec_override;
#pragma pack(pop)

/* The topology key (docs/FORMAT.md, "Topology key") is the SHA-256 of FDY_TOPOLOGY_KEY_VERSION and then
 * this material, packed: a topo_header; per node in index order a topo_kernel for a kernel node, else its
 * type byte (for a child-graph node followed by the child's own raw digest); then every edge as a
 * topo_edge, sorted by its fields in order. foundry/records/walk.py packs it, and fdy_record_scan for a
 * record without child graphs. Changing these structs changes every key: it takes a new version string. */
#define FDY_TOPOLOGY_KEY_VERSION "FTK1"

#pragma pack(push, 1)
typedef struct {
  uint32_t node_count, edge_count;
} topo_header;

typedef struct {
  uint8_t type;        /* CU_GRAPH_NODE_TYPE_KERNEL */
  uint8_t cooperative; /* 1: launch attribute COOPERATIVE present with a non-zero first u32 */
  uint32_t cluster[3]; /* the first 12 bytes of launch attribute CLUSTER_DIMENSION, 0 0 0 when absent */
} topo_kernel;

typedef struct {
  uint32_t from, to;
  uint8_t from_port, to_port, type;
} topo_edge;
#pragma pack(pop)

/* Kernel images in NVIDIA's fatbin container, as the CUDA runtime registers them and the driver takes them
 * (both sides read them: image.c for an image's size, foundry/images/fatbin.py for its entries). A
 * fatbin is its header (header_size bytes, of which fatbin_header is the start), then fat_size bytes of
 * entries: each an entry header of its own header_size bytes (holding the fields past the first 16 only
 * when it is that long) and its payload, padded to 8. Fields named unknown* are not read. */
#define FDY_FATBIN_MAGIC 0xBA55ED50u
/* __fatBinC_Wrapper_t, what the runtime hands to cuModuleLoadData & co.: data points at a fatbin. */
#define FDY_FATBIN_WRAPPER_MAGIC 0x466243B1u
/* An entry's flags: how its payload is compressed (none, an LZ4 block, a Zstandard frame). */
#define FDY_FATBIN_COMPRESSED_LZ4 0x2000
#define FDY_FATBIN_COMPRESSED_ZSTD 0x8000

enum fdy_fatbin_kind { FDY_FATBIN_KIND_PTX = 1, FDY_FATBIN_KIND_ELF = 2 };

#pragma pack(push, 1)
typedef struct {
  uint32_t magic;
  uint16_t version, header_size;
  uint64_t fat_size;
} fatbin_header;

typedef struct {
  uint16_t kind, version;
  uint32_t header_size;
  uint64_t payload_size;
  uint32_t compressed_size, unknown0, unknown1, sm_arch;
  uint64_t unknown2, flags, unknown3, uncompressed_size;
} fatbin_entry;

typedef struct {
  uint32_t magic, version;
  uint64_t data, filename_or_fatbins;
} fatbin_wrapper;
#pragma pack(pop)

_Static_assert(sizeof(rec_header) == 32, "record header layout");
_Static_assert(sizeof(rec_kernel) == 56, "kernel record layout");
_Static_assert(sizeof(rec_attr) == 72, "attribute layout");
_Static_assert(sizeof(rec_memset) == 48, "memset record layout");
_Static_assert(sizeof(rec_memcpy) == 136, "memcpy record layout");
_Static_assert(sizeof(rec_event) == 16, "event record layout");
_Static_assert(sizeof(rec_edge) == 16, "edge layout");
_Static_assert(sizeof(rec_delta_header) == 64, "delta header layout");
_Static_assert(sizeof(rec_override) == 8, "override layout");
_Static_assert(sizeof(topo_header) == 8, "topology header layout");
_Static_assert(sizeof(topo_kernel) == 14, "topology kernel layout");
_Static_assert(sizeof(topo_edge) == 11, "topology edge layout");
_Static_assert(sizeof(fatbin_header) == 16, "fatbin header layout");
_Static_assert(sizeof(fatbin_entry) == 64, "fatbin entry header layout");
_Static_assert(sizeof(fatbin_wrapper) == 24, "fatbin wrapper layout");

#endif
