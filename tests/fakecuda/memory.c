/* fakecuda: linear allocations, device-pointer checks, stream-ordered allocations, pools. */
#include "fakecuda.h"

#include <sys/mman.h>

typedef struct fc_alloc_rec {
  CUdeviceptr base;
  size_t size, span;
  int kind;
  int paged; /* packed into a driver page (FAKECUDA_SMALL_PAGE_ROOM): its free gives no memory back */
} fc_alloc_rec;

/* With FAKECUDA_SMALL_PAGE_ROOM set, cuMemAlloc of less than a page is packed as a real driver packs it: into
 * a 2 MiB page that starts with that many bytes of room (one partly used before the program began), a new
 * page charged whole when the next does not fit, pages never given back. The bytes a linear allocation of n
 * adds to the used memory cuMemGetInfo reports; *paged: packed. */
#define FC_SMALL_PAGE (2ull << 20)
static size_t charge_for(size_t n, int kind, int *paged) {
  *paged = 0;
  if (fc_g.small_page_room < 0 || kind != FC_MEM_DEVICE || n >= FC_SMALL_PAGE) return n;
  size_t slot = (n + 511) & ~(size_t)511;
  *paged = 1;
  if ((long long)slot <= fc_g.small_page_room) {
    fc_g.small_page_room -= (long long)slot;
    return 0;
  }
  fc_g.small_page_room = (long long)(FC_SMALL_PAGE - slot);
  return FC_SMALL_PAGE;
}

static fc_alloc_rec *allocs;
static size_t nallocs, capallocs;
static unsigned long long used_bytes;

unsigned long long fc_mem_used(void) { return used_bytes; }

static fc_alloc_rec *find_alloc(CUdeviceptr p) {
  for (size_t i = 0; i < nallocs; i++)
    if (p >= allocs[i].base && p < allocs[i].base + allocs[i].size) return &allocs[i];
  return NULL;
}

int fc_mem_range(CUdeviceptr p, CUdeviceptr *base, size_t *size, int *kind) {
  fc_alloc_rec *a = find_alloc(p);
  if (!a) return -1;
  if (base) *base = a->base;
  if (size) *size = a->size;
  if (kind) *kind = a->kind;
  return 0;
}

int fc_dev_ok(CUdeviceptr p, size_t n) {
  if (!p) return -1;
  CUdeviceptr cur = p, end = p + n;
  if (end < p) return -1;
  if (n == 0) end = p + 1;
  while (cur < end) {
    CUdeviceptr b;
    size_t s;
    int acc;
    fc_alloc_rec *a = find_alloc(cur);
    if (a) {
      cur = a->base + a->size;
    } else if (fc_vmm_range(cur, &b, &s, &acc) == 0 && acc) {
      cur = b + s;
    } else {
      return -1;
    }
  }
  return 0;
}

int fc_any_ok(const void *ptr, size_t n) {
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
  if (!p) return -1;
  /* Host memory is fine; memory inside a VMM reservation must be mapped and accessible. */
  CUdeviceptr cur = p, end = p + (n ? n : 1);
  if (end < p) return -1;
  while (cur < end) {
    CUdeviceptr b;
    size_t s;
    int acc;
    int r = fc_vmm_range(cur, &b, &s, &acc);
    if (r < 0 || (r == 0 && !acc)) return -1;
    cur = r == 0 ? b + s : b; /* end of this mapping, or the next reservation */
  }
  return 0;
}

