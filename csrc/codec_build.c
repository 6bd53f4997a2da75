/* LOAD's hot loop: rebuild a CUgraph from a graph record, then instantiate and launch it.
 *
 * The record has been checksummed by the caller, but the parser still checks every length and index
 * against the buffer, so that a damaged record is an error, never a crash. */
#include <stdlib.h>
#include <string.h>

#include "record.h"

typedef struct {
  fdy_functions funcs;
  CUevent *events;
  size_t nevents;
  CUcontext ctx;
  fdy_decoded decoded; /* reused across nodes */
} build_t;

#define CORRUPT(...) fdy_fail(FDY_ERR_CORRUPT, "damaged graph record: " __VA_ARGS__)

static int build_graph(build_t *b, const uint8_t *rec, size_t avail, unsigned depth, CUgraph *out, uint64_t *nodes_out,
                       size_t cap);

/* Launch-attribute values a freshly added kernel node already has (read once per process from the
 * first node built): setting those again is a wasted driver call, and most captured nodes carry two
 * or three such values (scheduling policy, memory-sync domain map). */
static pthread_mutex_t defaults_lock = PTHREAD_MUTEX_INITIALIZER;
static int defaults_known;
static uint8_t defaults[32][64];

static void learn_defaults(CUgraphNode fresh) {
  static const int ids[] = {FDY_LAUNCH_ATTRS(FDY_CUDA_VALUE)};
  pthread_mutex_lock(&defaults_lock);
  if (!defaults_known) {
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
      CUlaunchAttributeValue v;
      memset(&v, 0, sizeof(v));
      /* An attribute the driver will not report keeps an impossible all-0xff default: never skipped. */
      if (fdy_drv.cuGraphKernelNodeGetAttribute(fresh, (CUlaunchAttributeID)ids[i], &v) == CUDA_SUCCESS)
        memcpy(defaults[ids[i]], &v, 64);
      else
        memset(defaults[ids[i]], 0xff, 64);
    }
    __atomic_store_n(&defaults_known, 1, __ATOMIC_RELEASE); /* publishes defaults[] to unlocked readers */
  }
  pthread_mutex_unlock(&defaults_lock);
}

int fdy_set_kernel_attrs(CUgraphNode node, const fdy_decoded *d, int fresh) {
  if (fresh && !__atomic_load_n(&defaults_known, __ATOMIC_ACQUIRE)) learn_defaults(node);
  for (uint16_t i = 0; i < d->attr_count; i++) {
    rec_attr a;
    memcpy(&a, &d->attrs[i], sizeof(a));
    /* Cluster shapes (4, 11) may default to the function's compile-time shape: always set them. */
    int per_function = a.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION || a.id == CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION;
    if (fresh && !per_function && a.id < 32 && memcmp(defaults[a.id], a.value, 64) == 0) continue;
    CUlaunchAttributeValue v;
    memcpy(&v, a.value, sizeof(v));
    CUresult r = fdy_drv.cuGraphKernelNodeSetAttribute(node, (CUlaunchAttributeID)a.id, &v);
    if (r != CUDA_SUCCESS)
      return fdy_fail_cu(r, "cuGraphKernelNodeSetAttribute", "launch attribute %u on kernel %s", a.id,
                         fdy_func_name(d->kernel.func));
  }
  return 0;
}

