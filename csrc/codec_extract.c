/* SAVE's hot loop: walk a captured CUgraph and write its graph record.
 *
 * What a kernel node needs to be rebuilt bit-identically (measured on H200, REFERENCE.md section 3):
 * its argument bytes (through kernelParams, sized by cuFuncGetParamInfo, or through the `extra`
 * buffer that cuBLAS uses), its launch attributes (thread-block clusters), and the edge data of its
 * edges (programmatic dependent launch ports). Nodes that depend on host state (callbacks, host
 * copies) or on graph-owned memory (alloc/free nodes) cannot be persisted and fail the whole SAVE. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "record.h"

typedef struct {
  fdy_buf out;
  fdy_map func_index; /* CUfunction -> index + 1 */
  uint64_t *funcs;
  size_t nfuncs, capfuncs;
  const fdy_kparams **layouts; /* by function index, NULL until asked (kernel_params.c keeps them) */
  fdy_map event_index; /* CUevent -> index + 1 */
  size_t nevents;
  CUfunction last_func; /* for error messages: the kernel before a node we cannot handle (named only then) */
} extract_t;

const char *fdy_node_type_name(int type) {
  switch (type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return "kernel";
    case CU_GRAPH_NODE_TYPE_MEMCPY: return "memcpy";
    case CU_GRAPH_NODE_TYPE_MEMSET: return "memset";
    case CU_GRAPH_NODE_TYPE_HOST: return "host callback";
    case CU_GRAPH_NODE_TYPE_GRAPH: return "child graph";
    case CU_GRAPH_NODE_TYPE_EMPTY: return "empty";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return "event wait";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return "event record";
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL: return "external semaphore signal";
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT: return "external semaphore wait";
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return "memory allocation";
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return "memory free";
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: return "batch memory operation";
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: return "conditional";
    default: return "unknown";
  }
}

static const char *func_name(CUfunction f) {
  const char *n = NULL;
  if (fdy_drv.cuFuncGetName(&n, f) != CUDA_SUCCESS || !n) n = "<unnamed kernel>";
  return n;
}

static const char *last_kernel(const extract_t *c) {
  return c->last_func ? func_name(c->last_func) : "<none: first node>";
}

static int function_index(extract_t *c, CUfunction f, uint32_t *index) {
  uint64_t v;
  if (fdy_map_get(&c->func_index, (uint64_t)(uintptr_t)f, &v)) {
    *index = (uint32_t)(v - 1);
    return 0;
  }
  if (c->nfuncs == c->capfuncs) {
    size_t cap = c->capfuncs ? c->capfuncs * 2 : 64;
    uint64_t *fs = realloc(c->funcs, cap * sizeof(*fs));
    const fdy_kparams **ls = realloc(c->layouts, cap * sizeof(*ls));
    if (fs) c->funcs = fs;
    if (ls) c->layouts = ls;
    if (!fs || !ls) return fdy_fail(FDY_ERR_INVALID, "out of host memory");
    c->capfuncs = cap;
  }
  c->funcs[c->nfuncs] = (uint64_t)(uintptr_t)f;
  c->layouts[c->nfuncs] = NULL;
  fdy_map_put(&c->func_index, (uint64_t)(uintptr_t)f, ++c->nfuncs);
  *index = (uint32_t)(c->nfuncs - 1);
  return 0;
}

/* Parameter offsets and sizes, once per function. */
static int param_layout(extract_t *c, uint32_t index, const fdy_kparams **out) {
  if ((*out = c->layouts[index])) return 0;
  CUfunction f = (CUfunction)(uintptr_t)c->funcs[index];
  CUresult r;
  uint32_t i;
  int rc = fdy_kernel_params(f, out, &r, &i);
  /* An invalid handle is not a driver without parameter info: the kernel's module or library was
   * unloaded after capture. Reporting it as NO_PARAM_INFO sent users to upgrade their driver
   * (tests/cpu/test_save_errors.py, test_save_of_kernel_from_unloaded_module_...). */
  if (rc == FDY_ERR_NO_PARAM_INFO && r == CUDA_ERROR_INVALID_HANDLE)
    return fdy_fail(FDY_ERR_NOT_FOUND,
                    "a kernel node launches a function that is no longer loaded (cuFuncGetParamInfo returned "
                    "CUDA_ERROR_INVALID_HANDLE): its module or library was unloaded after capture. Nothing was "
                    "written. Next step: save graphs before unloading the modules and libraries their kernels "
                    "come from.");
  if (rc == FDY_ERR_NO_PARAM_INFO)
    return fdy_fail(FDY_ERR_NO_PARAM_INFO,
                    "cannot introspect the parameters of kernel %s: cuFuncGetParamInfo(index %u) returned %s (%d). "
                    "Without parameter sizes its arguments cannot be saved faithfully. Next step: an NVIDIA "
                    "driver for CUDA 12.4 or newer.",
                    func_name(f), i, fdy_cu_name(r), (int)r);
  if (rc == FDY_ERR_UNSUPPORTED)
    return fdy_fail(FDY_ERR_UNSUPPORTED, "kernel %s has an out-of-range parameter layout", func_name(f));
  if (rc) return fdy_fail(FDY_ERR_INVALID, "out of host memory");
  c->layouts[index] = *out;
  return 0;
}

