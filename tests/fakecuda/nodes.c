/* fakecuda: adding nodes to graphs and per-type node parameters (kernel params, attributes, ...). */
#include "fakecuda.h"

static CUresult add_node(CUgraphNode *ph, CUgraph h, const CUgraphNode *deps, size_t n, fc_node *node) {
  fc_graph *g = fc_graph_get(h);
  CUresult r = (!ph || !g) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  if (r == CUDA_SUCCESS) r = fc_graph_insert(g, node, (fc_node *const *)deps, NULL, n);
  if (r) {
    fc_node_free(node);
    return r;
  }
  *ph = (CUgraphNode)node;
  return CUDA_SUCCESS;
}

static CUresult kernel_node_fill(fc_node *node, const CUDA_KERNEL_NODE_PARAMS *p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  fc_func *f = p->func ? fc_func_resolve(p->func) : p->kern ? fc_func_resolve(p->kern) : NULL;
  if (!f) return CUDA_ERROR_INVALID_VALUE;
  if (!f->loaded) return CUDA_ERROR_INVALID_HANDLE;
  const unsigned g[3] = {p->gridDimX, p->gridDimY, p->gridDimZ}, b[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  CUresult r = fc_check_smem(f, p->sharedMemBytes); /* before the node changes: a refused SetParams leaves it */
  return r ? r : fc_kparams_set(&node->k, f, g, b, p->sharedMemBytes, p->kernelParams, p->extra);
}

static void params_v1_to_v2(CUDA_KERNEL_NODE_PARAMS *d, const CUDA_KERNEL_NODE_PARAMS_v1 *s) {
  memset(d, 0, sizeof(*d));
  d->func = s->func;
  d->gridDimX = s->gridDimX;
  d->gridDimY = s->gridDimY;
  d->gridDimZ = s->gridDimZ;
  d->blockDimX = s->blockDimX;
  d->blockDimY = s->blockDimY;
  d->blockDimZ = s->blockDimZ;
  d->sharedMemBytes = s->sharedMemBytes;
  d->kernelParams = s->kernelParams;
  d->extra = s->extra;
}

static CUresult add_kernel_impl(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n,
                                const CUDA_KERNEL_NODE_PARAMS *p) {
  fc_node *node = fc_node_new(CU_GRAPH_NODE_TYPE_KERNEL);
  if (!node) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = kernel_node_fill(node, p);
  if (r) {
    fc_node_free(node);
    return r;
  }
  return add_node(ph, g, deps, n, node);
}

FC_API CUresult cuGraphAddKernelNode_v2(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n,
                                        const CUDA_KERNEL_NODE_PARAMS *p) {
  FC_GUARD(add_kernel_impl(ph, g, deps, n, p));
}

FC_API CUresult cuGraphAddKernelNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n,
                                     const CUDA_KERNEL_NODE_PARAMS_v1 *p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS v2;
  params_v1_to_v2(&v2, p);
  FC_GUARD(add_kernel_impl(ph, g, deps, n, &v2));
}

static CUresult add_simple(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeType t,
                           const void *params, CUcontext ctx) {
  fc_node *node = fc_node_new(t);
  if (!node) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = CUDA_SUCCESS;
  if (ctx) node->ctx = ctx;
  switch (t) {
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS *m = params;
      if (!m || (m->elementSize != 1 && m->elementSize != 2 && m->elementSize != 4) || m->height == 0 || m->width == 0)
        r = CUDA_ERROR_INVALID_VALUE;
      else node->memset = *m;
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (!params) r = CUDA_ERROR_INVALID_VALUE;
      else node->copy = *(const CUDA_MEMCPY3D *)params;
      break;
    case CU_GRAPH_NODE_TYPE_HOST: {
      const CUDA_HOST_NODE_PARAMS *h = params;
      if (!h || !h->fn) r = CUDA_ERROR_INVALID_VALUE;
      else node->host = *h;
      break;
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      if (!fc_is(params, FC_K_EVENT)) r = CUDA_ERROR_INVALID_HANDLE;
      else node->event = (CUevent)params;
      break;
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      fc_graph *c = fc_graph_get((CUgraph)params);
      if (!c || c == fc_graph_get(g)) {
        r = CUDA_ERROR_INVALID_VALUE;
      } else if (!(node->child = fc_graph_clone(c, 0))) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
      } else {
        node->child->is_child = 1;
      }
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE: node->free_ptr = (CUdeviceptr)(uintptr_t)params; break;
    default: break;
  }
  if (r) {
    fc_node_free(node);
    return r;
  }
  return add_node(ph, g, deps, n, node);
}