static int add_node(build_t *b, CUgraph g, const uint8_t *p, uint32_t bytes, unsigned depth, CUgraphNode *node) {
  CUresult r;
  fdy_decoded *d = &b->decoded;
  int rc;
  switch (p[0]) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      if ((rc = fdy_decode_node(d, p, bytes, &b->funcs))) return rc;
      const CUDA_KERNEL_NODE_PARAMS_v2 *k = &d->kernel;
      FDY_WITH_SMEM_LIMIT(r, k, fdy_drv.cuGraphAddKernelNode_v2(node, g, NULL, 0, k));
      if (r != CUDA_SUCCESS) {
        int limit = -1;
        fdy_raise_smem_limit(k->func, 0, &limit); /* only read, for the message */
        return fdy_fail_cu(r, "cuGraphAddKernelNode",
                           "kernel %s, grid (%u,%u,%u), block (%u,%u,%u), %u bytes shared (the kernel's limit now %d)",
                           fdy_func_name(k->func), k->gridDimX, k->gridDimY, k->gridDimZ, k->blockDimX, k->blockDimY,
                           k->blockDimZ, k->sharedMemBytes, limit);
      }
      return fdy_set_kernel_attrs(*node, d, 1);
    }
    case CU_GRAPH_NODE_TYPE_MEMSET:
      if ((rc = fdy_decode_node(d, p, bytes, &b->funcs))) return rc;
      r = fdy_drv.cuGraphAddMemsetNode(node, g, NULL, 0, &d->memset, b->ctx);
      return r ? fdy_fail_cu(r, "cuGraphAddMemsetNode", "dst 0x%llx", (unsigned long long)d->memset.dst) : 0;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if ((rc = fdy_decode_node(d, p, bytes, &b->funcs))) return rc;
      r = fdy_drv.cuGraphAddMemcpyNode(node, g, NULL, 0, &d->memcpy, b->ctx);
      return r ? fdy_fail_cu(r, "cuGraphAddMemcpyNode", "0x%llx -> 0x%llx", (unsigned long long)d->memcpy.srcDevice,
                             (unsigned long long)d->memcpy.dstDevice) : 0;
    case CU_GRAPH_NODE_TYPE_EMPTY:
      r = fdy_drv.cuGraphAddEmptyNode(node, g, NULL, 0);
      return r ? fdy_fail_cu(r, "cuGraphAddEmptyNode", "-") : 0;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: {
      if (bytes < sizeof(rec_event)) return CORRUPT("event node of %u bytes", bytes);
      rec_event e;
      memcpy(&e, p, sizeof(e));
      if (e.event >= b->nevents) return CORRUPT("event index %u of %zu", e.event, b->nevents);
      r = p[0] == CU_GRAPH_NODE_TYPE_EVENT_RECORD ? fdy_drv.cuGraphAddEventRecordNode(node, g, NULL, 0, b->events[e.event])
                                                  : fdy_drv.cuGraphAddEventWaitNode(node, g, NULL, 0, b->events[e.event]);
      return r ? fdy_fail_cu(r, "cuGraphAddEvent*Node", "event %u", e.event) : 0;
    }
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      CUgraph child;
      if (depth >= FDY_MAX_DEPTH) return CORRUPT("child graphs nested deeper than %d", FDY_MAX_DEPTH);
      if ((rc = build_graph(b, p + sizeof(rec_node), bytes - sizeof(rec_node), depth + 1, &child, NULL, 0))) return rc;
      r = fdy_drv.cuGraphAddChildGraphNode(node, g, NULL, 0, child);
      fdy_drv.cuGraphDestroy(child); /* the node holds a clone */
      return r ? fdy_fail_cu(r, "cuGraphAddChildGraphNode", "-") : 0;
    }
    default:
      return CORRUPT("node type %u", p[0]);
  }
}

static int cmp_edge_data(const void *a, const void *b) {
  const rec_edge *x = a, *y = b;
  return memcmp(&x->from_port, &y->from_port, 8);
}

/* Some drivers apply the first edge's data to every edge of a bulk cuGraphAddDependencies call, so
 * edges are added in groups that share their edge data. */
