/* Template members: a graph that shares its template's topology is the template with some nodes'
 * parameters replaced. LOAD applies those replacements to a graph built from the template (for a
 * member's own exec) or, on the hot path, straight to the template's exec so that every member is
 * replayable before its own exec exists. */
#include <stdlib.h>
#include <string.h>

#include "record.h"

#define CORRUPT(...) fdy_fail(FDY_ERR_CORRUPT, "damaged delta: " __VA_ARGS__)

/* Decodes an override (its kernel parameters checked), naming it by its template node for messages. */
static int decode_override(fdy_decoded *d, uint32_t index, const uint8_t *p, uint32_t bytes, fdy_functions *fns) {
  d->where[0] = index;
  d->depth = 0;
  d->override = 1;
  return fdy_decode_node(d, p, bytes, fns);
}

static int apply_one(CUgraphExec exec, CUgraphNode node, const uint8_t *p, uint32_t bytes, fdy_decoded *d,
                     fdy_functions *fns, CUcontext ctx, uint32_t index) {
  int rc = decode_override(d, index, p, bytes, fns);
  if (rc) return rc;
  CUresult r;
  switch (p[0]) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      /* The kernel's shared-memory limit as when a node is added (FDY_WITH_SMEM_LIMIT, record.h). */
      if (exec) {
        FDY_WITH_SMEM_LIMIT(r, &d->kernel, fdy_drv.cuGraphExecKernelNodeSetParams_v2(exec, node, &d->kernel));
        return r ? fdy_fail_cu(r, "cuGraphExecKernelNodeSetParams", "node %u", index) : 0;
      }
      FDY_WITH_SMEM_LIMIT(r, &d->kernel, fdy_drv.cuGraphKernelNodeSetParams_v2(node, &d->kernel));
      return r ? fdy_fail_cu(r, "cuGraphKernelNodeSetParams", "node %u", index) : fdy_set_kernel_attrs(node, d, 0);
    case CU_GRAPH_NODE_TYPE_MEMSET:
      if (exec && !fdy_drv.cuGraphExecMemsetNodeSetParams)
        return fdy_fail(FDY_ERR_UNSUPPORTED, "the driver has no cuGraphExecMemsetNodeSetParams");
      r = exec ? fdy_drv.cuGraphExecMemsetNodeSetParams(exec, node, &d->memset, ctx)
               : fdy_drv.cuGraphMemsetNodeSetParams(node, &d->memset);
      return r ? fdy_fail_cu(r, "cuGraph*MemsetNodeSetParams", "node %u", index) : 0;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (exec && !fdy_drv.cuGraphExecMemcpyNodeSetParams)
        return fdy_fail(FDY_ERR_UNSUPPORTED, "the driver has no cuGraphExecMemcpyNodeSetParams");
      r = exec ? fdy_drv.cuGraphExecMemcpyNodeSetParams(exec, node, &d->memcpy, ctx)
               : fdy_drv.cuGraphMemcpyNodeSetParams(node, &d->memcpy);
      return r ? fdy_fail_cu(r, "cuGraph*MemcpyNodeSetParams", "node %u", index) : 0;
    default:
      return CORRUPT("override of node %u has type %u; only kernel, memset and memcpy nodes vary", index, p[0]);
  }
}

static int delta_header(const uint8_t *p, size_t delta_size, rec_delta_header *h) {
  if (!p || delta_size < sizeof(*h)) return CORRUPT("%zu bytes", delta_size);
  memcpy(h, p, sizeof(*h));
  if (memcmp(h->magic, FDY_DELTA_MAGIC, 4) != 0 || h->version != FDY_DELTA_VERSION ||
      h->header_bytes != sizeof(*h) || h->total_bytes != delta_size || h->reserved0 || h->reserved1)
    return CORRUPT("bad header");
  /* Every count is checked against the bytes present before anyone sizes a buffer by it: each
   * override takes at least its index and a node header. */
  if (h->override_count > (delta_size - sizeof(*h)) / (sizeof(rec_override) + sizeof(rec_node)))
    return CORRUPT("%u overrides cannot fit in %zu bytes", h->override_count, delta_size);
  return 0;
}