CUresult fc_alloc(CUdeviceptr *out, size_t n, int kind, int low32) {
  if (!out || n == 0) return CUDA_ERROR_INVALID_VALUE;
  if (n > fc_g.total_mem || used_bytes + n > fc_g.total_mem) return CUDA_ERROR_OUT_OF_MEMORY;
  int paged;
  long long room_before = fc_g.small_page_room;
  size_t charge = charge_for(n, kind, &paged);
  size_t span = (n + 4095) & ~(size_t)4095;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (low32 ? MAP_32BIT : 0);
  void *p = mmap(NULL, span, PROT_READ | PROT_WRITE, flags, -1, 0);
  fc_alloc_rec rec = {(CUdeviceptr)(uintptr_t)p, n, span, kind, paged};
  if (p == MAP_FAILED || FC_PUSH(allocs, nallocs, capallocs, rec)) {
    if (p != MAP_FAILED) munmap(p, span);
    fc_g.small_page_room = room_before;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  used_bytes += charge;
  *out = rec.base;
  return CUDA_SUCCESS;
}

/* kind_mask: bit (1 << kind) for each kind that may be freed by the caller. */
CUresult fc_free(CUdeviceptr p, int kind_mask) {
  for (size_t i = 0; i < nallocs; i++) {
    if (allocs[i].base != p) continue;
    if (!(kind_mask & (1 << allocs[i].kind))) return CUDA_ERROR_INVALID_VALUE;
    if (allocs[i].kind == FC_MEM_GRAPH) return CUDA_SUCCESS; /* graph memory stays mapped */
    munmap((void *)(uintptr_t)p, allocs[i].span);
    if (!allocs[i].paged) used_bytes -= allocs[i].size;
    allocs[i] = allocs[--nallocs];
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

#define M(k) (1 << (k))

/* ------------------------------------------------------------------ linear allocations */
static CUresult alloc_impl(CUdeviceptr *dptr, size_t n, int kind, int low32) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  if ((r = fc_capture_unsafe_call())) return r;
  return fc_alloc(dptr, n, kind, low32);
}

FC_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t n) { FC_GUARD(alloc_impl(dptr, n, FC_MEM_DEVICE, 0)); }

static CUresult pitch_impl(CUdeviceptr *dptr, size_t *pitch, size_t w, size_t h, unsigned elem, int low32) {
  if (!pitch || w == 0 || h == 0 || (elem != 4 && elem != 8 && elem != 16)) return CUDA_ERROR_INVALID_VALUE;
  size_t p = (w + 511) & ~(size_t)511;
  CUresult r = alloc_impl(dptr, p * h, FC_MEM_PITCH, low32);
  if (r == CUDA_SUCCESS) *pitch = p;
  return r;
}

FC_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t w, size_t h, unsigned int elem) {
  FC_GUARD(pitch_impl(dptr, pPitch, w, h, elem, 0));
}

static CUresult free_impl(CUdeviceptr p) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  if ((r = fc_capture_unsafe_call())) return r;
  return fc_free(p, M(FC_MEM_DEVICE) | M(FC_MEM_PITCH) | M(FC_MEM_MANAGED) | M(FC_MEM_ASYNC) | M(FC_MEM_V1) |
                        M(FC_MEM_GRAPH));
}

FC_API CUresult cuMemFree_v2(CUdeviceptr p) { FC_GUARD(free_impl(p)); }

static CUresult range_impl(CUdeviceptr *pbase, size_t *psize, CUdeviceptr p) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  CUdeviceptr b;
  size_t s;
  int acc;
  if (fc_mem_range(p, &b, &s, NULL) != 0 && fc_vmm_range(p, &b, &s, &acc) != 0) return CUDA_ERROR_NOT_FOUND;
  if (pbase) *pbase = b;
  if (psize) *psize = s;
  return CUDA_SUCCESS;
}

FC_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr p) {
  FC_GUARD(range_impl(pbase, psize, p));
}

/* Legacy (CUDA < 3.2) ABI: 32-bit device pointers and sizes; memory is placed below 4 GiB. */
FC_API CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int n) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr p = 0;
  fc_lock();
  CUresult r = fc_g.initialized ? alloc_impl(&p, n, FC_MEM_V1, 1) : CUDA_ERROR_NOT_INITIALIZED;
  if (r == CUDA_SUCCESS && p > 0xffffffffull) {
    fc_free(p, M(FC_MEM_V1));
    r = CUDA_ERROR_OUT_OF_MEMORY;
  }
  fc_unlock();
  if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr_v1)p;
  return r;
}

FC_API CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int w, unsigned int h,
                                unsigned int elem) {
  if (!dptr || !pPitch) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr p = 0;
  size_t pitch = 0;
  fc_lock();
  CUresult r = fc_g.initialized ? pitch_impl(&p, &pitch, w, h, elem, 1) : CUDA_ERROR_NOT_INITIALIZED;
  if (r == CUDA_SUCCESS && p + pitch * h > 0xffffffffull) {
    fc_free(p, M(FC_MEM_PITCH));
    r = CUDA_ERROR_OUT_OF_MEMORY;
  }
  fc_unlock();
  if (r == CUDA_SUCCESS) {
    *dptr = (CUdeviceptr_v1)p;
    *pPitch = (unsigned)pitch;
  }
  return r;
}

FC_API CUresult cuMemFree(CUdeviceptr_v1 p) { FC_GUARD(free_impl((CUdeviceptr)p)); }

