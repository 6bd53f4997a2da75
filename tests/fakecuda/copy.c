/* fakecuda: copies (sync, async, batched, 2D/3D) and memsets; async forms become graph nodes under capture. */
#include "fakecuda.h"

/* ------------------------------------------------------------------ copies and memsets */
CUresult fc_copy3d(const CUDA_MEMCPY3D *c) {
  size_t w = c->WidthInBytes, h = c->Height ? c->Height : 1, d = c->Depth ? c->Depth : 1;
  size_t sp = c->srcPitch ? c->srcPitch : w, dp = c->dstPitch ? c->dstPitch : w;
  size_t sh = c->srcHeight ? c->srcHeight : h, dh = c->dstHeight ? c->dstHeight : h;
  if (w == 0) return CUDA_SUCCESS;
  if ((h > 1 || d > 1) && (sp < w || dp < w)) return CUDA_ERROR_INVALID_VALUE;
  if (c->srcMemoryType == CU_MEMORYTYPE_ARRAY || c->dstMemoryType == CU_MEMORYTYPE_ARRAY)
    return CUDA_ERROR_NOT_SUPPORTED;
  const unsigned char *src = c->srcMemoryType == CU_MEMORYTYPE_HOST ? (const unsigned char *)c->srcHost
                                                                   : (const unsigned char *)(uintptr_t)c->srcDevice;
  unsigned char *dst = c->dstMemoryType == CU_MEMORYTYPE_HOST ? (unsigned char *)c->dstHost
                                                             : (unsigned char *)(uintptr_t)c->dstDevice;
  src += c->srcZ * sh * sp + c->srcY * sp + c->srcXInBytes;
  dst += c->dstZ * dh * dp + c->dstY * dp + c->dstXInBytes;
  size_t sext = (d - 1) * sh * sp + (h - 1) * sp + w, dext = (d - 1) * dh * dp + (h - 1) * dp + w;
  int sok = c->srcMemoryType == CU_MEMORYTYPE_DEVICE ? fc_dev_ok((CUdeviceptr)(uintptr_t)src, sext)
                                                     : fc_any_ok(src, sext);
  int dok = c->dstMemoryType == CU_MEMORYTYPE_DEVICE ? fc_dev_ok((CUdeviceptr)(uintptr_t)dst, dext)
                                                     : fc_any_ok(dst, dext);
  if (sok || dok) return CUDA_ERROR_INVALID_VALUE;
  for (size_t z = 0; z < d; z++)
    for (size_t y = 0; y < h; y++) memmove(dst + z * dh * dp + y * dp, src + z * sh * sp + y * sp, w);
  return CUDA_SUCCESS;
}

CUresult fc_memset2d(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem, size_t width, size_t height) {
  if (elem != 1 && elem != 2 && elem != 4) return CUDA_ERROR_INVALID_VALUE;
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (height == 1) pitch = width * elem;
  if (pitch < width * elem) return CUDA_ERROR_INVALID_VALUE;
  if (fc_dev_ok(dst, (height - 1) * pitch + width * elem)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t y = 0; y < height; y++) {
    unsigned char *row = (unsigned char *)(uintptr_t)(dst + y * pitch);
    if (elem == 1) {
      memset(row, (int)(value & 0xff), width);
    } else if (elem == 2) {
      uint16_t v = (uint16_t)value;
      for (size_t i = 0; i < width; i++) memcpy(row + 2 * i, &v, 2);
    } else {
      uint32_t v = value;
      for (size_t i = 0; i < width; i++) memcpy(row + 4 * i, &v, 4);
    }
  }
  return CUDA_SUCCESS;
}

static void fill_copy(CUDA_MEMCPY3D *c, void *dst, CUmemorytype dt, const void *src, CUmemorytype st, size_t n) {
  memset(c, 0, sizeof(*c));
  c->srcMemoryType = st;
  c->dstMemoryType = dt;
  if (st == CU_MEMORYTYPE_HOST) c->srcHost = src;
  else c->srcDevice = (CUdeviceptr)(uintptr_t)src;
  if (dt == CU_MEMORYTYPE_HOST) c->dstHost = dst;
  else c->dstDevice = (CUdeviceptr)(uintptr_t)dst;
  c->WidthInBytes = n;
  c->Height = 1;
  c->Depth = 1;
}