static int put_kernel(extract_t *c, CUgraphNode node) {
  CUDA_KERNEL_NODE_PARAMS_v2 p;
  memset(&p, 0, sizeof(p));
  CUresult r = fdy_drv.cuGraphKernelNodeGetParams_v2(node, &p);
  if (r != CUDA_SUCCESS) return fdy_fail_cu(r, "cuGraphKernelNodeGetParams", "after kernel %s", last_kernel(c));
  CUfunction f = p.func;
  if (!f && p.kern && (r = fdy_drv.cuKernelGetFunction(&f, p.kern)) != CUDA_SUCCESS)
    return fdy_fail_cu(r, "cuKernelGetFunction", "kernel node after %s", last_kernel(c));
  c->last_func = f;
  uint32_t index = 0;
  int rc = function_index(c, f, &index);
  if (rc) return rc;

  const uint8_t *extra_buf = NULL;
  uint32_t arg_bytes = 0;
  const fdy_kparams *l = NULL;
  uint8_t mode = FDY_ARG_PARAMS;
  if (p.extra) {
    size_t *size = NULL;
    for (size_t i = 0; p.extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (p.extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) extra_buf = p.extra[i + 1];
      else if (p.extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = p.extra[i + 1];
      else return fdy_fail(FDY_ERR_UNSUPPORTED, "kernel %s: unknown `extra` launch option %p", last_kernel(c), p.extra[i]);
    }
    if (!extra_buf || !size || *size > UINT32_MAX)
      return fdy_fail(FDY_ERR_UNSUPPORTED, "kernel %s: `extra` without a usable argument buffer", last_kernel(c));
    mode = FDY_ARG_EXTRA;
    arg_bytes = (uint32_t)*size;
  } else {
    if ((rc = param_layout(c, index, &l))) return rc;
    if (l->count && !p.kernelParams)
      return fdy_fail(FDY_ERR_UNSUPPORTED, "kernel %s has %u parameters but its node carries no arguments",
                      last_kernel(c), l->count);
    arg_bytes = l->span;
  }

  static const int attr_ids[] = {FDY_LAUNCH_ATTRS(FDY_CUDA_VALUE)};
  rec_attr attrs[sizeof(attr_ids) / sizeof(attr_ids[0])];
  uint16_t nattrs = 0;
  for (size_t i = 0; i < sizeof(attr_ids) / sizeof(attr_ids[0]); i++) {
    CUlaunchAttributeValue v;
    memset(&v, 0, sizeof(v));
    if (fdy_drv.cuGraphKernelNodeGetAttribute(node, (CUlaunchAttributeID)attr_ids[i], &v) != CUDA_SUCCESS) continue;
    static const uint8_t zero[64];
    if (memcmp(&v, zero, sizeof(zero)) == 0) continue;
    attrs[nattrs].id = (uint32_t)attr_ids[i];
    attrs[nattrs].reserved = 0;
    memcpy(attrs[nattrs].value, &v, 64);
    nattrs++;
  }

  size_t at = fdy_buf_reserve(&c->out, sizeof(rec_kernel));
  uint16_t nparams = l ? (uint16_t)l->count : 0;
  if (nparams) fdy_buf_put(&c->out, l->p, nparams * sizeof(rec_param));
  if (nattrs) fdy_buf_put(&c->out, attrs, nattrs * sizeof(rec_attr));
  size_t args_at = fdy_buf_reserve(&c->out, arg_bytes);
  if (c->out.oom) return fdy_fail(FDY_ERR_INVALID, "out of host memory");
  if (mode == FDY_ARG_EXTRA) {
    memcpy(c->out.data + args_at, extra_buf, arg_bytes);
  } else {
    for (uint16_t i = 0; i < nparams; i++)
      memcpy(c->out.data + args_at + l->p[i].offset, p.kernelParams[i], l->p[i].size);
  }
  fdy_buf_align8(&c->out);
  rec_kernel *k = (rec_kernel *)(c->out.data + at);
  k->h.type = CU_GRAPH_NODE_TYPE_KERNEL;
  k->h.bytes = (uint32_t)(c->out.len - at);
  k->function = index;
  k->grid[0] = p.gridDimX; k->grid[1] = p.gridDimY; k->grid[2] = p.gridDimZ;
  k->block[0] = p.blockDimX; k->block[1] = p.blockDimY; k->block[2] = p.blockDimZ;
  k->shared_mem = p.sharedMemBytes;
  k->arg_mode = mode;
  k->param_count = nparams;
  k->attr_count = nattrs;
  k->arg_bytes = arg_bytes;
  return 0;
}

static int put_memcpy(extract_t *c, CUgraphNode node) {
  CUDA_MEMCPY3D m;
  memset(&m, 0, sizeof(m));
  CUresult r = fdy_drv.cuGraphMemcpyNodeGetParams(node, &m);
  if (r != CUDA_SUCCESS) return fdy_fail_cu(r, "cuGraphMemcpyNodeGetParams", "after kernel %s", last_kernel(c));
  int src_ok = m.srcMemoryType == CU_MEMORYTYPE_DEVICE || m.srcMemoryType == CU_MEMORYTYPE_UNIFIED;
  int dst_ok = m.dstMemoryType == CU_MEMORYTYPE_DEVICE || m.dstMemoryType == CU_MEMORYTYPE_UNIFIED;
  if (!src_ok || !dst_ok)
    return fdy_fail(FDY_ERR_UNSUPPORTED,
                    "the graph copies %s memory to %s memory (memcpy node after kernel %s). Host memory and CUDA "
                    "arrays are not part of the saved context. Next step: stage the data in a device tensor "
                    "before capture, so that the graph only copies device to device.",
                    m.srcMemoryType == CU_MEMORYTYPE_HOST ? "host" : m.srcMemoryType == CU_MEMORYTYPE_ARRAY ? "array" : "device",
                    m.dstMemoryType == CU_MEMORYTYPE_HOST ? "host" : m.dstMemoryType == CU_MEMORYTYPE_ARRAY ? "array" : "device",
                    last_kernel(c));
  size_t at = fdy_buf_reserve(&c->out, sizeof(rec_memcpy));
  if (c->out.oom) return fdy_fail(FDY_ERR_INVALID, "out of host memory");
  rec_memcpy *rec = (rec_memcpy *)(c->out.data + at);
  rec->h.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  rec->h.bytes = sizeof(rec_memcpy);
  rec->src_device = m.srcDevice; rec->src_x = m.srcXInBytes; rec->src_y = m.srcY; rec->src_z = m.srcZ;
  rec->src_pitch = m.srcPitch; rec->src_height = m.srcHeight;
  rec->dst_device = m.dstDevice; rec->dst_x = m.dstXInBytes; rec->dst_y = m.dstY; rec->dst_z = m.dstZ;
  rec->dst_pitch = m.dstPitch; rec->dst_height = m.dstHeight;
  rec->width = m.WidthInBytes; rec->height = m.Height; rec->depth = m.Depth;
  rec->src_type = m.srcMemoryType; rec->dst_type = m.dstMemoryType;
  return 0;
}

static int put_memset(extract_t *c, CUgraphNode node) {
  CUDA_MEMSET_NODE_PARAMS m;
  memset(&m, 0, sizeof(m));
  CUresult r = fdy_drv.cuGraphMemsetNodeGetParams(node, &m);
  if (r != CUDA_SUCCESS) return fdy_fail_cu(r, "cuGraphMemsetNodeGetParams", "after kernel %s", last_kernel(c));
  size_t at = fdy_buf_reserve(&c->out, sizeof(rec_memset));
  if (c->out.oom) return fdy_fail(FDY_ERR_INVALID, "out of host memory");
  rec_memset *rec = (rec_memset *)(c->out.data + at);
  rec->h.type = CU_GRAPH_NODE_TYPE_MEMSET;
  rec->h.bytes = sizeof(rec_memset);
  rec->dst = m.dst; rec->pitch = m.pitch; rec->value = m.value; rec->element_size = m.elementSize;
  rec->width = m.width; rec->height = m.height;
  return 0;
}

static int put_event(extract_t *c, CUgraphNode node, CUgraphNodeType type) {
  CUevent ev = NULL;
  CUresult r = type == CU_GRAPH_NODE_TYPE_EVENT_RECORD ? fdy_drv.cuGraphEventRecordNodeGetEvent(node, &ev)
                                                        : fdy_drv.cuGraphEventWaitNodeGetEvent(node, &ev);
  if (r != CUDA_SUCCESS) return fdy_fail_cu(r, "cuGraphEvent*NodeGetEvent", "after kernel %s", last_kernel(c));
  uint64_t v;
  if (!fdy_map_get(&c->event_index, (uint64_t)(uintptr_t)ev, &v)) {
    v = ++c->nevents;
    fdy_map_put(&c->event_index, (uint64_t)(uintptr_t)ev, v);
  }
  rec_event rec = {{(uint8_t)type, 0, 0, sizeof(rec_event)}, (uint32_t)(v - 1), 0};
  fdy_buf_put(&c->out, &rec, sizeof(rec));
  return 0;
}

static int extract_graph(extract_t *c, CUgraph g);

static int put_node(extract_t *c, CUgraphNode node, size_t index) {
  CUgraphNodeType type;
  CUresult r = fdy_drv.cuGraphNodeGetType(node, &type);
  if (r != CUDA_SUCCESS) return fdy_fail_cu(r, "cuGraphNodeGetType", "node %zu", index);
  switch (type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return put_kernel(c, node);
    case CU_GRAPH_NODE_TYPE_MEMCPY: return put_memcpy(c, node);
    case CU_GRAPH_NODE_TYPE_MEMSET: return put_memset(c, node);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return put_event(c, node, type);
    case CU_GRAPH_NODE_TYPE_EMPTY: {
      rec_node rec = {CU_GRAPH_NODE_TYPE_EMPTY, 0, 0, sizeof(rec_node)};
      fdy_buf_put(&c->out, &rec, sizeof(rec));
      return 0;
    }
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      CUgraph child;
      if ((r = fdy_drv.cuGraphChildGraphNodeGetGraph(node, &child)) != CUDA_SUCCESS)
        return fdy_fail_cu(r, "cuGraphChildGraphNodeGetGraph", "node %zu", index);
      size_t at = fdy_buf_reserve(&c->out, sizeof(rec_node));
      int rc = extract_graph(c, child);
      if (rc) return rc;
      fdy_buf_align8(&c->out);
      if (c->out.oom) return fdy_fail(FDY_ERR_INVALID, "out of host memory");
      rec_node *h = (rec_node *)(c->out.data + at);
      h->type = CU_GRAPH_NODE_TYPE_GRAPH;
      h->bytes = (uint32_t)(c->out.len - at);
      return 0;
    }
    default:
      return fdy_fail(FDY_ERR_UNSUPPORTED,
                      "the graph holds a %s node (node %zu, after kernel %s), which Foundry cannot persist: it "
                      "depends on host-side or graph-owned state. Nothing was written. Next step: keep such work "
                      "out of the captured region (host callbacks, stream-ordered allocations, conditional nodes).",
                      fdy_node_type_name(type), index, last_kernel(c));
  }
}