FC_API CUresult cuMemGetAddressRange(CUdeviceptr_v1 *pbase, unsigned int *psize, CUdeviceptr_v1 p) {
  CUdeviceptr b = 0;
  size_t s = 0;
  fc_lock();
  CUresult r = fc_g.initialized ? range_impl(&b, &s, (CUdeviceptr)p) : CUDA_ERROR_NOT_INITIALIZED;
  fc_unlock();
  if (r == CUDA_SUCCESS) {
    if (pbase) *pbase = (CUdeviceptr_v1)b;
    if (psize) *psize = (unsigned)s;
  }
  return r;
}

static CUresult info_impl(size_t *fr, size_t *total) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  if (!fr || !total) return CUDA_ERROR_INVALID_VALUE;
  *total = fc_g.total_mem;
  *fr = fc_g.total_mem - used_bytes;
  return CUDA_SUCCESS;
}

FC_API CUresult cuMemGetInfo_v2(size_t *fr, size_t *total) { FC_GUARD(info_impl(fr, total)); }

FC_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t n, unsigned int flags) {
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  FC_GUARD(alloc_impl(dptr, n, FC_MEM_MANAGED, 0));
}

static CUresult host_alloc_impl(void **pp, size_t n) {
  if (!pp) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr p = 0;
  CUresult r = alloc_impl(&p, n, FC_MEM_HOST, 0);
  if (r == CUDA_SUCCESS) *pp = (void *)(uintptr_t)p;
  return r;
}

FC_API CUresult cuMemAllocHost_v2(void **pp, size_t n) { FC_GUARD(host_alloc_impl(pp, n)); }
FC_API CUresult cuMemHostAlloc(void **pp, size_t n, unsigned int flags) { FC_GUARD(host_alloc_impl(pp, n)); }

static CUresult host_free_impl(void *p) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  if ((r = fc_capture_unsafe_call())) return r;
  return fc_free((CUdeviceptr)(uintptr_t)p, M(FC_MEM_HOST));
}

FC_API CUresult cuMemFreeHost(void *p) { FC_GUARD(host_free_impl(p)); }

static CUresult host_devptr_impl(CUdeviceptr *out, void *p) {
  int kind = 0;
  if (!out || fc_mem_range((CUdeviceptr)(uintptr_t)p, NULL, NULL, &kind) != 0 || kind != FC_MEM_HOST)
    return CUDA_ERROR_INVALID_VALUE;
  *out = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}

FC_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *out, void *p, unsigned int flags) {
  FC_GUARD(host_devptr_impl(out, p));
}

static CUresult ptr_attr_impl(void *data, CUpointer_attribute attr, CUdeviceptr p) {
  CUdeviceptr base;
  size_t size;
  int kind = 0, acc = 0;
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  if (fc_mem_range(p, &base, &size, &kind) != 0) {
    if (fc_vmm_range(p, &base, &size, &acc) != 0) return CUDA_ERROR_INVALID_VALUE;
    kind = FC_MEM_DEVICE;
  }
  fc_ctx *c = fc_current_ctx();
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = (CUcontext)c; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *(unsigned *)data = kind == FC_MEM_HOST ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = p; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (kind != FC_MEM_HOST && kind != FC_MEM_MANAGED) return CUDA_ERROR_INVALID_VALUE;
      *(void **)data = (void *)(uintptr_t)p;
      break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(int *)data = kind == FC_MEM_MANAGED; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = c ? c->dev : 0; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = size; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data = 1; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = base; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

FC_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr p) {
  FC_GUARD(ptr_attr_impl(data, attr, p));
}

/* ------------------------------------------------------------------ stream-ordered allocation */
CUresult fc_alloc_async(CUdeviceptr *dptr, size_t n, CUstream s, int ptds) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  if (!dptr || n == 0) return CUDA_ERROR_INVALID_VALUE;
  fc_stream *st;
  if ((r = fc_stream_resolve(s, ptds, &st))) return r;
  if (!st->cap) return fc_alloc(dptr, n, FC_MEM_ASYNC, 0);
  /* Captured: a mem-alloc node. The memory is set aside now and lives as long as the process. */
  CUdeviceptr p;
  if (st->cap->status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if ((r = fc_alloc(&p, n, FC_MEM_GRAPH, 0))) return r;
  fc_node *w = fc_node_new(CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
  w->alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  w->alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  w->alloc.poolProps.location.id = fc_current_ctx()->dev;
  w->alloc.bytesize = n;
  w->alloc.dptr = p;
  if ((r = fc_submit(s, ptds, w))) return r;
  *dptr = p;
  return CUDA_SUCCESS;
}

CUresult fc_free_async(CUdeviceptr p, CUstream s, int ptds) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  fc_stream *st;
  if ((r = fc_stream_resolve(s, ptds, &st))) return r;
  if (!st->cap)
    return fc_free(p, M(FC_MEM_ASYNC) | M(FC_MEM_DEVICE) | M(FC_MEM_GRAPH));
  int kind = 0;
  CUdeviceptr base;
  if (fc_mem_range(p, &base, NULL, &kind) != 0 || base != p) return CUDA_ERROR_INVALID_VALUE;
  fc_node *w = fc_node_new(CU_GRAPH_NODE_TYPE_MEM_FREE);
  if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
  w->free_ptr = p;
  return fc_submit(s, ptds, w);
}

