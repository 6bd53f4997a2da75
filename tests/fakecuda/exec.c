/* fakecuda: instantiation, validation, execution, graph launch, executable-graph updates.
 *
 * An exec holds a snapshot (deep clone) of its graph, so later edits of the graph do not affect it.
 * Snapshot nodes remember the graph node they came from (orig), which is how
 * cuGraphExecKernelNodeSetParams finds them. Launch runs the nodes synchronously in a topological
 * order (ties broken by creation order). */
#include "fakecuda.h"

/* Kahn's algorithm; order gets g->nnodes node pointers. -1 on a cycle. */
static int topo_order(const fc_graph *g, fc_node **order) {
  size_t n = g->nnodes, head = 0, tail = 0;
  size_t *indeg = calloc(n + 1, sizeof(size_t));
  if (!indeg) return -2;
  for (size_t i = 0; i < g->nedges; i++) indeg[g->edges[i].to->index]++;
  for (size_t i = 0; i < n; i++)
    if (!indeg[i]) order[tail++] = g->nodes[i];
  while (head < tail) {
    fc_node *x = order[head++];
    for (size_t i = 0; i < g->nedges; i++)
      if (g->edges[i].from == x && --indeg[g->edges[i].to->index] == 0) order[tail++] = g->edges[i].to;
  }
  free(indeg);
  return tail == n ? 0 : -1;
}

CUresult fc_node_run(fc_node *n) {
  if (n->disabled) return CUDA_SUCCESS; /* a disabled kernel, memcpy or memset node does nothing */
  switch (n->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return fc_kparams_run(&n->k);
    case CU_GRAPH_NODE_TYPE_MEMCPY: return fc_copy3d(&n->copy);
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return fc_memset2d(n->memset.dst, n->memset.pitch, n->memset.value, n->memset.elementSize, n->memset.width,
                         n->memset.height);
    case CU_GRAPH_NODE_TYPE_HOST: n->host.fn(n->host.userData); return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_GRAPH: return fc_graph_run(n->child);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      if (fc_is(n->event, FC_K_EVENT)) fc_event_complete((fc_event *)n->event);
      return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_EMPTY:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return CUDA_SUCCESS;
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
}

CUresult fc_graph_run(fc_graph *g) {
  fc_node **order = malloc((g->nnodes + 1) * sizeof(*order));
  if (!order) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = topo_order(g, order) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; r == CUDA_SUCCESS && i < g->nnodes; i++) r = fc_node_run(order[i]);
  free(order);
  return r;
}

/* What instantiation checks: acyclic, kernel launch rules (loaded function, cluster shape, shared
 * memory), recursively into child graphs. *bad gets the offending node. */
static CUresult validate(fc_graph *g, fc_node **bad) {
  fc_node **order = malloc((g->nnodes + 1) * sizeof(*order));
  if (!order) return CUDA_ERROR_OUT_OF_MEMORY;
  int t = topo_order(g, order);
  free(order);
  if (t) return t == -1 ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
  for (size_t i = 0; i < g->nnodes; i++) {
    fc_node *n = g->nodes[i];
    CUresult r = CUDA_SUCCESS;
    if (n->type == CU_GRAPH_NODE_TYPE_KERNEL) r = fc_kparams_validate(&n->k);
    else if (n->type == CU_GRAPH_NODE_TYPE_GRAPH) r = validate(n->child, bad);
    else if ((n->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD || n->type == CU_GRAPH_NODE_TYPE_WAIT_EVENT) &&
             !fc_is(n->event, FC_K_EVENT))
      r = CUDA_ERROR_INVALID_VALUE;
    if (r) {
      if (bad && n->type != CU_GRAPH_NODE_TYPE_GRAPH) *bad = n;
      return r;
    }
  }
  return CUDA_SUCCESS;
}

CUresult fc_graph_validate(fc_graph *g) { return validate(g, NULL); }

static fc_exec *exec_get(CUgraphExec h) { return fc_is(h, FC_K_EXEC) ? (fc_exec *)h : NULL; }

#define INSTANTIATE_FLAGS                                                                                 \
  (CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |                 \
   CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY)

