/* fakecuda: kernel launches, launch validation, kernel-parameter storage, host functions. */
#include "fakecuda.h"

#define SMEM_OPTIN_MAX 232448u

static void kparams_fixup(fc_kparams *k) {
  const fc_builtin *b = k->func ? k->func->bi : NULL;
  if (k->mode == 0) {
    for (size_t i = 0; i < k->nparams; i++) k->paramptrs[i] = k->argbuf + (b ? b->off[i] : 0);
    memset(k->extra, 0, sizeof(k->extra));
  } else {
    k->extra_size = k->argsize;
    k->extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
    k->extra[1] = k->argbuf;
    k->extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
    k->extra[3] = &k->extra_size;
    k->extra[4] = CU_LAUNCH_PARAM_END;
  }
}

void fc_kparams_clear(fc_kparams *k) {
  free(k->argbuf);
  free(k->paramptrs);
  free(k->attrs);
  memset(k, 0, sizeof(*k));
}

static CUresult parse_extra(void **extra, const void **buf, size_t *size) {
  const void *b = NULL;
  const size_t *sz = NULL;
  for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) b = extra[i + 1];
    else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) sz = (const size_t *)extra[i + 1];
    else return CUDA_ERROR_INVALID_VALUE;
    if (i > 64) return CUDA_ERROR_INVALID_VALUE;
  }
  if (!b && !sz) { /* {END} alone: no arguments */
    *buf = NULL;
    *size = 0;
    return CUDA_SUCCESS;
  }
  if (!b || !sz) return CUDA_ERROR_INVALID_VALUE;
  *buf = b;
  *size = *sz;
  return CUDA_SUCCESS;
}

/* Stores a private copy of the arguments (kernelParams packed at the parameter offsets, or the raw
 * extra buffer). Launch attributes already in k are kept. */
CUresult fc_kparams_set(fc_kparams *k, fc_func *f, const unsigned grid[3], const unsigned block[3], unsigned smem,
                        void **kernelParams, void **extra) {
  if (kernelParams && extra) return CUDA_ERROR_INVALID_VALUE;
  const fc_builtin *b = f->bi;
  size_t need = fc_builtin_argsize(b), np = b ? b->nparams : 0;
  unsigned char *buf = NULL;
  void **ptrs = NULL;
  size_t size;
  int mode;
  if (extra) {
    const void *src;
    CUresult r = parse_extra(extra, &src, &size);
    if (r) return r;
    /* As the driver: a buffer may fill the last parameter only in part (NCCL launches its 4096-byte argument
     * storage with the bytes in use); one that ends before the last parameter begins is refused. The rest
     * of the parameter space reads as zeros. */
    size_t reach = 0;
    for (size_t i = 0; i < np; i++)
      if (b->off[i] + 1 > reach) reach = b->off[i] + 1;
    if (size < reach || (size && !src)) return CUDA_ERROR_INVALID_VALUE;
    buf = calloc(1, (size > need ? size : need) + 1);
    if (!buf) return CUDA_ERROR_OUT_OF_MEMORY;
    if (size) memcpy(buf, src, size);
    mode = 1;
    np = 0;
  } else {
    if (np && !kernelParams) return CUDA_ERROR_INVALID_VALUE;
    size = need;
    buf = calloc(1, size ? size : 1);
    ptrs = calloc(np ? np : 1, sizeof(*ptrs));
    if (!buf || !ptrs) {
      free(buf);
      free(ptrs);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < np; i++) {
      if (!kernelParams[i]) {
        free(buf);
        free(ptrs);
        return CUDA_ERROR_INVALID_VALUE;
      }
      memcpy(buf + b->off[i], kernelParams[i], b->size[i]);
    }
    mode = 0;
  }
  free(k->argbuf);
  free(k->paramptrs);
  k->func = f;
  memcpy(k->grid, grid, sizeof(k->grid));
  memcpy(k->block, block, sizeof(k->block));
  k->smem = smem;
  k->mode = mode;
  k->argbuf = buf;
  k->argsize = size;
  k->paramptrs = ptrs;
  k->nparams = np;
  kparams_fixup(k);
  return CUDA_SUCCESS;
}