/* Calls visit(node index, node record, its size, ctx) for each override of a checked header, after
 * the checks the Python reader makes too (foundry/records/delta.py: in bounds, reserved bits zero, no node
 * overridden twice, nothing after the last override); stops at the first non-zero return. */
typedef int (*delta_visit)(uint32_t index, const uint8_t *node, uint32_t bytes, void *ctx);

static int delta_walk(const uint8_t *p, const rec_delta_header *h, size_t node_count, delta_visit visit, void *ctx) {
  uint8_t *seen = calloc(node_count / 8 + 1, 1);
  if (!seen) return fdy_fail(FDY_ERR_INVALID, "out of host memory");
  size_t at = sizeof(*h);
  int rc = 0;
  for (uint32_t i = 0; i < h->override_count && !rc; i++) {
    rec_override o;
    uint32_t bytes;
    if (at + sizeof(o) + sizeof(rec_node) > h->total_bytes) {
      rc = CORRUPT("override %u starts past the end", i);
      break;
    }
    memcpy(&o, p + at, sizeof(o));
    memcpy(&bytes, p + at + sizeof(o) + 4, 4);
    if (bytes < sizeof(rec_node) || bytes % 8 || bytes > h->total_bytes - at - sizeof(o))
      rc = CORRUPT("override %u has size %u", i, bytes);
    else if (o.node_index >= node_count)
      rc = CORRUPT("override %u names node %u of %zu", i, o.node_index, node_count);
    else if (o.reserved || (seen[o.node_index / 8] >> (o.node_index % 8)) & 1)
      rc = CORRUPT("override %u (node %u) is repeated or has reserved bits", i, o.node_index);
    else {
      seen[o.node_index / 8] |= (uint8_t)(1u << (o.node_index % 8));
      rc = visit(o.node_index, p + at + sizeof(o), bytes, ctx);
      at += sizeof(o) + bytes;
    }
  }
  if (!rc && at != h->total_bytes) rc = CORRUPT("%zu bytes after the last override", (size_t)(h->total_bytes - at));
  free(seen);
  return rc;
}

typedef struct {
  CUgraphExec exec;
  const uint64_t *nodes;
  fdy_functions fns;
  CUcontext ctx;
  fdy_decoded d;
} apply_ctx;

static int check_visit(uint32_t index, const uint8_t *node, uint32_t bytes, void *c) {
  apply_ctx *a = c;
  if (node[0] != CU_GRAPH_NODE_TYPE_KERNEL && node[0] != CU_GRAPH_NODE_TYPE_MEMSET &&
      node[0] != CU_GRAPH_NODE_TYPE_MEMCPY)
    return CORRUPT("override of node %u has type %u; only kernel, memset and memcpy nodes vary", index, node[0]);
  return decode_override(&a->d, index, node, bytes, &a->fns);
}

static int apply_visit(uint32_t index, const uint8_t *node, uint32_t bytes, void *c) {
  apply_ctx *a = c;
  return apply_one(a->exec, (CUgraphNode)(uintptr_t)a->nodes[index], node, bytes, &a->d, &a->fns, a->ctx, index);
}

/* Checks every override of a delta (layout, node types, kernel parameters) with no driver call but the
 * kernels' parameter lists; `a` holds the member's function table. */
static int delta_checked(apply_ctx *a, const void *delta, size_t delta_size, size_t node_count, rec_delta_header *h,
                         size_t function_count) {
  int rc = delta_header(delta, delta_size, h);
  if (rc) return rc;
  if (h->function_count != function_count)
    return fdy_fail(FDY_ERR_INVALID, "the delta names %u functions, %zu were resolved", h->function_count, function_count);
  return delta_walk(delta, h, node_count, check_visit, a);
}

