/* fakecuda: graph and node objects, edges (with edge data), cloning, structure queries. */
#include "fakecuda.h"

/* ------------------------------------------------------------------ objects */
fc_graph *fc_graph_new(void) {
  fc_graph *g = calloc(1, sizeof(*g));
  if (g) fc_handle_add(g, FC_K_GRAPH);
  return g;
}

fc_node *fc_node_new(CUgraphNodeType type) {
  fc_node *n = calloc(1, sizeof(*n));
  if (!n) return NULL;
  n->type = type;
  n->ctx = (CUcontext)fc_current_ctx();
  return n;
}

void fc_node_free(fc_node *n) {
  if (!n) return;
  fc_kparams_clear(&n->k);
  if (n->child && !n->child_borrowed) fc_graph_free(n->child);
  if (n->graph) fc_handle_del(n);
  free(n);
}

void fc_graph_free(fc_graph *g) {
  if (!g) return;
  for (size_t i = 0; i < g->nnodes; i++) fc_node_free(g->nodes[i]);
  free(g->nodes);
  free(g->edges);
  fc_handle_del(g);
  free(g);
}

CUresult fc_node_copy_params(fc_node *dst, const fc_node *src) {
  dst->ctx = src->ctx;
  switch (src->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      fc_kparams_clear(&dst->k);
      return fc_kparams_copy(&dst->k, &src->k);
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      fc_graph *c = fc_graph_clone(src->child, 0);
      if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
      c->is_child = 1;
      if (dst->child && !dst->child_borrowed) fc_graph_free(dst->child);
      dst->child = c;
      dst->child_borrowed = 0;
      return CUDA_SUCCESS;
    }
    default:
      dst->copy = src->copy;
      dst->memset = src->memset;
      dst->host = src->host;
      dst->event = src->event;
      dst->alloc = src->alloc;
      dst->free_ptr = src->free_ptr;
      return CUDA_SUCCESS;
  }
}

int fc_edge_data_ok(const fc_node *from, const fc_node *to, const CUgraphEdgeData *d) {
  if (!d) return 1;
  for (int i = 0; i < 5; i++)
    if (d->reserved[i]) return 0;
  if (d->to_port != 0 || d->from_port > CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER ||
      d->type > CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)
    return 0;
  if ((d->from_port != 0) != (d->type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)) return 0;
  if (d->type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC &&
      (from->type != CU_GRAPH_NODE_TYPE_KERNEL || to->type != CU_GRAPH_NODE_TYPE_KERNEL))
    return 0;
  return 1;
}

static int edge_exists(const fc_graph *g, const fc_node *a, const fc_node *b) {
  for (size_t i = 0; i < g->nedges; i++)
    if (g->edges[i].from == a && g->edges[i].to == b) return 1;
  return 0;
}

CUresult fc_graph_insert(fc_graph *g, fc_node *n, fc_node *const *deps, const CUgraphEdgeData *data, size_t ndeps) {
  if (ndeps && !deps) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < ndeps; i++) {
    if (!fc_is(deps[i], FC_K_NODE) || deps[i]->graph != g) return CUDA_ERROR_INVALID_VALUE;
    for (size_t j = 0; j < i; j++)
      if (deps[j] == deps[i]) return CUDA_ERROR_INVALID_VALUE;
    if (!fc_edge_data_ok(deps[i], n, data ? &data[i] : NULL)) return CUDA_ERROR_INVALID_VALUE;
  }
  if (!fc_grow((void **)&g->nodes, &g->capnodes, g->nnodes + 1, sizeof(*g->nodes)) ||
      !fc_grow((void **)&g->edges, &g->capedges, g->nedges + ndeps, sizeof(*g->edges)))
    return CUDA_ERROR_OUT_OF_MEMORY;
  n->graph = g;
  n->index = g->nnodes;
  g->nodes[g->nnodes++] = n;
  fc_handle_add(n, FC_K_NODE);
  for (size_t i = 0; i < ndeps; i++) {
    fc_edge *e = &g->edges[g->nedges++];
    memset(e, 0, sizeof(*e));
    e->from = deps[i];
    e->to = n;
    if (data) e->data = data[i];
  }
  return CUDA_SUCCESS;
}