static CUresult instantiate_impl(CUgraphExec *out, CUgraph h, unsigned long long flags, fc_node **bad) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  if (!out || !fc_is(h, FC_K_GRAPH) || (flags & ~(unsigned long long)INSTANTIATE_FLAGS)) return CUDA_ERROR_INVALID_VALUE;
  fc_graph *g = (fc_graph *)h;
  if ((r = validate(g, bad))) return r;
  fc_exec *e = calloc(1, sizeof(*e));
  if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
  e->g = fc_graph_clone(g, 0);
  if (!e->g) {
    free(e);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  e->g->is_child = 1;
  e->flags = flags;
  fc_handle_add(e, FC_K_EXEC);
  *out = (CUgraphExec)e;
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph g, unsigned long long flags) {
  FC_GUARD(instantiate_impl(out, g, flags, NULL));
}

static CUresult instantiate_params_impl(CUgraphExec *out, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  fc_node *bad = NULL;
  CUresult r = instantiate_impl(out, g, p->flags, &bad);
  p->hErrNode_out = (CUgraphNode)bad;
  p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS
                  : r == CUDA_ERROR_INVALID_VALUE && !bad ? CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE
                                                          : CUDA_GRAPH_INSTANTIATE_ERROR;
  return r;
}

FC_API CUresult cuGraphInstantiateWithParams(CUgraphExec *out, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p) {
  FC_GUARD(instantiate_params_impl(out, g, p));
}
FC_API CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *out, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p) {
  FC_GUARD(instantiate_params_impl(out, g, p));
}

static CUresult instantiate_legacy(CUgraphExec *out, CUgraph g, CUgraphNode *err, char *log, size_t logsize) {
  fc_node *bad = NULL;
  CUresult r = instantiate_impl(out, g, 0, &bad);
  if (err) *err = (CUgraphNode)bad;
  if (log && logsize) log[0] = 0;
  return r;
}

FC_API CUresult cuGraphInstantiate(CUgraphExec *out, CUgraph g, CUgraphNode *err, char *log, size_t n) {
  FC_GUARD(instantiate_legacy(out, g, err, log, n));
}
FC_API CUresult cuGraphInstantiate_v2(CUgraphExec *out, CUgraph g, CUgraphNode *err, char *log, size_t n) {
  FC_GUARD(instantiate_legacy(out, g, err, log, n));
}

static CUresult exec_destroy_impl(CUgraphExec h) {
  fc_exec *e = exec_get(h);
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  fc_graph_free(e->g);
  fc_handle_del(e);
  free(e);
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphExecDestroy(CUgraphExec h) { FC_GUARD(exec_destroy_impl(h)); }

/* ------------------------------------------------------------------ launch */
CUresult fc_graph_launch(CUgraphExec h, CUstream sh, int ptds) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  fc_exec *e = exec_get(h);
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  fc_stream *s;
  if ((r = fc_stream_resolve(sh, ptds, &s))) return r;
  e->launches++;
  fc_node *w = fc_node_new(CU_GRAPH_NODE_TYPE_GRAPH);
  if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
  if (s->cap) { /* captured graph launch: a child-graph node holding a copy of the exec's graph */
    w->child = fc_graph_clone(e->g, 0);
    if (!w->child) {
      fc_node_free(w);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    w->child->is_child = 1;
  } else {
    w->child = e->g;
    w->child_borrowed = 1;
  }
  return fc_submit(sh, ptds, w);
}

FC_API CUresult cuGraphLaunch(CUgraphExec e, CUstream s) { FC_GUARD(fc_graph_launch(e, s, 0)); }
FC_API CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s) { FC_GUARD(fc_graph_launch(e, s, 1)); }

CUresult fc_graph_upload(CUgraphExec h, CUstream sh, int ptds) {
  fc_stream *s;
  fc_exec *e = exec_get(h);
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = fc_stream_resolve(sh, ptds, &s);
  if (r == CUDA_SUCCESS) e->uploads++;
  return r;
}

/* Not a driver entry point: for tests, how often an exec was uploaded and launched. */
static CUresult exec_counts_impl(CUgraphExec h, unsigned *uploads, unsigned *launches) {
  fc_exec *e = exec_get(h);
  if (!e || !uploads || !launches) return CUDA_ERROR_INVALID_VALUE;
  *uploads = e->uploads;
  *launches = e->launches;
  return CUDA_SUCCESS;
}

FC_API CUresult fakecuda_exec_counts(CUgraphExec h, unsigned *uploads, unsigned *launches) {
  FC_GUARD(exec_counts_impl(h, uploads, launches));
}

FC_API CUresult cuGraphUpload(CUgraphExec e, CUstream s) { FC_GUARD(fc_graph_upload(e, s, 0)); }
FC_API CUresult cuGraphUpload_ptsz(CUgraphExec e, CUstream s) { FC_GUARD(fc_graph_upload(e, s, 1)); }

