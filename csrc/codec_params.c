/* Node records -> driver parameter structs, shared by graph building and exec updates. Every length
 * and index is checked against the record, and a kernel node's parameter table against the parameters its
 * kernel takes: a damaged or altered record is an error, never a crash. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "record.h"

#define CORRUPT(...) fdy_fail(FDY_ERR_CORRUPT, "damaged graph record: " __VA_ARGS__)
#define ALTERED "The archive was altered or saved by another Foundry: run SAVE again."

/* A function the driver cannot describe, marked for the rest of one call (its `extra` nodes are not asked
 * again per node). */
static const fdy_kparams no_list;

int fdy_functions_init(fdy_functions *f, const uint64_t *handles, size_t count) {
  f->handles = handles;
  f->count = count;
  f->params = calloc(count ? count : 1, sizeof(*f->params));
  return f->params ? 0 : fdy_fail(FDY_ERR_INVALID, "out of host memory");
}

void fdy_functions_free(fdy_functions *f) {
  free(f->params);
  f->params = NULL;
}

/* One raiser at a time: two threads raising one function for different nodes must end at the larger size. */
static pthread_mutex_t smem_lock = PTHREAD_MUTEX_INITIALIZER;

int fdy_raise_smem_limit(CUfunction f, unsigned need, int *now) {
  int limit = -1, raised = 0;
  pthread_mutex_lock(&smem_lock);
  if (fdy_drv.cuFuncGetAttribute(&limit, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f) == CUDA_SUCCESS &&
      limit >= 0 && (unsigned)limit < need)
    raised = fdy_drv.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)need) == CUDA_SUCCESS;
  pthread_mutex_unlock(&smem_lock);
  if (now) *now = limit;
  return raised;
}

const char *fdy_func_name(CUfunction f) {
  const char *name = NULL;
  if (fdy_drv.cuFuncGetName(&name, f) != CUDA_SUCCESS || !name) name = "<unnamed kernel>";
  return name;
}

/* "kernel node 3", "kernel node 3 > 1" (node 1 of node 3's child graph), "override of kernel node 3". */
static const char *node_where(const fdy_decoded *d, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "%skernel node %u", d->override ? "override of " : "", d->where[0]);
  for (unsigned i = 1; i <= d->depth && i <= FDY_MAX_DEPTH && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, " > %u", d->where[i]);
  return buf;
}