fc_graph *fc_graph_clone(const fc_graph *g, int keep_orig) {
  fc_graph *c = fc_graph_new();
  if (!c) return NULL;
  if (!fc_grow((void **)&c->nodes, &c->capnodes, g->nnodes ? g->nnodes : 1, sizeof(*c->nodes)) ||
      !fc_grow((void **)&c->edges, &c->capedges, g->nedges ? g->nedges : 1, sizeof(*c->edges))) {
    fc_graph_free(c);
    return NULL;
  }
  for (size_t i = 0; i < g->nnodes; i++) {
    const fc_node *s = g->nodes[i];
    fc_node *n = fc_node_new(s->type);
    if (!n || fc_node_copy_params(n, s) != CUDA_SUCCESS) {
      fc_node_free(n);
      fc_graph_free(c);
      return NULL;
    }
    n->orig = keep_orig && s->orig ? s->orig : (fc_node *)s;
    n->disabled = s->disabled;
    n->graph = c;
    n->index = i;
    c->nodes[c->nnodes++] = n;
    fc_handle_add(n, FC_K_NODE);
  }
  for (size_t i = 0; i < g->nedges; i++) {
    c->edges[i].from = c->nodes[g->edges[i].from->index];
    c->edges[i].to = c->nodes[g->edges[i].to->index];
    c->edges[i].data = g->edges[i].data;
  }
  c->nedges = g->nedges;
  return c;
}

/* ------------------------------------------------------------------ graph API */