FC_API CUresult cuMemAllocAsync(CUdeviceptr *d, size_t n, CUstream s) { FC_GUARD(fc_alloc_async(d, n, s, 0)); }
FC_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *d, size_t n, CUstream s) { FC_GUARD(fc_alloc_async(d, n, s, 1)); }
FC_API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { FC_GUARD(fc_free_async(p, s, 0)); }
FC_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { FC_GUARD(fc_free_async(p, s, 1)); }

/* ------------------------------------------------------------------ memory pools (minimal) */
typedef struct fc_pool {
  CUmemPoolProps props;
  cuuint64_t release_threshold;
} fc_pool;
static fc_pool default_pools[64];

static int pool_ok(CUmemoryPool p) { return fc_is(p, FC_K_POOL); }

FC_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *d, size_t n, CUmemoryPool pool, CUstream s) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  fc_lock();
  CUresult r = pool_ok(pool) ? fc_alloc_async(d, n, s, 0) : CUDA_ERROR_INVALID_VALUE;
  fc_unlock();
  return r;
}

FC_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *d, size_t n, CUmemoryPool pool, CUstream s) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  fc_lock();
  CUresult r = pool_ok(pool) ? fc_alloc_async(d, n, s, 1) : CUDA_ERROR_INVALID_VALUE;
  fc_unlock();
  return r;
}

static CUresult pool_create_impl(CUmemoryPool *pool, const CUmemPoolProps *props) {
  if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  fc_pool *p = calloc(1, sizeof(*p));
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  p->props = *props;
  fc_handle_add(p, FC_K_POOL);
  *pool = (CUmemoryPool)p;
  return CUDA_SUCCESS;
}

FC_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) { FC_GUARD(pool_create_impl(pool, props)); }

static CUresult pool_destroy_impl(CUmemoryPool pool) {
  if (!pool_ok(pool)) return CUDA_ERROR_INVALID_VALUE;
  fc_pool *p = (fc_pool *)pool;
  if (p >= default_pools && p < default_pools + 64) return CUDA_ERROR_INVALID_VALUE;
  fc_handle_del(p);
  free(p);
  return CUDA_SUCCESS;
}

FC_API CUresult cuMemPoolDestroy(CUmemoryPool pool) { FC_GUARD(pool_destroy_impl(pool)); }

static CUresult default_pool_impl(CUmemoryPool *out, CUdevice d) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (d < 0 || d >= fc_g.device_count) return CUDA_ERROR_INVALID_DEVICE;
  fc_pool *p = &default_pools[d];
  if (!fc_is(p, FC_K_POOL)) {
    p->props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->props.location.id = d;
    fc_handle_add(p, FC_K_POOL);
  }
  *out = (CUmemoryPool)p;
  return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *out, CUdevice d) { FC_GUARD(default_pool_impl(out, d)); }
FC_API CUresult cuDeviceGetMemPool(CUmemoryPool *out, CUdevice d) { FC_GUARD(default_pool_impl(out, d)); }

static CUresult pool_attr_impl(CUmemoryPool pool, CUmemPool_attribute a, void *v, int set) {
  if (!pool_ok(pool) || !v) return CUDA_ERROR_INVALID_VALUE;
  fc_pool *p = (fc_pool *)pool;
  switch (a) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      if (set) p->release_threshold = *(cuuint64_t *)v;
      else *(cuuint64_t *)v = p->release_threshold;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      if (!set) *(int *)v = 1;
      return CUDA_SUCCESS;
    default:
      if (set) return CUDA_SUCCESS;
      *(cuuint64_t *)v = 0;
      return CUDA_SUCCESS;
  }
}

FC_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute a, void *v) {
  FC_GUARD(pool_attr_impl(pool, a, v, 1));
}
FC_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute a, void *v) {
  FC_GUARD(pool_attr_impl(pool, a, v, 0));
}
FC_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  FC_GUARD(pool_ok(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}