/* "[0:8 8:4 16:8]": offset:size of each parameter, the first eight and then "...". */
static const char *param_list(const rec_param *params, uint32_t count, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (uint32_t i = 0; i < count && n < cap; i++) {
    if (i == 8) {
      n += (size_t)snprintf(buf + n, cap - n, " ...");
      break;
    }
    rec_param p;
    memcpy(&p, &params[i], sizeof(p));
    n += (size_t)snprintf(buf + n, cap - n, "%s%u:%u", i ? " " : "", p.offset, p.size);
  }
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

/* Proves that a kernel node gives its kernel the parameters the kernel takes, as the driver reports them for
 * the loaded function: in kernelParams mode the same count, each at the same offset with the same size (the
 * driver reads that list through the node's pointers, so a table one short is read past); in `extra` mode a
 * buffer that reaches into the last parameter. The driver copies exactly the buffer's stated size into the
 * kernel's parameter space, and a launcher may fill a trailing argument storage only in part: NCCL's kernels
 * take one 4096-byte ncclDevKernelArgsStorage and are launched with the bytes in use (512 for an all-reduce),
 * which the driver accepted at capture. A buffer that ends before the last parameter begins leaves whole
 * arguments out, which no launcher does. One comparison per node: the lists are asked once per
 * function (kernel_params.c). Where the driver cannot describe a kernel (cuFuncGetParamInfo missing, older
 * than CUDA 12.4, or refused), a kernelParams node is refused, since nothing else bounds what the driver
 * reads, and SAVE refuses to record one (ParamIntrospectionError); an `extra` node goes on, its buffer's
 * size being the driver's to check against the kernel (docs/DESIGN.md, "Kernel parameters at LOAD"). */
static int check_params(const fdy_decoded *d, const rec_kernel *k, const rec_param *table, fdy_functions *fns) {
  CUfunction f = (CUfunction)(uintptr_t)fns->handles[k->function];
  const fdy_kparams *l = fns->params[k->function];
  char where[FDY_MAX_DEPTH * 12 + 32], want[160], got[160];
  /* Asked when the call first meets the function, and again for a kernelParams node of a function an `extra`
   * node found the driver cannot describe (the refusal is then this node's). */
  if (!l || (l == &no_list && k->arg_mode != FDY_ARG_EXTRA)) {
    CUresult r;
    uint32_t at;
    int rc = fdy_kernel_params(f, &l, &r, &at);
    if (rc == FDY_ERR_NO_PARAM_INFO && k->arg_mode == FDY_ARG_EXTRA) {
      l = &no_list;
    } else if (rc == FDY_ERR_NO_PARAM_INFO) {
      return fdy_fail(FDY_ERR_NO_PARAM_INFO,
                      "%s (kernel %s): its %u recorded parameters cannot be checked against the kernel's, "
                      "because cuFuncGetParamInfo(index %u) returned %s (%d); the driver reads as many parameters "
                      "as the kernel takes, so LOAD does not hand it a table it cannot prove. Next step: an NVIDIA "
                      "driver for CUDA 12.4 or newer, like the one SAVE ran on.",
                      node_where(d, where, sizeof(where)), fdy_func_name(f), k->param_count, at, fdy_cu_name(r),
                      (int)r);
    } else if (rc == FDY_ERR_UNSUPPORTED) {
      return fdy_fail(FDY_ERR_UNSUPPORTED, "%s (kernel %s): the driver reports more parameters, or larger, "
                      "than a graph record can hold", node_where(d, where, sizeof(where)), fdy_func_name(f));
    } else if (rc) {
      return fdy_fail(FDY_ERR_INVALID, "out of host memory");
    }
    fns->params[k->function] = l;
  }
  if (k->arg_mode == FDY_ARG_EXTRA) {
    if (l == &no_list || k->arg_bytes >= l->reach) return 0;
    return fdy_fail(FDY_ERR_PARAM_MISMATCH,
                    "%s (kernel %s): its `extra` argument buffer holds %u bytes, but the kernel's %u "
                    "parameters %s (offset:size) span %u and the buffer ends before the last of them begins; "
                    "the kernel would read arguments the launch never gave. " ALTERED,
                    node_where(d, where, sizeof(where)), fdy_func_name(f), k->arg_bytes, l->count,
                    param_list(l->p, l->count, want, sizeof(want)), l->span);
  }
  if (k->param_count == l->count && memcmp(table, l->p, (size_t)l->count * sizeof(rec_param)) == 0) return 0;
  return fdy_fail(FDY_ERR_PARAM_MISMATCH,
                  "%s (kernel %s): the kernel takes %u parameters %s (offset:size), the record gives it %u %s; "
                  "the driver reads the kernel's own list through the node's pointers. " ALTERED,
                  node_where(d, where, sizeof(where)), fdy_func_name(f), l->count,
                  param_list(l->p, l->count, want, sizeof(want)), k->param_count,
                  param_list(table, k->param_count, got, sizeof(got)));
}

static int decode_kernel(fdy_decoded *d, const uint8_t *p, uint32_t bytes, fdy_functions *fns) {
  if (bytes < sizeof(rec_kernel)) return CORRUPT("kernel node of %u bytes", bytes);
  rec_kernel k;
  memcpy(&k, p, sizeof(k));
  size_t tables = (size_t)k.param_count * sizeof(rec_param) + (size_t)k.attr_count * sizeof(rec_attr);
  if (sizeof(rec_kernel) + tables + k.arg_bytes > bytes)
    return CORRUPT("kernel node needs %zu bytes, has %u", sizeof(rec_kernel) + tables + k.arg_bytes, bytes);
  if (k.function >= fns->count) return CORRUPT("function index %u of %zu", k.function, fns->count);
  if (k.arg_mode != FDY_ARG_EXTRA && k.arg_mode != FDY_ARG_PARAMS) return CORRUPT("argument mode %u", k.arg_mode);
  const rec_param *params = (const rec_param *)(p + sizeof(rec_kernel));
  int rc = check_params(d, &k, params, fns);
  if (rc) return rc;
  d->attrs = (const rec_attr *)(p + sizeof(rec_kernel) + k.param_count * sizeof(rec_param));
  d->attr_count = k.attr_count;
  uint8_t *args = (uint8_t *)(p + sizeof(rec_kernel) + tables);

  CUDA_KERNEL_NODE_PARAMS_v2 *np = &d->kernel;
  memset(np, 0, sizeof(*np));
  np->func = (CUfunction)(uintptr_t)fns->handles[k.function];
  np->gridDimX = k.grid[0]; np->gridDimY = k.grid[1]; np->gridDimZ = k.grid[2];
  np->blockDimX = k.block[0]; np->blockDimY = k.block[1]; np->blockDimZ = k.block[2];
  np->sharedMemBytes = k.shared_mem;
  if (k.arg_mode == FDY_ARG_EXTRA) {
    d->arg_size = k.arg_bytes;
    d->extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
    d->extra[1] = args;
    d->extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
    d->extra[3] = &d->arg_size;
    d->extra[4] = CU_LAUNCH_PARAM_END;
    np->extra = d->extra;
    return 0;
  }
  if (k.param_count > d->scratch_cap) {
    void **s = realloc(d->scratch, k.param_count * sizeof(void *));
    if (!s) return fdy_fail(FDY_ERR_INVALID, "out of host memory");
    d->scratch = s;
    d->scratch_cap = k.param_count;
  }
  for (uint16_t i = 0; i < k.param_count; i++) {
    rec_param pr;
    memcpy(&pr, &params[i], sizeof(pr));
    if ((uint64_t)pr.offset + pr.size > k.arg_bytes) return CORRUPT("parameter %u lies outside its argument buffer", i);
    d->scratch[i] = args + pr.offset;
  }
  np->kernelParams = k.param_count ? d->scratch : NULL;
  return 0;
}

int fdy_decode_node(fdy_decoded *d, const uint8_t *p, uint32_t bytes, fdy_functions *fns) {
  switch (p[0]) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return decode_kernel(d, p, bytes, fns);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      if (bytes < sizeof(rec_memset)) return CORRUPT("memset node of %u bytes", bytes);
      rec_memset m;
      memcpy(&m, p, sizeof(m));
      d->memset = (CUDA_MEMSET_NODE_PARAMS){m.dst, m.pitch, m.value, m.element_size, m.width, m.height};
      return 0;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      if (bytes < sizeof(rec_memcpy)) return CORRUPT("memcpy node of %u bytes", bytes);
      rec_memcpy m;
      memcpy(&m, p, sizeof(m));
      CUDA_MEMCPY3D *cp = &d->memcpy;
      memset(cp, 0, sizeof(*cp));
      cp->srcMemoryType = (CUmemorytype)m.src_type; cp->srcDevice = m.src_device;
      cp->srcXInBytes = m.src_x; cp->srcY = m.src_y; cp->srcZ = m.src_z; cp->srcPitch = m.src_pitch; cp->srcHeight = m.src_height;
      cp->dstMemoryType = (CUmemorytype)m.dst_type; cp->dstDevice = m.dst_device;
      cp->dstXInBytes = m.dst_x; cp->dstY = m.dst_y; cp->dstZ = m.dst_z; cp->dstPitch = m.dst_pitch; cp->dstHeight = m.dst_height;
      cp->WidthInBytes = m.width; cp->Height = m.height; cp->Depth = m.depth;
      return 0;
    }
    default:
      return CORRUPT("node type %u has no parameters to decode", p[0]);
  }
}