static int extract_graph(extract_t *c, CUgraph g) {
  size_t n = 0, ne = 0;
  CUresult r = fdy_drv.cuGraphGetNodes(g, NULL, &n);
  if (r != CUDA_SUCCESS) return fdy_fail_cu(r, "cuGraphGetNodes", "graph %p", (void *)g);
  CUgraphNode *nodes = calloc(n ? n : 1, sizeof(*nodes));
  CUgraphNode *from = NULL, *to = NULL;
  CUgraphEdgeData *data = NULL;
  fdy_map index = {0};
  int rc = 0;
  size_t at = fdy_buf_reserve(&c->out, sizeof(rec_header));
  if (!nodes) { rc = fdy_fail(FDY_ERR_INVALID, "out of host memory"); goto out; }
  if (n && (r = fdy_drv.cuGraphGetNodes(g, nodes, &n)) != CUDA_SUCCESS) {
    rc = fdy_fail_cu(r, "cuGraphGetNodes", "graph %p", (void *)g);
    goto out;
  }
  for (size_t i = 0; i < n; i++) fdy_map_put(&index, (uint64_t)(uintptr_t)nodes[i], i + 1);
  for (size_t i = 0; i < n && rc == 0; i++) rc = put_node(c, nodes[i], i);
  if (rc) goto out;
  /* Edge data must be asked for: without it the driver answers CUDA_ERROR_LOSSY_QUERY. */
  if ((r = fdy_drv.cuGraphGetEdges_v2(g, NULL, NULL, NULL, &ne)) != CUDA_SUCCESS) {
    rc = fdy_fail_cu(r, "cuGraphGetEdges", "graph %p", (void *)g);
    goto out;
  }
  from = calloc(ne ? ne : 1, sizeof(*from));
  to = calloc(ne ? ne : 1, sizeof(*to));
  data = calloc(ne ? ne : 1, sizeof(*data));
  if (!from || !to || !data) { rc = fdy_fail(FDY_ERR_INVALID, "out of host memory"); goto out; }
  if (ne && (r = fdy_drv.cuGraphGetEdges_v2(g, from, to, data, &ne)) != CUDA_SUCCESS) {
    rc = fdy_fail_cu(r, "cuGraphGetEdges", "graph %p", (void *)g);
    goto out;
  }
  for (size_t i = 0; i < ne; i++) {
    uint64_t a, b;
    if (!fdy_map_get(&index, (uint64_t)(uintptr_t)from[i], &a) || !fdy_map_get(&index, (uint64_t)(uintptr_t)to[i], &b)) {
      rc = fdy_fail(FDY_ERR_CORRUPT, "edge %zu names a node outside its graph", i);
      goto out;
    }
    rec_edge e = {(uint32_t)(a - 1), (uint32_t)(b - 1), data[i].from_port, data[i].to_port, data[i].type, {0}};
    fdy_buf_put(&c->out, &e, sizeof(e));
  }
  if (c->out.oom) { rc = fdy_fail(FDY_ERR_INVALID, "out of host memory"); goto out; }
  rec_header *h = (rec_header *)(c->out.data + at);
  memcpy(h->magic, FDY_RECORD_MAGIC, 4);
  h->version = FDY_RECORD_VERSION;
  h->header_bytes = sizeof(rec_header);
  h->node_count = (uint32_t)n;
  h->edge_count = (uint32_t)ne;
  h->total_bytes = c->out.len - at;
  /* function and event counts: the caller fills them in, for the top level only */
out:
  free(nodes);
  free(from);
  free(to);
  free(data);
  fdy_map_free(&index);
  return rc;
}