CUresult fc_kparams_copy(fc_kparams *dst, const fc_kparams *src) {
  fc_kparams k = *src;
  /* An `extra` buffer shorter than the parameters is stored padded with zeros to the kernel's size. */
  size_t need = src->func ? fc_builtin_argsize(src->func->bi) : 0;
  k.argbuf = calloc(1, (src->argsize > need ? src->argsize : need) + 1);
  k.paramptrs = src->paramptrs ? calloc(src->nparams ? src->nparams : 1, sizeof(void *)) : NULL;
  k.attrs = src->nattrs ? malloc(src->nattrs * sizeof(CUlaunchAttribute)) : NULL;
  if (!k.argbuf || (src->paramptrs && !k.paramptrs) || (src->nattrs && !k.attrs)) {
    free(k.argbuf);
    free(k.paramptrs);
    free(k.attrs);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (src->argsize) memcpy(k.argbuf, src->argbuf, src->argsize);
  if (src->nattrs) memcpy(k.attrs, src->attrs, src->nattrs * sizeof(CUlaunchAttribute));
  k.pss = 0;
  *dst = k;
  kparams_fixup(dst);
  return CUDA_SUCCESS;
}

static int node_attr_allowed(CUlaunchAttributeID id) {
  return id > CU_LAUNCH_ATTRIBUTE_IGNORE && id < CU_LAUNCH_ATTRIBUTE_MAX &&
         id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION && id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT &&
         id != CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT && id != CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY;
}

CUresult fc_kparams_set_attr(fc_kparams *k, const CUlaunchAttribute *a) {
  if (!node_attr_allowed(a->id)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < k->nattrs; i++) {
    if (k->attrs[i].id == a->id) {
      k->attrs[i] = *a;
      return CUDA_SUCCESS;
    }
  }
  CUlaunchAttribute *n = realloc(k->attrs, (k->nattrs + 1) * sizeof(*n));
  if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
  k->attrs = n;
  memset(&n[k->nattrs], 0, sizeof(*n));
  n[k->nattrs].id = a->id;
  n[k->nattrs].value = a->value;
  k->nattrs++;
  return CUDA_SUCCESS;
}

const CUlaunchAttribute *fc_kparams_get_attr(const fc_kparams *k, CUlaunchAttributeID id) {
  for (size_t i = 0; i < k->nattrs; i++)
    if (k->attrs[i].id == id) return &k->attrs[i];
  return NULL;
}

/* The function's dynamic shared-memory limit, as the driver checks it: where a kernel node is made (a launch,
 * captured or not, cuGraphAddKernelNode, a node's or an exec's SetParams), not at instantiation or replay. A
 * program may lower the limit after a capture (FlashInfer sets it to each launch's exact size) and its graphs
 * still instantiate and replay; the hardware driver does the same. */
CUresult fc_check_smem(const fc_func *f, unsigned smem) {
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (smem > SMEM_OPTIN_MAX || smem > (unsigned)f->attr[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES])
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult fc_kparams_validate(const fc_kparams *k) {
  const fc_func *f = k->func;
  if (!f || !f->loaded) return CUDA_ERROR_INVALID_HANDLE;
  for (int i = 0; i < 3; i++)
    if (!k->grid[i] || !k->block[i]) return CUDA_ERROR_INVALID_VALUE;
  if ((unsigned long long)k->block[0] * k->block[1] * k->block[2] > 1024 || k->block[2] > 64 || k->grid[1] > 65535 ||
      k->grid[2] > 65535)
    return CUDA_ERROR_INVALID_VALUE;
  /* Cluster shape: the launch attribute, else the function's required cluster dimensions. */
  unsigned c[3] = {0, 0, 0};
  const CUlaunchAttribute *a = fc_kparams_get_attr(k, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
  const int *fa = f->attr;
  int req = fa[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] > 0 && fa[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT] > 0 &&
            fa[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH] > 0;
  if (a && (a->value.clusterDim.x || a->value.clusterDim.y || a->value.clusterDim.z)) {
    c[0] = a->value.clusterDim.x;
    c[1] = a->value.clusterDim.y;
    c[2] = a->value.clusterDim.z;
    if (req && (c[0] != (unsigned)fa[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] ||
                c[1] != (unsigned)fa[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT] ||
                c[2] != (unsigned)fa[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH]))
      return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  } else if (req) {
    c[0] = (unsigned)fa[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH];
    c[1] = (unsigned)fa[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT];
    c[2] = (unsigned)fa[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH];
  }
  if (c[0] || c[1] || c[2]) {
    unsigned limit = fa[CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED] ? 16 : 8;
    if (!c[0] || !c[1] || !c[2] || (unsigned long long)c[0] * c[1] * c[2] > limit) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    for (int i = 0; i < 3; i++)
      if (k->grid[i] % c[i]) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  }
  if (f->bi && (f->bi->flags & FC_BI_CLUSTER2) && !(c[0] == 2 && c[1] == 1 && c[2] == 1))
    return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  a = fc_kparams_get_attr(k, CU_LAUNCH_ATTRIBUTE_COOPERATIVE);
  if (a && a->value.cooperative &&
      (unsigned long long)k->grid[0] * k->grid[1] * k->grid[2] > (unsigned long long)fc_g.sm_count * 32)
    return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  return CUDA_SUCCESS;
}

CUresult fc_kparams_run(const fc_kparams *k) {
  CUresult r = fc_kparams_validate(k);
  if (r) return r;
  const fc_builtin *b = k->func->bi;
  if (!b) return CUDA_ERROR_NOT_SUPPORTED; /* a name the fake has no implementation for */
  size_t need = fc_builtin_argsize(b); /* argbuf holds at least this much (fc_kparams_set pads it) */
  fc_launch L;
  memcpy(L.grid, k->grid, sizeof(L.grid));
  memcpy(L.block, k->block, sizeof(L.block));
  L.smem = k->smem;
  L.args = k->argbuf;
  L.argsize = k->argsize > need ? k->argsize : need;
  L.mod = k->func->mod;
  return b->fn(&L);
}

/* ------------------------------------------------------------------ launch entry points */
CUresult fc_launch_kernel(CUfunction fh, const unsigned grid[3], const unsigned block[3], unsigned smem, CUstream s,
                          int ptds, void **params, void **extra, const CUlaunchAttribute *attrs, unsigned nattrs) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  fc_func *f = fc_func_resolve(fh);
  if (!f || !f->loaded) return CUDA_ERROR_INVALID_HANDLE;
  if (nattrs && !attrs) return CUDA_ERROR_INVALID_VALUE;
  fc_node *w = fc_node_new(CU_GRAPH_NODE_TYPE_KERNEL);
  if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
  r = fc_kparams_set(&w->k, f, grid, block, smem, params, extra);
  for (unsigned i = 0; r == CUDA_SUCCESS && i < nattrs; i++) {
    CUlaunchAttributeID id = attrs[i].id;
    if (id == CU_LAUNCH_ATTRIBUTE_IGNORE) continue;
    if (id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) {
      w->k.pss = attrs[i].value.programmaticStreamSerializationAllowed != 0;
      continue;
    }
    if (id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT || id == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT ||
        id == CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY)
      continue; /* accepted, no effect in a synchronous fake */
    r = fc_kparams_set_attr(&w->k, &attrs[i]);
  }
  if (r == CUDA_SUCCESS) r = fc_kparams_validate(&w->k);
  if (r == CUDA_SUCCESS) r = fc_check_smem(w->k.func, w->k.smem);
  if (r) {
    fc_node_free(w);
    return r;
  }
  return fc_submit(s, ptds, w);
}

#define G3(x, y, z) ((const unsigned[3]){(x), (y), (z)})

FC_API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                               unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void **params,
                               void **extra) {
  FC_GUARD(fc_launch_kernel(f, G3(gx, gy, gz), G3(bx, by, bz), smem, s, 0, params, extra, NULL, 0));
}

FC_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                    unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void **params,
                                    void **extra) {
  FC_GUARD(fc_launch_kernel(f, G3(gx, gy, gz), G3(bx, by, bz), smem, s, 1, params, extra, NULL, 0));
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra, int ptds) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  return fc_launch_kernel(f, G3(c->gridDimX, c->gridDimY, c->gridDimZ), G3(c->blockDimX, c->blockDimY, c->blockDimZ),
                          c->sharedMemBytes, c->hStream, ptds, params, extra, c->attrs, c->numAttrs);
}