void fdy_decoded_free(fdy_decoded *d) {
  free(d->scratch);
  d->scratch = NULL;
  d->scratch_cap = 0;
}

int fdy_record_header(const uint8_t *rec, size_t size, rec_header *h) {
  if (!rec || size < sizeof(rec_header)) return CORRUPT("%zu bytes cannot hold a header", size);
  memcpy(h, rec, sizeof(*h));
  if (memcmp(h->magic, FDY_RECORD_MAGIC, 4) != 0) return CORRUPT("bad magic");
  if (h->version != FDY_RECORD_VERSION)
    return fdy_fail(FDY_ERR_CORRUPT, "graph record version %u; this Foundry reads %d", h->version, FDY_RECORD_VERSION);
  if (h->header_bytes != sizeof(rec_header) || h->total_bytes > size || h->total_bytes < sizeof(rec_header))
    return CORRUPT("header sizes (%u, %llu of %zu)", h->header_bytes, (unsigned long long)h->total_bytes, size);
  /* Every count is checked against the bytes present before anyone sizes a buffer by it: each node
   * takes at least a node header, each edge an edge record, and each event at least one event node. */
  uint64_t room = h->total_bytes - sizeof(rec_header);
  if ((uint64_t)h->node_count * sizeof(rec_node) + (uint64_t)h->edge_count * sizeof(rec_edge) > room)
    return CORRUPT("%u nodes and %u edges cannot fit in %llu bytes", h->node_count, h->edge_count,
                   (unsigned long long)h->total_bytes);
  if ((uint64_t)h->event_count * sizeof(rec_event) > room)
    return CORRUPT("%u events cannot be used by the nodes of %llu bytes", h->event_count,
                   (unsigned long long)h->total_bytes);
  return 0;
}

int fdy_record_node_offsets(const uint8_t *rec, size_t size, size_t *offsets, size_t cap, size_t *count) {
  rec_header h;
  int rc = fdy_record_header(rec, size, &h);
  if (rc) return rc;
  size_t at = sizeof(rec_header);
  for (uint32_t i = 0; i < h.node_count; i++) {
    uint32_t bytes;
    if (at + sizeof(rec_node) > h.total_bytes) return CORRUPT("node %u starts past the end", i);
    memcpy(&bytes, rec + at + 4, 4);
    if (bytes < sizeof(rec_node) || bytes % 8 || bytes > h.total_bytes - at) return CORRUPT("node %u has size %u", i, bytes);
    if (i < cap) offsets[i] = at;
    at += bytes;
  }
  *count = h.node_count;
  return 0;
}
