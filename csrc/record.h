/* Byte layout of a graph record (docs/FORMAT.md "Graph record"). x86-64 and aarch64 are
 * little-endian, so the packed structs below are the on-disk layout. */
#ifndef FOUNDRY_RECORD_H
#define FOUNDRY_RECORD_H

#include <stdint.h>

#include "internal.h"

#define FDY_RECORD_MAGIC "FGR1"
#define FDY_RECORD_VERSION 1
#define FDY_ARG_PARAMS 0
#define FDY_ARG_EXTRA 1

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

/* A delta: node records that replace a template's nodes of the same index (docs/FORMAT.md). */
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

#define FDY_DELTA_MAGIC "FGD1"
#define FDY_DELTA_VERSION 1

_Static_assert(sizeof(rec_header) == 32, "record header layout");
_Static_assert(sizeof(rec_kernel) == 56, "kernel record layout");
_Static_assert(sizeof(rec_attr) == 72, "attribute layout");
_Static_assert(sizeof(rec_memset) == 48, "memset record layout");
_Static_assert(sizeof(rec_memcpy) == 136, "memcpy record layout");
_Static_assert(sizeof(rec_event) == 16, "event record layout");
_Static_assert(sizeof(rec_edge) == 16, "edge layout");
_Static_assert(sizeof(rec_delta_header) == 64, "delta header layout");
_Static_assert(sizeof(rec_override) == 8, "override layout");

/* Launch attributes a kernel node may carry (CUlaunchAttributeID values documented as valid for
 * graph nodes). Only non-zero values are stored. */
#define FDY_NODE_ATTRS {1, 2, 4, 5, 8, 9, 10, 11, 13, 16}

const char *fdy_node_type_name(int type);

/* Node records decoded into driver parameter structs (codec_params.c). The structs point into the
 * record and into `d`, which must outlive the driver call that uses them. */
typedef struct {
  void **scratch; /* kernelParams pointer array */
  size_t scratch_cap;
  void *extra[5];
  size_t arg_size;
  CUDA_KERNEL_NODE_PARAMS_v2 kernel;
  const rec_attr *attrs;
  uint16_t attr_count;
  CUDA_MEMSET_NODE_PARAMS memset;
  CUDA_MEMCPY3D memcpy;
} fdy_decoded;

/* Decodes a kernel, memset or memcpy node record of `bytes` bytes; functions[i] binds index i. */
int fdy_decode_node(fdy_decoded *d, const uint8_t *rec, uint32_t bytes, const uint64_t *functions, size_t nfuncs);
void fdy_decoded_free(fdy_decoded *d);
/* Sets a decoded kernel record's launch attributes on a graph node (codec_build.c). fresh: the node
 * was just added, so values equal to a new node's defaults need not be set. */
int fdy_set_kernel_attrs(CUgraphNode node, const fdy_decoded *d, int fresh);
/* Walks the top-level node records of a graph record: offsets[i] = byte offset of node i. */
int fdy_record_node_offsets(const uint8_t *rec, size_t size, size_t *offsets, size_t cap, size_t *count);

#endif