static CUresult graph_create_impl(CUgraph *pg, unsigned flags) {
  if (!pg || flags) return CUDA_ERROR_INVALID_VALUE;
  fc_graph *g = fc_graph_new();
  if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
  *pg = (CUgraph)g;
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphCreate(CUgraph *pg, unsigned int flags) { FC_GUARD(graph_create_impl(pg, flags)); }

static CUresult graph_destroy_impl(CUgraph h) {
  fc_graph *g = fc_graph_get(h);
  if (!g || g->is_child) return CUDA_ERROR_INVALID_VALUE;
  fc_graph_free(g);
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphDestroy(CUgraph h) { FC_GUARD(graph_destroy_impl(h)); }

static CUresult graph_clone_impl(CUgraph *out, CUgraph h) {
  fc_graph *g = fc_graph_get(h);
  if (!g || !out) return CUDA_ERROR_INVALID_VALUE;
  fc_graph *c = fc_graph_clone(g, 0);
  if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
  *out = (CUgraph)c;
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphClone(CUgraph *out, CUgraph h) { FC_GUARD(graph_clone_impl(out, h)); }

static CUresult find_in_clone_impl(CUgraphNode *out, CUgraphNode orig, CUgraph h) {
  fc_graph *g = fc_graph_get(h);
  if (!g || !out || !fc_node_get(orig)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->orig == (fc_node *)orig) {
      *out = (CUgraphNode)g->nodes[i];
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_VALUE;
}

FC_API CUresult cuGraphNodeFindInClone(CUgraphNode *out, CUgraphNode orig, CUgraph h) {
  FC_GUARD(find_in_clone_impl(out, orig, h));
}

/* Adds a prepared node (freed on failure). */
/* ------------------------------------------------------------------ queries */
/* The real driver's array convention: count query with NULL; NULL-fill when the buffer is larger. */
static void fill_out(CUgraphNode *out, size_t *num, fc_node **src, size_t n) {
  if (!out) {
    *num = n;
    return;
  }
  for (size_t i = 0; i < *num; i++) out[i] = i < n ? (CUgraphNode)src[i] : NULL;
  if (*num > n) *num = n;
}

static CUresult get_nodes_impl(CUgraph h, CUgraphNode *out, size_t *num, int roots) {
  fc_graph *g = fc_graph_get(h);
  if (!g || !num) return CUDA_ERROR_INVALID_VALUE;
  if (!roots) {
    fill_out(out, num, g->nodes, g->nnodes);
    return CUDA_SUCCESS;
  }
  fc_node **r = malloc((g->nnodes + 1) * sizeof(*r));
  if (!r) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t k = 0;
  for (size_t i = 0; i < g->nnodes; i++) {
    int has_in = 0;
    for (size_t j = 0; j < g->nedges && !has_in; j++) has_in = g->edges[j].to == g->nodes[i];
    if (!has_in) r[k++] = g->nodes[i];
  }
  fill_out(out, num, r, k);
  free(r);
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *num) { FC_GUARD(get_nodes_impl(g, nodes, num, 0)); }
FC_API CUresult cuGraphGetRootNodes(CUgraph g, CUgraphNode *nodes, size_t *num) { FC_GUARD(get_nodes_impl(g, nodes, num, 1)); }

static int data_nonzero(const CUgraphEdgeData *d) {
  static const CUgraphEdgeData zero;
  return memcmp(d, &zero, sizeof(zero)) != 0;
}

static CUresult get_edges_impl(CUgraph h, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *data, size_t *num) {
  fc_graph *g = fc_graph_get(h);
  if (!g || !num || (!from != !to) || (data && !from)) return CUDA_ERROR_INVALID_VALUE;
  if (!from) {
    *num = g->nedges;
    return CUDA_SUCCESS;
  }
  int lossy = 0;
  for (size_t i = 0; i < *num; i++) {
    if (i < g->nedges) {
      from[i] = (CUgraphNode)g->edges[i].from;
      to[i] = (CUgraphNode)g->edges[i].to;
      if (data) data[i] = g->edges[i].data;
      else if (data_nonzero(&g->edges[i].data)) lossy = 1;
    } else {
      from[i] = to[i] = NULL;
      if (data) memset(&data[i], 0, sizeof(data[i]));
    }
  }
  if (*num > g->nedges) *num = g->nedges;
  return lossy ? CUDA_ERROR_LOSSY_QUERY : CUDA_SUCCESS;
}

FC_API CUresult cuGraphGetEdges_v2(CUgraph g, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *d, size_t *n) {
  FC_GUARD(get_edges_impl(g, from, to, d, n));
}
FC_API CUresult cuGraphGetEdges(CUgraph g, CUgraphNode *from, CUgraphNode *to, size_t *n) {
  FC_GUARD(get_edges_impl(g, from, to, NULL, n));
}

/* Dependencies (incoming=1) or dependents (incoming=0) of a node. */
static CUresult node_neighbours_impl(CUgraphNode h, CUgraphNode *out, CUgraphEdgeData *data, size_t *num, int incoming) {
  fc_node *n = fc_node_get(h);
  if (!n || !num || (data && !out)) return CUDA_ERROR_INVALID_VALUE;
  fc_graph *g = n->graph;
  size_t k = 0;
  int lossy = 0;
  for (size_t i = 0; i < g->nedges; i++) {
    fc_edge *e = &g->edges[i];
    if ((incoming ? e->to : e->from) != n) continue;
    if (out && k < *num) {
      out[k] = (CUgraphNode)(incoming ? e->from : e->to);
      if (data) data[k] = e->data;
      else if (data_nonzero(&e->data)) lossy = 1;
    }
    k++;
  }
  if (!out) {
    *num = k;
    return CUDA_SUCCESS;
  }
  for (size_t i = k; i < *num; i++) {
    out[i] = NULL;
    if (data) memset(&data[i], 0, sizeof(data[i]));
  }
  if (*num > k) *num = k;
  return lossy ? CUDA_ERROR_LOSSY_QUERY : CUDA_SUCCESS;
}

FC_API CUresult cuGraphNodeGetDependencies_v2(CUgraphNode h, CUgraphNode *d, CUgraphEdgeData *e, size_t *n) {
  FC_GUARD(node_neighbours_impl(h, d, e, n, 1));
}
FC_API CUresult cuGraphNodeGetDependencies(CUgraphNode h, CUgraphNode *d, size_t *n) {
  FC_GUARD(node_neighbours_impl(h, d, NULL, n, 1));
}
FC_API CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode h, CUgraphNode *d, CUgraphEdgeData *e, size_t *n) {
  FC_GUARD(node_neighbours_impl(h, d, e, n, 0));
}
FC_API CUresult cuGraphNodeGetDependentNodes(CUgraphNode h, CUgraphNode *d, size_t *n) {
  FC_GUARD(node_neighbours_impl(h, d, NULL, n, 0));
}

static CUresult add_deps_impl(CUgraph h, const CUgraphNode *from, const CUgraphNode *to, const CUgraphEdgeData *data,
                              size_t n) {
  fc_graph *g = fc_graph_get(h);
  if (!g || (n && (!from || !to))) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; i++) {
    fc_node *a = fc_node_get(from[i]), *b = fc_node_get(to[i]);
    const CUgraphEdgeData *d = data ? &data[fc_g.edge_data_bug ? 0 : i] : NULL;
    if (!a || !b || a->graph != g || b->graph != g || a == b || edge_exists(g, a, b) || !fc_edge_data_ok(a, b, d))
      return CUDA_ERROR_INVALID_VALUE;
    for (size_t j = 0; j < i; j++)
      if (from[j] == from[i] && to[j] == to[i]) return CUDA_ERROR_INVALID_VALUE;
  }
  if (!fc_grow((void **)&g->edges, &g->capedges, g->nedges + n, sizeof(*g->edges))) return CUDA_ERROR_OUT_OF_MEMORY;
  for (size_t i = 0; i < n; i++) {
    fc_edge *e = &g->edges[g->nedges++];
    memset(e, 0, sizeof(*e));
    e->from = (fc_node *)from[i];
    e->to = (fc_node *)to[i];
    /* FAKECUDA_EDGE_DATA_BUG=1 reproduces a real driver bug: a bulk call gives every edge the
     * first edge's data. */
    if (data) e->data = data[fc_g.edge_data_bug ? 0 : i];
  }
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphAddDependencies_v2(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                                          const CUgraphEdgeData *d, size_t n) {
  FC_GUARD(add_deps_impl(g, from, to, d, n));
}
FC_API CUresult cuGraphAddDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, size_t n) {
  FC_GUARD(add_deps_impl(g, from, to, NULL, n));
}

static CUresult remove_deps_impl(CUgraph h, const CUgraphNode *from, const CUgraphNode *to,
                                 const CUgraphEdgeData *data, size_t n) {
  fc_graph *g = fc_graph_get(h);
  if (!g || (n && (!from || !to))) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; i++) {
    size_t j;
    for (j = 0; j < g->nedges; j++) {
      fc_edge *e = &g->edges[j];
      if (e->from == (fc_node *)from[i] && e->to == (fc_node *)to[i] &&
          (!data || memcmp(&e->data, &data[i], sizeof(data[i])) == 0))
        break;
    }
    if (j == g->nedges) return CUDA_ERROR_INVALID_VALUE;
    memmove(&g->edges[j], &g->edges[j + 1], (g->nedges - j - 1) * sizeof(*g->edges));
    g->nedges--;
  }
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphRemoveDependencies_v2(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                                             const CUgraphEdgeData *d, size_t n) {
  FC_GUARD(remove_deps_impl(g, from, to, d, n));
}
FC_API CUresult cuGraphRemoveDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, size_t n) {
  FC_GUARD(remove_deps_impl(g, from, to, NULL, n));
}

static CUresult destroy_node_impl(CUgraphNode h) {
  fc_node *n = fc_node_get(h);
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  fc_graph *g = n->graph;
  size_t k = 0;
  for (size_t i = 0; i < g->nedges; i++)
    if (g->edges[i].from != n && g->edges[i].to != n) g->edges[k++] = g->edges[i];
  g->nedges = k;
  memmove(&g->nodes[n->index], &g->nodes[n->index + 1], (g->nnodes - n->index - 1) * sizeof(*g->nodes));
  g->nnodes--;
  for (size_t i = n->index; i < g->nnodes; i++) g->nodes[i]->index = i;
  fc_node_free(n);
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphDestroyNode(CUgraphNode h) { FC_GUARD(destroy_node_impl(h)); }

static CUresult node_type_impl(CUgraphNode h, CUgraphNodeType *t) {
  fc_node *n = fc_node_get(h);
  if (!n || !t) return CUDA_ERROR_INVALID_VALUE;
  *t = n->type;
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphNodeGetType(CUgraphNode h, CUgraphNodeType *t) { FC_GUARD(node_type_impl(h, t)); }