FDY_EXPORT int fdy_overrides_apply(uint64_t target, int to_exec, const uint64_t *nodes, size_t node_count,
                                   const void *delta, size_t delta_size, const uint64_t *functions,
                                   size_t function_count) {
  int rc = fdy_driver_ensure();
  if (rc) return rc;
  apply_ctx a = {to_exec ? (CUgraphExec)(uintptr_t)target : NULL, nodes, {0}, NULL, {0}};
  if ((rc = fdy_functions_init(&a.fns, functions, function_count))) return rc;
  fdy_drv.cuCtxGetCurrent(&a.ctx);
  /* Every override is checked before the first is applied: a delta refused halfway would leave an exec that
   * is neither the graph it held nor the member's (load/groups.py switches members into a shared exec). */
  rec_delta_header h;
  rc = delta_checked(&a, delta, delta_size, node_count, &h, function_count);
  if (rc == 0) rc = delta_walk(delta, &h, node_count, apply_visit, &a);
  fdy_decoded_free(&a.d);
  fdy_functions_free(&a.fns);
  return rc;
}

FDY_EXPORT int fdy_delta_check(const void *delta, size_t delta_size, size_t node_count, const uint64_t *functions,
                               size_t function_count) {
  int rc = fdy_driver_ensure();
  if (rc) return rc;
  apply_ctx a = {NULL, NULL, {0}, NULL, {0}};
  if ((rc = fdy_functions_init(&a.fns, functions, function_count))) return rc;
  rec_delta_header h;
  rc = delta_checked(&a, delta, delta_size, node_count, &h, function_count);
  fdy_decoded_free(&a.d);
  fdy_functions_free(&a.fns);
  return rc;
}

typedef struct {
  uint32_t *out;
  size_t n;
} indices_ctx;

static int indices_visit(uint32_t index, const uint8_t *node, uint32_t bytes, void *c) {
  (void)node;
  (void)bytes;
  indices_ctx *x = c;
  x->out[x->n++] = index;
  return 0;
}

FDY_EXPORT int fdy_delta_indices(const void *delta, size_t delta_size, size_t node_count, uint32_t *out, size_t cap,
                                 size_t *count) {
  rec_delta_header h;
  int rc = delta_header(delta, delta_size, &h);
  if (rc) return rc;
  *count = h.override_count;
  if (!out || cap < h.override_count) return 0;
  indices_ctx x = {out, 0};
  return delta_walk(delta, &h, node_count, indices_visit, &x);
}

FDY_EXPORT int fdy_delta_from_record(const void *record, size_t record_size, const uint32_t *indices, size_t count,
                                     const uint8_t *template_sha256, void **delta, size_t *delta_size) {
  if (!template_sha256) return fdy_fail(FDY_ERR_INVALID, "fdy_delta_from_record: no template SHA-256");
  const uint8_t *rec = record;
  size_t n = 0;
  int rc = fdy_record_node_offsets(rec, record_size, NULL, 0, &n);
  if (rc) return rc;
  size_t *offsets = malloc((n ? n : 1) * sizeof(size_t));
  if (!offsets) return fdy_fail(FDY_ERR_INVALID, "out of host memory");
  fdy_record_node_offsets(rec, record_size, offsets, n, &n);
  rec_header rh;
  memcpy(&rh, rec, sizeof(rh));
  fdy_buf out = {0};
  fdy_buf_reserve(&out, sizeof(rec_delta_header));
  for (size_t i = 0; i < count && rc == 0; i++) {
    if (indices[i] >= n) { rc = fdy_fail(FDY_ERR_INVALID, "node index %u of %zu", indices[i], n); break; }
    uint32_t bytes;
    memcpy(&bytes, rec + offsets[indices[i]] + 4, 4);
    rec_override o = {indices[i], 0};
    fdy_buf_put(&out, &o, sizeof(o));
    fdy_buf_put(&out, rec + offsets[indices[i]], bytes);
  }
  free(offsets);
  if (rc == 0 && out.oom) rc = fdy_fail(FDY_ERR_INVALID, "out of host memory");
  if (rc) { free(out.data); return rc; }
  rec_delta_header *h = (rec_delta_header *)out.data;
  memcpy(h->magic, FDY_DELTA_MAGIC, 4);
  h->version = FDY_DELTA_VERSION;
  h->header_bytes = sizeof(rec_delta_header);
  h->override_count = (uint32_t)count;
  h->function_count = rh.function_count;
  h->total_bytes = out.len;
  memcpy(h->template_sha256, template_sha256, sizeof(h->template_sha256));
  *delta = out.data;
  *delta_size = out.len;
  return 0;
}