CUresult fc_memcpy_submit(CUstream s, int ptds, void *dst, CUmemorytype dt, const void *src, CUmemorytype st,
                          size_t n) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  fc_node *w = fc_node_new(CU_GRAPH_NODE_TYPE_MEMCPY);
  if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
  fill_copy(&w->copy, dst, dt, src, st, n);
  return fc_submit(s, ptds, w);
}

static CUresult copy3d_submit(CUstream s, int ptds, const CUDA_MEMCPY3D *c) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  fc_node *w = fc_node_new(CU_GRAPH_NODE_TYPE_MEMCPY);
  if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
  w->copy = *c;
  return fc_submit(s, ptds, w);
}

CUresult fc_memset_submit(CUstream s, int ptds, CUdeviceptr dst, unsigned value, unsigned elem, size_t n) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  fc_node *w = fc_node_new(CU_GRAPH_NODE_TYPE_MEMSET);
  if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
  w->memset.dst = dst;
  w->memset.value = value;
  w->memset.elementSize = elem;
  w->memset.width = n;
  w->memset.height = 1;
  w->memset.pitch = 0;
  return fc_submit(s, ptds, w);
}

/* Synchronous forms: not capturable; illegal while this thread is capturing. */
static CUresult sync_copy(void *dst, CUmemorytype dt, const void *src, CUmemorytype st, size_t n) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  if ((r = fc_capture_unsafe_call())) return r;
  CUDA_MEMCPY3D c;
  fill_copy(&c, dst, dt, src, st, n);
  return fc_copy3d(&c);
}

static CUresult sync_set(CUdeviceptr dst, unsigned v, unsigned elem, size_t n) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  if ((r = fc_capture_unsafe_call())) return r;
  return fc_memset2d(dst, 0, v, elem, n, 1);
}

#define DP(x) ((void *)(uintptr_t)(x))
#define HOSTT CU_MEMORYTYPE_HOST
#define DEVT CU_MEMORYTYPE_DEVICE
#define UNIT CU_MEMORYTYPE_UNIFIED

FC_API CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { FC_GUARD(sync_copy(DP(d), DEVT, s, HOSTT, n)); }
FC_API CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { FC_GUARD(sync_copy(d, HOSTT, DP(s), DEVT, n)); }
FC_API CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { FC_GUARD(sync_copy(DP(d), DEVT, DP(s), DEVT, n)); }
FC_API CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { FC_GUARD(sync_copy(DP(d), UNIT, DP(s), UNIT, n)); }

FC_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) {
  FC_GUARD(fc_memcpy_submit(st, 0, DP(d), DEVT, s, HOSTT, n));
}
FC_API CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) {
  FC_GUARD(fc_memcpy_submit(st, 0, d, HOSTT, DP(s), DEVT, n));
}
FC_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
  FC_GUARD(fc_memcpy_submit(st, 0, DP(d), DEVT, DP(s), DEVT, n));
}
FC_API CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
  FC_GUARD(fc_memcpy_submit(st, 0, DP(d), UNIT, DP(s), UNIT, n));
}
FC_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
  FC_GUARD(fc_memcpy_submit(st, 1, DP(d), UNIT, DP(s), UNIT, n));
}

#ifndef FAKECUDA_NO_BATCH_COPY
/* A pointer inside device memory (an allocation, pinned host memory included, or a VMM mapping) must
 * have all n bytes there, as a copy from or to device memory must; any other pointer is host memory. */
static int batch_operand_ok(CUdeviceptr p, size_t n) {
  CUdeviceptr b;
  size_t s;
  int acc;
  if (fc_mem_range(p, NULL, NULL, NULL) == 0 || fc_vmm_range(p, &b, &s, &acc) == 0) return fc_dev_ok(p, n);
  return fc_any_ok((const void *)(uintptr_t)p, n);
}