FC_API CUresult cuGraphAddMemsetNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *d, size_t n,
                                     const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx) {
  FC_GUARD(add_simple(ph, g, d, n, CU_GRAPH_NODE_TYPE_MEMSET, p, ctx));
}
FC_API CUresult cuGraphAddMemcpyNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *d, size_t n,
                                     const CUDA_MEMCPY3D *p, CUcontext ctx) {
  FC_GUARD(add_simple(ph, g, d, n, CU_GRAPH_NODE_TYPE_MEMCPY, p, ctx));
}
FC_API CUresult cuGraphAddEmptyNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *d, size_t n) {
  FC_GUARD(add_simple(ph, g, d, n, CU_GRAPH_NODE_TYPE_EMPTY, NULL, NULL));
}
FC_API CUresult cuGraphAddHostNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *d, size_t n,
                                   const CUDA_HOST_NODE_PARAMS *p) {
  FC_GUARD(add_simple(ph, g, d, n, CU_GRAPH_NODE_TYPE_HOST, p, NULL));
}
FC_API CUresult cuGraphAddEventRecordNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *d, size_t n, CUevent e) {
  FC_GUARD(add_simple(ph, g, d, n, CU_GRAPH_NODE_TYPE_EVENT_RECORD, e, NULL));
}
FC_API CUresult cuGraphAddEventWaitNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *d, size_t n, CUevent e) {
  FC_GUARD(add_simple(ph, g, d, n, CU_GRAPH_NODE_TYPE_WAIT_EVENT, e, NULL));
}
FC_API CUresult cuGraphAddChildGraphNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *d, size_t n, CUgraph child) {
  FC_GUARD(add_simple(ph, g, d, n, CU_GRAPH_NODE_TYPE_GRAPH, child, NULL));
}
FC_API CUresult cuGraphAddMemFreeNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *d, size_t n, CUdeviceptr p) {
  FC_GUARD(add_simple(ph, g, d, n, CU_GRAPH_NODE_TYPE_MEM_FREE, (const void *)(uintptr_t)p, NULL));
}