static int add_edges(CUgraph g, const CUgraphNode *nodes, uint32_t n, const uint8_t *p, uint32_t count) {
  if (!count) return 0;
  rec_edge *edges = malloc(count * sizeof(rec_edge));
  CUgraphNode *from = malloc(count * sizeof(CUgraphNode)), *to = malloc(count * sizeof(CUgraphNode));
  CUgraphEdgeData *data = malloc(count * sizeof(CUgraphEdgeData));
  int rc = 0;
  if (!edges || !from || !to || !data) { rc = fdy_fail(FDY_ERR_INVALID, "out of host memory"); goto out; }
  memcpy(edges, p, count * sizeof(rec_edge));
  for (uint32_t i = 0; i < count; i++)
    if (edges[i].from >= n || edges[i].to >= n) { rc = CORRUPT("edge %u joins nodes %u and %u of %u", i, edges[i].from, edges[i].to, n); goto out; }
  qsort(edges, count, sizeof(rec_edge), cmp_edge_data);
  for (uint32_t start = 0; start < count && rc == 0;) {
    uint32_t end = start;
    int plain = 1;
    while (end < count && cmp_edge_data(&edges[start], &edges[end]) == 0) {
      from[end - start] = nodes[edges[end].from];
      to[end - start] = nodes[edges[end].to];
      memset(&data[end - start], 0, sizeof(CUgraphEdgeData));
      data[end - start].from_port = edges[end].from_port;
      data[end - start].to_port = edges[end].to_port;
      data[end - start].type = edges[end].type;
      if (edges[end].from_port || edges[end].to_port || edges[end].type) plain = 0;
      end++;
    }
    CUresult r = fdy_drv.cuGraphAddDependencies_v2(g, from, to, plain ? NULL : data, end - start);
    if (r != CUDA_SUCCESS) rc = fdy_fail_cu(r, "cuGraphAddDependencies", "%u edges with edge data (%u,%u,%u)", end - start,
                                            edges[start].from_port, edges[start].to_port, edges[start].type);
    start = end;
  }
out:
  free(edges);
  free(from);
  free(to);
  free(data);
  return rc;
}

static int build_graph(build_t *b, const uint8_t *rec, size_t avail, unsigned depth, CUgraph *out, uint64_t *nodes_out,
                       size_t cap) {
  rec_header h;
  int hrc = fdy_record_header(rec, avail, &h);
  if (hrc) return hrc;
  CUgraphNode *nodes = calloc(h.node_count ? h.node_count : 1, sizeof(CUgraphNode));
  if (!nodes) return fdy_fail(FDY_ERR_INVALID, "out of host memory");
  CUgraph g;
  CUresult r = fdy_drv.cuGraphCreate(&g, 0);
  if (r != CUDA_SUCCESS) {
    free(nodes);
    return fdy_fail_cu(r, "cuGraphCreate", "-");
  }
  int rc = 0;
  size_t at = sizeof(rec_header);
  for (uint32_t i = 0; i < h.node_count && rc == 0; i++) {
    uint32_t bytes;
    if (at + sizeof(rec_node) > h.total_bytes) { rc = CORRUPT("node %u starts past the end", i); break; }
    memcpy(&bytes, rec + at + 4, 4);
    if (bytes < sizeof(rec_node) || bytes % 8 || bytes > h.total_bytes - at) { rc = CORRUPT("node %u has size %u", i, bytes); break; }
    b->decoded.depth = depth; /* where the node is, for messages (set again after a child graph's nodes) */
    b->decoded.where[depth] = i;
    rc = add_node(b, g, rec + at, bytes, depth, &nodes[i]);
    at += bytes;
  }
  if (rc == 0 && at + (uint64_t)h.edge_count * sizeof(rec_edge) != h.total_bytes)
    rc = CORRUPT("edge table of %u edges does not end the record", h.edge_count);
  if (rc == 0) rc = add_edges(g, nodes, h.node_count, rec + at, h.edge_count);
  for (uint32_t i = 0; rc == 0 && nodes_out && i < h.node_count && i < cap; i++) nodes_out[i] = (uint64_t)(uintptr_t)nodes[i];
  free(nodes);
  if (rc) {
    fdy_drv.cuGraphDestroy(g);
    return rc;
  }
  *out = g;
  return 0;
}

