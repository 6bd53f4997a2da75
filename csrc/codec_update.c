/* Template members: a graph that shares its template's topology is the template with some nodes'
 * parameters replaced. LOAD applies those replacements to a graph built from the template (for a
 * member's own exec) or, on the hot path, straight to the template's exec so that every member is
 * replayable before its own exec exists. */
#include <stdlib.h>
#include <string.h>

#include "record.h"

#define CORRUPT(...) fdy_fail(FDY_ERR_CORRUPT, "damaged delta: " __VA_ARGS__)

static int apply_one(CUgraphExec exec, CUgraphNode node, const uint8_t *p, uint32_t bytes, fdy_decoded *d,
                     const uint64_t *funcs, size_t nfuncs, CUcontext ctx, uint32_t index) {
  int rc = fdy_decode_node(d, p, bytes, funcs, nfuncs);
  if (rc) return rc;
  CUresult r;
  switch (p[0]) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      if (exec) {
        r = fdy_drv.cuGraphExecKernelNodeSetParams_v2(exec, node, &d->kernel);
        return r ? fdy_fail_cu(r, "cuGraphExecKernelNodeSetParams", "node %u", index) : 0;
      }
      r = fdy_drv.cuGraphKernelNodeSetParams_v2(node, &d->kernel);
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

FDY_EXPORT int fdy_overrides_apply(uint64_t target, int to_exec, const uint64_t *nodes, size_t node_count,
                                   const void *delta, size_t delta_size, const uint64_t *functions,
                                   size_t function_count) {
  int rc = fdy_driver_ensure();
  if (rc) return rc;
  const uint8_t *p = delta;
  rec_delta_header h;
  if (!p || delta_size < sizeof(h)) return CORRUPT("%zu bytes", delta_size);
  memcpy(&h, p, sizeof(h));
  if (memcmp(h.magic, FDY_DELTA_MAGIC, 4) != 0 || h.version != FDY_DELTA_VERSION || h.header_bytes != sizeof(h) ||
      h.total_bytes > delta_size)
    return CORRUPT("bad header");
  if (h.function_count != function_count)
    return fdy_fail(FDY_ERR_INVALID, "the delta names %u functions, %zu were resolved", h.function_count, function_count);
  CUcontext ctx = NULL;
  fdy_drv.cuCtxGetCurrent(&ctx);
  fdy_decoded d;
  memset(&d, 0, sizeof(d));
  size_t at = sizeof(h);
  for (uint32_t i = 0; i < h.override_count && rc == 0; i++) {
    rec_override o;
    uint32_t bytes;
    if (at + sizeof(o) + sizeof(rec_node) > h.total_bytes) { rc = CORRUPT("override %u starts past the end", i); break; }
    memcpy(&o, p + at, sizeof(o));
    memcpy(&bytes, p + at + sizeof(o) + 4, 4);
    if (bytes < sizeof(rec_node) || bytes % 8 || bytes > h.total_bytes - at - sizeof(o)) { rc = CORRUPT("override %u has size %u", i, bytes); break; }
    if (o.node_index >= node_count) { rc = CORRUPT("override %u names node %u of %zu", i, o.node_index, node_count); break; }
    rc = apply_one(to_exec ? (CUgraphExec)(uintptr_t)target : NULL, (CUgraphNode)(uintptr_t)nodes[o.node_index],
                   p + at + sizeof(o), bytes, &d, functions, function_count, ctx, o.node_index);
    at += sizeof(o) + bytes;
  }
  fdy_decoded_free(&d);
  return rc;
}

FDY_EXPORT int fdy_delta_from_record(const void *record, size_t record_size, const uint32_t *indices, size_t count,
                                     void **delta, size_t *delta_size) {
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
  *delta = out.data;
  *delta_size = out.len;
  return 0;
}