/* ------------------------------------------------------------------ exec updates */
static fc_node *exec_node_for(fc_exec *e, const fc_node *orig) {
  for (size_t i = 0; i < e->g->nnodes; i++)
    if (e->g->nodes[i]->orig == orig) return e->g->nodes[i];
  return NULL;
}

static CUresult exec_kernel_set_impl(CUgraphExec h, CUgraphNode nh, const CUDA_KERNEL_NODE_PARAMS *p) {
  fc_exec *e = exec_get(h);
  if (!e || !p || !fc_is(nh, FC_K_NODE)) return CUDA_ERROR_INVALID_VALUE;
  fc_node *en = exec_node_for(e, (fc_node *)nh);
  if (!en || en->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  fc_func *f = p->func ? fc_func_resolve(p->func) : p->kern ? fc_func_resolve(p->kern) : NULL;
  if (!f) return CUDA_ERROR_INVALID_VALUE;
  fc_kparams k;
  memset(&k, 0, sizeof(k));
  CUresult r = CUDA_SUCCESS;
  for (size_t i = 0; r == CUDA_SUCCESS && i < en->k.nattrs; i++) r = fc_kparams_set_attr(&k, &en->k.attrs[i]);
  const unsigned g[3] = {p->gridDimX, p->gridDimY, p->gridDimZ}, b[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  if (r == CUDA_SUCCESS) r = fc_kparams_set(&k, f, g, b, p->sharedMemBytes, p->kernelParams, p->extra);
  if (r == CUDA_SUCCESS) r = fc_kparams_validate(&k);
  if (r == CUDA_SUCCESS) r = fc_check_smem(k.func, k.smem);
  if (r) {
    fc_kparams_clear(&k);
    return r;
  }
  fc_kparams_clear(&en->k);
  r = fc_kparams_copy(&en->k, &k);
  fc_kparams_clear(&k);
  return r;
}

FC_API CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec e, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS *p) {
  FC_GUARD(exec_kernel_set_impl(e, n, p));
}

FC_API CUresult cuGraphExecKernelNodeSetParams(CUgraphExec e, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS_v1 *p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS v2;
  memset(&v2, 0, sizeof(v2));
  memcpy(&v2, p, sizeof(*p));
  FC_GUARD(exec_kernel_set_impl(e, n, &v2));
}

/* Like the driver: only kernel, memcpy and memset nodes can be disabled; the node is the graph's (the
 * one the exec was instantiated from), not the exec's copy. */
static CUresult node_set_enabled_impl(CUgraphExec h, CUgraphNode nh, unsigned on) {
  fc_exec *e = exec_get(h);
  if (!e || !fc_is(nh, FC_K_NODE)) return CUDA_ERROR_INVALID_VALUE;
  fc_node *en = exec_node_for(e, (fc_node *)nh);
  if (!en || (en->type != CU_GRAPH_NODE_TYPE_KERNEL && en->type != CU_GRAPH_NODE_TYPE_MEMCPY &&
              en->type != CU_GRAPH_NODE_TYPE_MEMSET))
    return CUDA_ERROR_INVALID_VALUE;
  en->disabled = !on;
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphNodeSetEnabled(CUgraphExec e, CUgraphNode n, unsigned int on) {
  FC_GUARD(node_set_enabled_impl(e, n, on));
}

/* Like the driver: the exec's node and the new parameters must both be 1-D (height 1), and the
 * operation must not be empty; element size and width may change. */
static CUresult exec_memset_set_impl(CUgraphExec h, CUgraphNode nh, const CUDA_MEMSET_NODE_PARAMS *p) {
  fc_exec *e = exec_get(h);
  if (!e || !p || !fc_is(nh, FC_K_NODE)) return CUDA_ERROR_INVALID_VALUE;
  fc_node *en = exec_node_for(e, (fc_node *)nh);
  if (!en || en->type != CU_GRAPH_NODE_TYPE_MEMSET || en->memset.height != 1 || p->height != 1 || !p->width ||
      (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4))
    return CUDA_ERROR_INVALID_VALUE;
  en->memset = *p;
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec e, CUgraphNode n, const CUDA_MEMSET_NODE_PARAMS *p,
                                               CUcontext ctx) {
  (void)ctx;
  FC_GUARD(exec_memset_set_impl(e, n, p));
}

static CUresult exec_memcpy_set_impl(CUgraphExec h, CUgraphNode nh, const CUDA_MEMCPY3D *p) {
  fc_exec *e = exec_get(h);
  if (!e || !p || !fc_is(nh, FC_K_NODE)) return CUDA_ERROR_INVALID_VALUE;
  fc_node *en = exec_node_for(e, (fc_node *)nh);
  if (!en || en->type != CU_GRAPH_NODE_TYPE_MEMCPY || en->copy.Height > 1 || en->copy.Depth > 1 || p->Height > 1 ||
      p->Depth > 1 || !p->WidthInBytes)
    return CUDA_ERROR_INVALID_VALUE;
  en->copy = *p;
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec e, CUgraphNode n, const CUDA_MEMCPY3D *p, CUcontext ctx) {
  (void)ctx;
  FC_GUARD(exec_memcpy_set_impl(e, n, p));
}

static int edge_cmp(const void *a, const void *b) {
  const size_t *x = a, *y = b;
  for (int i = 0; i < 3; i++)
    if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
  return 0;
}

/* Edges as sorted (from index, to index, packed edge data) triples. */
static size_t *edge_keys(const fc_graph *g) {
  size_t *k = malloc((g->nedges * 3 + 1) * sizeof(size_t));
  if (!k) return NULL;
  for (size_t i = 0; i < g->nedges; i++) {
    k[3 * i] = g->edges[i].from->index;
    k[3 * i + 1] = g->edges[i].to->index;
    size_t d = 0;
    memcpy(&d, &g->edges[i].data, sizeof(g->edges[i].data) < sizeof(d) ? sizeof(g->edges[i].data) : sizeof(d));
    k[3 * i + 2] = d;
  }
  qsort(k, g->nedges, 3 * sizeof(size_t), edge_cmp);
  return k;
}

/* Same node count, node types (pairwise in creation order) and edges, recursively. */
static CUgraphExecUpdateResult compare(const fc_graph *a, const fc_graph *b, fc_node **err) {
  if (a->nnodes != b->nnodes || a->nedges != b->nedges) return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
  for (size_t i = 0; i < a->nnodes; i++) {
    if (a->nodes[i]->type != b->nodes[i]->type) {
      *err = b->nodes[i];
      return CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
    }
    if (a->nodes[i]->type == CU_GRAPH_NODE_TYPE_GRAPH &&
        compare(a->nodes[i]->child, b->nodes[i]->child, err) != CU_GRAPH_EXEC_UPDATE_SUCCESS) {
      *err = b->nodes[i];
      return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    }
  }
  size_t *ka = edge_keys(a), *kb = edge_keys(b);
  int same = ka && kb && memcmp(ka, kb, a->nedges * 3 * sizeof(size_t)) == 0;
  free(ka);
  free(kb);
  return same ? CU_GRAPH_EXEC_UPDATE_SUCCESS : CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
}

static CUresult exec_update_impl(CUgraphExec h, CUgraph gh, CUgraphExecUpdateResultInfo *info) {
  fc_exec *e = exec_get(h);
  if (!e || !fc_is(gh, FC_K_GRAPH) || !info) return CUDA_ERROR_INVALID_VALUE;
  fc_graph *g = (fc_graph *)gh;
  memset(info, 0, sizeof(*info));
  fc_node *err = NULL;
  CUgraphExecUpdateResult res = compare(e->g, g, &err);
  if (res == CU_GRAPH_EXEC_UPDATE_SUCCESS) {
    fc_node *bad = NULL;
    if (validate(g, &bad) != CUDA_SUCCESS) {
      res = CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
      err = bad;
    }
  }
  if (res != CU_GRAPH_EXEC_UPDATE_SUCCESS) {
    info->result = res;
    info->errorNode = (CUgraphNode)err;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  for (size_t i = 0; i < g->nnodes; i++) {
    CUresult r = fc_node_copy_params(e->g->nodes[i], g->nodes[i]);
    if (r) return r;
  }
  info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphExecUpdate_v2(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo *info) {
  FC_GUARD(exec_update_impl(e, g, info));
}

FC_API CUresult cuGraphExecUpdate(CUgraphExec e, CUgraph g, CUgraphNode *errNode, CUgraphExecUpdateResult *result) {
  CUgraphExecUpdateResultInfo info;
  fc_lock();
  CUresult r = fc_g.initialized ? exec_update_impl(e, g, &info) : CUDA_ERROR_NOT_INITIALIZED;
  fc_unlock();
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) {
    if (errNode) *errNode = info.errorNode;
    if (result) *result = info.result;
  }
  return r;
}