FDY_EXPORT int fdy_graph_build(const void *blob, size_t blob_size, const uint64_t *functions, size_t function_count,
                               uint64_t *graph, uint64_t *nodes, size_t node_cap) {
  int rc = fdy_driver_ensure();
  if (rc) return rc;
  if (!blob || !graph) return fdy_fail(FDY_ERR_INVALID, "fdy_graph_build: null argument");
  rec_header h;
  if ((rc = fdy_record_header(blob, blob_size, &h))) return rc;
  if (h.function_count != function_count)
    return fdy_fail(FDY_ERR_INVALID, "the record names %u functions, %zu were resolved", h.function_count, function_count);
  build_t b;
  memset(&b, 0, sizeof(b));
  CUresult r = fdy_drv.cuCtxGetCurrent(&b.ctx);
  if (r != CUDA_SUCCESS || !b.ctx) return fdy_fail_cu(r ? r : CUDA_ERROR_INVALID_CONTEXT, "cuCtxGetCurrent", "LOAD needs a current CUDA context");
  if ((rc = fdy_functions_init(&b.funcs, functions, function_count))) return rc;
  if (h.event_count) {
    /* Event nodes name host event objects; LOAD makes fresh ones, which live as long as the process. */
    b.events = calloc(h.event_count, sizeof(CUevent));
    if (!b.events) {
      fdy_functions_free(&b.funcs);
      return fdy_fail(FDY_ERR_INVALID, "out of host memory");
    }
    for (uint32_t i = 0; i < h.event_count; i++)
      if ((r = fdy_drv.cuEventCreate(&b.events[i], CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
        uint32_t failed = i;
        while (i--) fdy_drv.cuEventDestroy_v2(b.events[i]);
        free(b.events);
        fdy_functions_free(&b.funcs);
        return fdy_fail_cu(r, "cuEventCreate", "event %u of the graph", failed);
      }
    b.nevents = h.event_count;
  }
  CUgraph g;
  rc = build_graph(&b, blob, blob_size, 0, &g, nodes, node_cap);
  free(b.events);
  fdy_decoded_free(&b.decoded);
  fdy_functions_free(&b.funcs);
  if (rc == 0) *graph = (uint64_t)(uintptr_t)g;
  return rc;
}

FDY_EXPORT int fdy_graph_instantiate(uint64_t graph, uint64_t flags, uint64_t *exec) {
  int rc = fdy_driver_ensure();
  if (rc) return rc;
  CUgraphExec e;
  CUresult r = fdy_drv.cuGraphInstantiateWithFlags(&e, (CUgraph)(uintptr_t)graph, flags);
  if (r != CUDA_SUCCESS)
    return fdy_fail_cu(r, "cuGraphInstantiateWithFlags",
                       "graph %p. A kernel may need a launch attribute or function attribute the record lacks, or the "
                       "GPU differs from the one SAVE ran on", (void *)(uintptr_t)graph);
  *exec = (uint64_t)(uintptr_t)e;
  return 0;
}

/* Each thread that uploads keeps one stream of its own (per context), so that an upload costs the upload and
 * its wait, not a stream's creation and destruction too: LOAD uploads every exec it makes, thousands for an
 * engine's piecewise graphs. The stream is destroyed when its thread exits. */
typedef struct {
  CUcontext ctx;
  CUstream stream;
} upload_lane;

static pthread_key_t upload_key;
static pthread_once_t upload_once = PTHREAD_ONCE_INIT;
static int upload_key_ok;

static void upload_lane_free(void *p) {
  upload_lane *l = p;
  if (l->stream) fdy_drv.cuStreamDestroy_v2(l->stream); /* its context may be gone: nothing to do then */
  free(l);
}

static void upload_key_make(void) { upload_key_ok = pthread_key_create(&upload_key, upload_lane_free) == 0; }

/* The calling thread's upload stream in the current context; fresh (an old one dropped) when `fresh`. */
static CUresult upload_stream(int fresh, CUstream *out) {
  pthread_once(&upload_once, upload_key_make);
  if (!upload_key_ok) return CUDA_ERROR_OUT_OF_MEMORY;
  upload_lane *l = pthread_getspecific(upload_key);
  if (!l) {
    if (!(l = calloc(1, sizeof(*l)))) return CUDA_ERROR_OUT_OF_MEMORY;
    if (pthread_setspecific(upload_key, l) != 0) {
      free(l);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  CUcontext ctx = NULL;
  CUresult r = fdy_drv.cuCtxGetCurrent(&ctx);
  if (r != CUDA_SUCCESS) return r;
  if (fresh || !l->stream || l->ctx != ctx) {
    if (l->stream) fdy_drv.cuStreamDestroy_v2(l->stream);
    l->stream = NULL;
    if ((r = fdy_drv.cuStreamCreate(&l->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
      l->stream = NULL;
      return r;
    }
    l->ctx = ctx;
  }
  *out = l->stream;
  return CUDA_SUCCESS;
}

/* The exec's first launch otherwise uploads it (its work descriptors written to the device) inside that
 * launch: done here, on the builder's thread, the program's first replay costs what later ones do. The upload
 * runs on the thread's own stream, which waits for nothing the program queued, and is complete when this
 * returns, so the exec may be launched on any stream at once. Relaxed capture mode: a capture the program runs
 * meanwhile on another thread is neither joined nor broken. */
FDY_EXPORT int fdy_graph_upload_wait(uint64_t exec) {
  int rc = fdy_driver_ensure();
  if (rc) return rc;
  if (!fdy_drv.cuGraphUpload || !fdy_drv.cuStreamDestroy_v2)
    return fdy_fail(FDY_ERR_UNSUPPORTED, "the driver has no cuGraphUpload");
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CUresult r = fdy_drv.cuThreadExchangeStreamCaptureMode(&mode);
  if (r != CUDA_SUCCESS) return fdy_fail_cu(r, "cuThreadExchangeStreamCaptureMode", "-");
  const char *call = "cuStreamCreate";
  /* A second try on a fresh stream: the kept one may belong to a context destroyed since (its handle reused). */
  for (int attempt = 0; attempt < 2; attempt++) {
    CUstream stream = NULL;
    call = "cuStreamCreate";
    if ((r = upload_stream(attempt, &stream)) != CUDA_SUCCESS) continue;
    call = "cuGraphUpload";
    r = fdy_drv.cuGraphUpload((CUgraphExec)(uintptr_t)exec, stream);
    CUresult done = fdy_drv.cuStreamSynchronize(stream); /* also after a refused upload: the stream is ours */
    if (r == CUDA_SUCCESS && done != CUDA_SUCCESS) call = "cuStreamSynchronize", r = done;
    if (r == CUDA_SUCCESS) break;
  }
  CUresult back = fdy_drv.cuThreadExchangeStreamCaptureMode(&mode); /* the caller's mode again */
  if (r != CUDA_SUCCESS) return fdy_fail_cu(r, call, "exec %p", (void *)(uintptr_t)exec);
  return back != CUDA_SUCCESS ? fdy_fail_cu(back, "cuThreadExchangeStreamCaptureMode", "-") : 0;
}

FDY_EXPORT int fdy_graph_launch(uint64_t exec, uint64_t stream) {
  CUresult r = fdy_drv.cuGraphLaunch((CUgraphExec)(uintptr_t)exec, (CUstream)(uintptr_t)stream);
  return r ? fdy_fail_cu(r, "cuGraphLaunch", "exec %p on stream %p", (void *)(uintptr_t)exec, (void *)(uintptr_t)stream) : 0;
}

FDY_EXPORT int fdy_graph_destroy(uint64_t graph) {
  CUresult r = fdy_drv.cuGraphDestroy((CUgraph)(uintptr_t)graph);
  return r ? fdy_fail_cu(r, "cuGraphDestroy", "-") : 0;
}

FDY_EXPORT int fdy_graph_exec_destroy(uint64_t exec) {
  CUresult r = fdy_drv.cuGraphExecDestroy((CUgraphExec)(uintptr_t)exec);
  return r ? fdy_fail_cu(r, "cuGraphExecDestroy", "-") : 0;
}