static CUresult add_alloc_impl(CUgraphNode *ph, CUgraph g, const CUgraphNode *d, size_t n,
                               CUDA_MEM_ALLOC_NODE_PARAMS *p) {
  if (!p || p->bytesize == 0 || !fc_graph_get(g) || !ph) return CUDA_ERROR_INVALID_VALUE;
  fc_node *node = fc_node_new(CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  if (!node) return CUDA_ERROR_OUT_OF_MEMORY;
  CUdeviceptr ptr;
  CUresult r = fc_alloc(&ptr, p->bytesize, FC_MEM_GRAPH, 0);
  if (r) {
    fc_node_free(node);
    return r;
  }
  node->alloc = *p;
  node->alloc.accessDescs = NULL;
  node->alloc.accessDescCount = 0;
  node->alloc.dptr = ptr;
  if ((r = add_node(ph, g, d, n, node))) return r;
  p->dptr = ptr;
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphAddMemAllocNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *d, size_t n,
                                       CUDA_MEM_ALLOC_NODE_PARAMS *p) {
  FC_GUARD(add_alloc_impl(ph, g, d, n, p));
}

/* ------------------------------------------------------------------ per-type parameters */
static fc_node *typed(CUgraphNode h, CUgraphNodeType t) {
  fc_node *n = fc_node_get(h);
  return n && n->type == t ? n : NULL;
}

static CUresult kernel_get_impl(CUgraphNode h, CUDA_KERNEL_NODE_PARAMS *p) {
  fc_node *n = typed(h, CU_GRAPH_NODE_TYPE_KERNEL);
  if (!n || !p) return CUDA_ERROR_INVALID_VALUE;
  memset(p, 0, sizeof(*p));
  p->func = (CUfunction)n->k.func;
  p->gridDimX = n->k.grid[0];
  p->gridDimY = n->k.grid[1];
  p->gridDimZ = n->k.grid[2];
  p->blockDimX = n->k.block[0];
  p->blockDimY = n->k.block[1];
  p->blockDimZ = n->k.block[2];
  p->sharedMemBytes = n->k.smem;
  p->kernelParams = n->k.mode == 0 ? n->k.paramptrs : NULL;
  p->extra = n->k.mode == 1 ? n->k.extra : NULL;
  p->kern = NULL;
  p->ctx = n->ctx;
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode h, CUDA_KERNEL_NODE_PARAMS *p) { FC_GUARD(kernel_get_impl(h, p)); }

FC_API CUresult cuGraphKernelNodeGetParams(CUgraphNode h, CUDA_KERNEL_NODE_PARAMS_v1 *p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS v2;
  fc_lock();
  CUresult r = fc_g.initialized ? kernel_get_impl(h, &v2) : CUDA_ERROR_NOT_INITIALIZED;
  fc_unlock();
  if (r == CUDA_SUCCESS) memcpy(p, &v2, sizeof(*p)); /* v1 is a prefix of v2 */
  return r;
}

static CUresult kernel_set_impl(CUgraphNode h, const CUDA_KERNEL_NODE_PARAMS *p) {
  fc_node *n = typed(h, CU_GRAPH_NODE_TYPE_KERNEL);
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  return kernel_node_fill(n, p);
}

FC_API CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode h, const CUDA_KERNEL_NODE_PARAMS *p) {
  FC_GUARD(kernel_set_impl(h, p));
}

FC_API CUresult cuGraphKernelNodeSetParams(CUgraphNode h, const CUDA_KERNEL_NODE_PARAMS_v1 *p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS v2;
  params_v1_to_v2(&v2, p);
  FC_GUARD(kernel_set_impl(h, &v2));
}