FDY_EXPORT int fdy_graph_extract(uint64_t graph, void **blob, size_t *blob_size, uint64_t **functions,
                                 size_t *function_count) {
  int rc = fdy_driver_ensure();
  if (rc) return rc;
  if (!graph || !blob || !blob_size || !functions || !function_count)
    return fdy_fail(FDY_ERR_INVALID, "fdy_graph_extract: null argument");
  extract_t c;
  memset(&c, 0, sizeof(c));
  c.last_func = NULL;
  /* Relaxed capture mode for the walk: SAVE walks a graph on a worker thread while the program goes on,
   * and a capture the program runs meanwhile on another thread must not be broken by this thread's calls. */
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  int relaxed = fdy_drv.cuThreadExchangeStreamCaptureMode && fdy_drv.cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
  rc = extract_graph(&c, (CUgraph)(uintptr_t)graph);
  if (relaxed) fdy_drv.cuThreadExchangeStreamCaptureMode(&mode); /* the caller's mode again */
  if (rc == 0) {
    rec_header *h = (rec_header *)c.out.data;
    h->function_count = (uint32_t)c.nfuncs;
    h->event_count = (uint32_t)c.nevents;
    *blob = c.out.data;
    *blob_size = c.out.len;
    *functions = c.funcs;
    *function_count = c.nfuncs;
  } else {
    free(c.out.data);
    free(c.funcs);
  }
  free(c.layouts);
  fdy_map_free(&c.func_index);
  fdy_map_free(&c.event_index);
  return rc;
}

FDY_EXPORT void fdy_free(void *p) { free(p); }