FC_API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
  FC_GUARD(launch_ex(c, f, params, extra, 0));
}

FC_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
  FC_GUARD(launch_ex(c, f, params, extra, 1));
}

static CUresult launch_coop(CUfunction f, const unsigned g[3], const unsigned b[3], unsigned smem, CUstream s,
                            void **params, int ptds) {
  CUlaunchAttribute a;
  memset(&a, 0, sizeof(a));
  a.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  a.value.cooperative = 1;
  return fc_launch_kernel(f, g, b, smem, s, ptds, params, NULL, &a, 1);
}

FC_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                          unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                                          CUstream s, void **params) {
  FC_GUARD(launch_coop(f, G3(gx, gy, gz), G3(bx, by, bz), smem, s, params, 0));
}

FC_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                               unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                                               CUstream s, void **params) {
  FC_GUARD(launch_coop(f, G3(gx, gy, gz), G3(bx, by, bz), smem, s, params, 1));
}

CUresult fc_launch_host(CUstream s, int ptds, CUhostFn fn, void *user) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  fc_node *w = fc_node_new(CU_GRAPH_NODE_TYPE_HOST);
  if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
  w->host.fn = fn;
  w->host.userData = user;
  return fc_submit(s, ptds, w);
}

FC_API CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *user) { FC_GUARD(fc_launch_host(s, 0, fn, user)); }
FC_API CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *user) { FC_GUARD(fc_launch_host(s, 1, fn, user)); }
