/* Graph records in native code: node records decoded into driver parameter structs. The byte layout
 * itself is format.h's, which the Python side is generated from. */
#ifndef FOUNDRY_RECORD_H
#define FOUNDRY_RECORD_H

#include <stdint.h>

#include "format.h"
#include "internal.h"

const char *fdy_node_type_name(int type);
/* The function's mangled name as the driver reports it, or "<unnamed kernel>" (for messages). */
const char *fdy_func_name(CUfunction f);

/* The function table a record's (or delta's) kernel nodes name by index, as LOAD resolved it: handles[i]
 * binds index i. params[i] is function i's parameter list (kernel_params.c), looked up when a node first
 * names it: a builder asks for each function once per call, not once per node. */
typedef struct {
  const uint64_t *handles;
  size_t count;
  const fdy_kparams **params;
} fdy_functions;

/* Sets up a table of count functions (no driver call yet); 0 or FDY_ERR_INVALID (out of host memory). */
int fdy_functions_init(fdy_functions *f, const uint64_t *handles, size_t count);
void fdy_functions_free(fdy_functions *f);

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
  /* Where the node being decoded is, for messages (set by the caller): its index in each graph from the top
   * level down, depth + 1 of them, and whether it is a delta's override of that top-level node. */
  uint32_t where[FDY_MAX_DEPTH + 1];
  unsigned depth;
  int override;
} fdy_decoded;

/* Decodes a kernel, memset or memcpy node record of `bytes` bytes. A kernel node's parameters are proven to
 * be those its function takes before anything of it is decoded (FDY_ERR_PARAM_MISMATCH otherwise): the
 * driver reads the kernel's own parameter list from whatever the node gives it. */
int fdy_decode_node(fdy_decoded *d, const uint8_t *rec, uint32_t bytes, fdy_functions *functions);
void fdy_decoded_free(fdy_decoded *d);

/* A kernel's dynamic shared-memory limit is the function's, process-wide, and the driver checks a node against
 * it where the node is made (cuGraphAddKernelNode, *KernelNodeSetParams), not at instantiation or replay. A
 * program may lower it after a capture: FlashInfer sets it to each launch's exact size, so one kernel launched
 * for two row widths leaves the smaller limit while its graph holds a node that needs the larger. Natively that
 * node was made while the limit allowed it; LOAD makes it under the limit of the moment, which the program's own
 * launches on other threads may lower at any time. So a refused kernel node whose limit is below its size has the
 * limit raised to that size (never lowered: a limit only decides which launches are refused) and is made again,
 * a few times at most (fdy_raise_smem_limit, internal.h). */
#define FDY_SMEM_TRIES 4
#define FDY_WITH_SMEM_LIMIT(r, params, call)                                                                     \
  do {                                                                                                           \
    (r) = (call);                                                                                                \
    for (int try_ = 1; (r) == CUDA_ERROR_INVALID_VALUE && (params)->sharedMemBytes && try_ < FDY_SMEM_TRIES &&   \
                       fdy_raise_smem_limit((params)->func, (params)->sharedMemBytes, NULL);                     \
         try_++)                                                                                                 \
      (r) = (call);                                                                                              \
  } while (0)
/* Sets a decoded kernel record's launch attributes on a graph node (codec_build.c). fresh: the node
 * was just added, so values equal to a new node's defaults need not be set. */
int fdy_set_kernel_attrs(CUgraphNode node, const fdy_decoded *d, int fresh);
/* Checks a graph record's header, its counts against the bytes present included, and copies it to *h. */
int fdy_record_header(const uint8_t *rec, size_t size, rec_header *h);
/* Walks the top-level node records of a graph record: offsets[i] = byte offset of node i. */
int fdy_record_node_offsets(const uint8_t *rec, size_t size, size_t *offsets, size_t cap, size_t *count);

#endif