/* The CUDA 13.0 ABI (no failIdx). The whole batch is checked before any copy runs: one bad copy refuses
 * it all, naming none. No graph node has this form, so a capturing stream refuses it. */
static CUresult batch_impl(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs,
                           size_t *idxs, size_t nattrs, CUstream h) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  if (!dsts || !srcs || !sizes || !attrs || !idxs || !count || !nattrs || nattrs > count || idxs[0] != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (fc_g.batch_copy_max && count > fc_g.batch_copy_max) return CUDA_ERROR_INVALID_VALUE;
  for (size_t k = 0; k < nattrs; k++) {
    if ((k && idxs[k] <= idxs[k - 1]) || idxs[k] >= count) return CUDA_ERROR_INVALID_VALUE;
    CUmemcpySrcAccessOrder o = attrs[k].srcAccessOrder;
    if (o != CU_MEMCPY_SRC_ACCESS_ORDER_STREAM && o != CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL &&
        o != CU_MEMCPY_SRC_ACCESS_ORDER_ANY)
      return CUDA_ERROR_INVALID_VALUE;
  }
  fc_stream *s;
  if (!h || (r = fc_stream_resolve(h, 0, &s)) || fc_stream_is_legacy(s)) return r ? r : CUDA_ERROR_INVALID_VALUE;
  if (s->cap) {
    s->cap->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  for (size_t i = 0; i < count; i++)
    if (!sizes[i] || batch_operand_ok(srcs[i], sizes[i]) || batch_operand_ok(dsts[i], sizes[i]))
      return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; i++) memmove((void *)(uintptr_t)dsts[i], (const void *)(uintptr_t)srcs[i], sizes[i]);
  return CUDA_SUCCESS;
}

FC_API CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                      CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, CUstream h) {
  FC_GUARD(batch_impl(dsts, srcs, sizes, count, attrs, idxs, nattrs, h));
}
#endif

static CUresult copy3d_sync(const CUDA_MEMCPY3D *c) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  if ((r = fc_capture_unsafe_call())) return r;
  return fc_copy3d(c);
}

static void copy2d_to_3d(CUDA_MEMCPY3D *c, const CUDA_MEMCPY2D *p) {
  memset(c, 0, sizeof(*c));
  c->srcXInBytes = p->srcXInBytes;
  c->srcY = p->srcY;
  c->srcMemoryType = p->srcMemoryType;
  c->srcHost = p->srcHost;
  c->srcDevice = p->srcDevice;
  c->srcPitch = p->srcPitch;
  c->dstXInBytes = p->dstXInBytes;
  c->dstY = p->dstY;
  c->dstMemoryType = p->dstMemoryType;
  c->dstHost = p->dstHost;
  c->dstDevice = p->dstDevice;
  c->dstPitch = p->dstPitch;
  c->WidthInBytes = p->WidthInBytes;
  c->Height = p->Height;
  c->Depth = 1;
}

FC_API CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *c) { FC_GUARD(copy3d_sync(c)); }
FC_API CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *c, CUstream st) { FC_GUARD(copy3d_submit(st, 0, c)); }

FC_API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D c;
  copy2d_to_3d(&c, p);
  FC_GUARD(copy3d_sync(&c));
}

FC_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream st) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D c;
  copy2d_to_3d(&c, p);
  FC_GUARD(copy3d_submit(st, 0, &c));
}

FC_API CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { FC_GUARD(sync_set(d, v, 1, n)); }
FC_API CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) { FC_GUARD(sync_set(d, v, 2, n)); }
FC_API CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) { FC_GUARD(sync_set(d, v, 4, n)); }
FC_API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
  FC_GUARD(fc_memset_submit(s, 0, d, v, 1, n));
}
FC_API CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) {
  FC_GUARD(fc_memset_submit(s, 0, d, v, 2, n));
}
FC_API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) {
  FC_GUARD(fc_memset_submit(s, 0, d, v, 4, n));
}
FC_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
  FC_GUARD(fc_memset_submit(s, 1, d, v, 1, n));
}
FC_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream s) {
  FC_GUARD(fc_memset_submit(s, 1, d, v, 4, n));
}
