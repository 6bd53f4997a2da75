/* Graph records in native code: node records decoded into driver parameter structs. The byte layout
 * itself is format.h's, which the Python side is generated from. */
#ifndef FOUNDRY_RECORD_H
#define FOUNDRY_RECORD_H

#include <stdint.h>

#include "format.h"
#include "internal.h"

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
/* Checks a graph record's header, its counts against the bytes present included, and copies it to *h. */
int fdy_record_header(const uint8_t *rec, size_t size, rec_header *h);
/* Walks the top-level node records of a graph record: offsets[i] = byte offset of node i. */
int fdy_record_node_offsets(const uint8_t *rec, size_t size, size_t *offsets, size_t cap, size_t *count);

#endif