static CUresult kattr_impl(CUgraphNode h, CUkernelNodeAttrID id, CUkernelNodeAttrValue *v, int set) {
  fc_node *n = typed(h, CU_GRAPH_NODE_TYPE_KERNEL);
  if (!n || !v) return CUDA_ERROR_INVALID_VALUE;
  if (set) {
    CUlaunchAttribute a;
    memset(&a, 0, sizeof(a));
    a.id = id;
    a.value = *v;
    return fc_kparams_set_attr(&n->k, &a);
  }
  if (id <= CU_LAUNCH_ATTRIBUTE_IGNORE || id >= CU_LAUNCH_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  const CUlaunchAttribute *a = fc_kparams_get_attr(&n->k, id);
  if (a) *v = a->value;
  else memset(v, 0, sizeof(*v));
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphKernelNodeGetAttribute(CUgraphNode h, CUkernelNodeAttrID id, CUkernelNodeAttrValue *v) {
  FC_GUARD(kattr_impl(h, id, v, 0));
}
FC_API CUresult cuGraphKernelNodeSetAttribute(CUgraphNode h, CUkernelNodeAttrID id, const CUkernelNodeAttrValue *v) {
  FC_GUARD(kattr_impl(h, id, (CUkernelNodeAttrValue *)v, 1));
}

static CUresult kcopy_attrs_impl(CUgraphNode dst, CUgraphNode src) {
  fc_node *d = typed(dst, CU_GRAPH_NODE_TYPE_KERNEL), *s = typed(src, CU_GRAPH_NODE_TYPE_KERNEL);
  if (!d || !s) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < s->k.nattrs; i++) {
    CUresult r = fc_kparams_set_attr(&d->k, &s->k.attrs[i]);
    if (r) return r;
  }
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src) { FC_GUARD(kcopy_attrs_impl(dst, src)); }

#define GETTER(fname, T, ntype, field)                       \
  static CUresult fname##_impl(CUgraphNode h, T *out) {      \
    fc_node *n = typed(h, ntype);                            \
    if (!n || !out) return CUDA_ERROR_INVALID_VALUE;         \
    *out = field;                                            \
    return CUDA_SUCCESS;                                     \
  }                                                          \
  FC_API CUresult fname(CUgraphNode h, T *out) { FC_GUARD(fname##_impl(h, out)); }

GETTER(cuGraphMemsetNodeGetParams, CUDA_MEMSET_NODE_PARAMS, CU_GRAPH_NODE_TYPE_MEMSET, n->memset)
GETTER(cuGraphMemcpyNodeGetParams, CUDA_MEMCPY3D, CU_GRAPH_NODE_TYPE_MEMCPY, n->copy)
GETTER(cuGraphHostNodeGetParams, CUDA_HOST_NODE_PARAMS, CU_GRAPH_NODE_TYPE_HOST, n->host)
GETTER(cuGraphChildGraphNodeGetGraph, CUgraph, CU_GRAPH_NODE_TYPE_GRAPH, (CUgraph)n->child)
GETTER(cuGraphEventRecordNodeGetEvent, CUevent, CU_GRAPH_NODE_TYPE_EVENT_RECORD, n->event)
GETTER(cuGraphEventWaitNodeGetEvent, CUevent, CU_GRAPH_NODE_TYPE_WAIT_EVENT, n->event)
GETTER(cuGraphMemAllocNodeGetParams, CUDA_MEM_ALLOC_NODE_PARAMS, CU_GRAPH_NODE_TYPE_MEM_ALLOC, n->alloc)
GETTER(cuGraphMemFreeNodeGetParams, CUdeviceptr, CU_GRAPH_NODE_TYPE_MEM_FREE, n->free_ptr)

static CUresult memset_set_impl(CUgraphNode h, const CUDA_MEMSET_NODE_PARAMS *p) {
  fc_node *n = typed(h, CU_GRAPH_NODE_TYPE_MEMSET);
  if (!n || !p || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4)) return CUDA_ERROR_INVALID_VALUE;
  n->memset = *p;
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphMemsetNodeSetParams(CUgraphNode h, const CUDA_MEMSET_NODE_PARAMS *p) { FC_GUARD(memset_set_impl(h, p)); }

static CUresult memcpy_set_impl(CUgraphNode h, const CUDA_MEMCPY3D *p) {
  fc_node *n = typed(h, CU_GRAPH_NODE_TYPE_MEMCPY);
  if (!n || !p) return CUDA_ERROR_INVALID_VALUE;
  n->copy = *p;
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphMemcpyNodeSetParams(CUgraphNode h, const CUDA_MEMCPY3D *p) { FC_GUARD(memcpy_set_impl(h, p)); }

static CUresult event_set_impl(CUgraphNode h, CUevent e, CUgraphNodeType t) {
  fc_node *n = typed(h, t);
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  if (!fc_is(e, FC_K_EVENT)) return CUDA_ERROR_INVALID_HANDLE;
  n->event = e;
  return CUDA_SUCCESS;
}

FC_API CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode h, CUevent e) {
  FC_GUARD(event_set_impl(h, e, CU_GRAPH_NODE_TYPE_EVENT_RECORD));
}
FC_API CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode h, CUevent e) {
  FC_GUARD(event_set_impl(h, e, CU_GRAPH_NODE_TYPE_WAIT_EVENT));
}
