/* Memory hooks: each routes to the region (region.c) or passes through to the real driver.
 * Policy lives in region.c; these only translate the driver's calling conventions. */
#include "internal.h"

/* cudaMallocPitch rows are aligned to 512 bytes on every GPU Foundry targets; a fixed rule keeps
 * pitched allocations byte-deterministic across processes. */
#define FDY_PITCH_ALIGN 512

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  ENSURE_DRIVER();
  CUresult r;
  if (fdy_region_alloc(dptr, bytesize, FDY_EV_ALLOC, &r)) return r;
  return fdy_drv.cuMemAlloc_v2(dptr, bytesize);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes) {
  ENSURE_DRIVER();
  if (fdy_region_is_active() && pPitch && WidthInBytes && Height &&
      (ElementSizeBytes == 4 || ElementSizeBytes == 8 || ElementSizeBytes == 16)) {
    size_t pitch = (WidthInBytes + FDY_PITCH_ALIGN - 1) / FDY_PITCH_ALIGN * FDY_PITCH_ALIGN;
    CUresult r;
    if (fdy_region_alloc(dptr, pitch * Height, FDY_EV_ALLOC, &r)) {
      if (r == CUDA_SUCCESS) *pPitch = pitch;
      return r;
    }
  }
  return fdy_drv.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  ENSURE_DRIVER();
  CUresult r;
  if (fdy_region_free(dptr, FDY_EV_FREE, &r)) return r;
  return fdy_drv.cuMemFree_v2(dptr);
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
  ENSURE_DRIVER();
  CUresult r;
  if (fdy_region_address_range(dptr, pbase, psize, &r)) return r;
  return fdy_drv.cuMemGetAddressRange_v2(pbase, psize, dptr);
}

/* The allocation a pointer lies in, as the region placed it: the same answer as cuMemGetAddressRange's. A
 * custom all-reduce shares a buffer as (the handle of RANGE_START_ADDR, the pointer's offset from it), and
 * cuIpcGetMemHandle's handle covers that allocation (ipc.c); the driver would answer with the physical mapping
 * the pointer lies in, which the region shares between allocations. Memory LOAD restored (a saved graph's
 * buffers, which no allocation of this process holds) answers with the physical allocation the restore mapped
 * there, the range ipc.c's handle covers, rather than whatever range the driver reports for a mapping. */
CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  ENSURE_DRIVER();
  if (data && (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR || attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE)) {
    CUdeviceptr base;
    size_t size;
    CUresult r;
    if ((fdy_region_address_range(ptr, &base, &size, &r) && r == CUDA_SUCCESS) ||
        fdy_region_unit_range(ptr, 1, &base, &size)) {
      if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) *(CUdeviceptr *)data = base;
      else *(size_t *)data = size;
      return CUDA_SUCCESS;
    }
  }
  return fdy_drv.cuPointerGetAttribute(data, attribute, ptr);
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
  ENSURE_DRIVER();
  CUresult r;
  if (fdy_region_refuse(bytesize,
                        "managed memory (cuMemAllocManaged) cannot be placed in the region; allocate it before "
                        "set_allocation_region() or after stop_allocation_region()",
                        &r))
    return r;
  return fdy_drv.cuMemAllocManaged(dptr, bytesize, flags);
}

/* Stream-ordered allocations are served synchronously from the region: memory that is ready at once
 * satisfies any stream order. During capture they would become memory nodes, which cannot be
 * persisted, so they are refused there. */
static int async_alloc(CUdeviceptr *dptr, size_t size, CUstream stream, CUresult *r) {
  if (!fdy_region_is_active()) return 0;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (fdy_drv.cuStreamIsCapturing && fdy_drv.cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS &&
      status != CU_STREAM_CAPTURE_STATUS_NONE)
    return fdy_region_refuse(size,
                             "a stream-ordered allocation during graph capture would become a memory-allocation "
                             "node, which Foundry cannot persist; use PyTorch's default caching allocator "
                             "(unset PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync)",
                             r);
  return fdy_region_alloc(dptr, size, FDY_EV_ASYNC_ALLOC, r);
}

static int async_free(CUdeviceptr dptr, CUstream stream, CUresult *r) {
  if (!fdy_region_contains(dptr)) return 0;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (fdy_drv.cuStreamIsCapturing && fdy_drv.cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS &&
      status != CU_STREAM_CAPTURE_STATUS_NONE) {
    *r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    fdy_fail(FDY_ERR_UNSUPPORTED,
             "cuMemFreeAsync(0x%llx) during graph capture would become a memory-free node, which Foundry "
             "cannot persist",
             (unsigned long long)dptr);
    return 1;
  }
  /* No stream synchronization here: fdy_region_free synchronizes the context before it unmaps, and
   * memory it does not unmap (the preallocation) stays valid for work still queued on the stream. */
  return fdy_region_free(dptr, FDY_EV_ASYNC_FREE, r);
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
  ENSURE_DRIVER();
  CUresult r;
  if (async_alloc(dptr, bytesize, hStream, &r)) return r;
  return fdy_drv.cuMemAllocAsync(dptr, bytesize, hStream);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
  ENSURE_DRIVER();
  CUresult r;
  if (async_alloc(dptr, bytesize, hStream ? hStream : CU_STREAM_PER_THREAD, &r)) return r;
  return fdy_drv.cuMemAllocAsync_ptsz(dptr, bytesize, hStream);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  ENSURE_DRIVER();
  CUresult r;
  if (async_alloc(dptr, bytesize, hStream, &r)) return r;
  return fdy_drv.cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  ENSURE_DRIVER();
  CUresult r;
  if (async_alloc(dptr, bytesize, hStream ? hStream : CU_STREAM_PER_THREAD, &r)) return r;
  return fdy_drv.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  ENSURE_DRIVER();
  CUresult r;
  if (async_free(dptr, hStream, &r)) return r;
  return fdy_drv.cuMemFreeAsync(dptr, hStream);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  ENSURE_DRIVER();
  CUresult r;
  if (async_free(dptr, hStream ? hStream : CU_STREAM_PER_THREAD, &r)) return r;
  return fdy_drv.cuMemFreeAsync_ptsz(dptr, hStream);
}

/* Virtual memory management, as PyTorch's expandable segments use it: reservations are carved from
 * the region; mappings into them are only noted, so that LOAD knows what was live. */
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  ENSURE_DRIVER();
  CUresult r;
  if (fdy_region_vmm_reserve(ptr, size, alignment, addr, &r)) return r;
  return fdy_drv.cuMemAddressReserve(ptr, size, alignment, addr, flags);
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  ENSURE_DRIVER();
  CUresult r;
  if (fdy_region_vmm_free(ptr, size, &r)) return r;
  return fdy_drv.cuMemAddressFree(ptr, size);
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  ENSURE_DRIVER();
  if (fdy_region_contains(ptr)) fdy_region_note_map(ptr, size, -1); /* yield restored pages first */
  CUresult r = fdy_drv.cuMemMap(ptr, size, offset, handle, flags);
  if (r == CUDA_SUCCESS && fdy_region_contains(ptr)) fdy_region_note_map(ptr, size, 1);
  if (r == CUDA_SUCCESS) fdy_imports_note_map(ptr, size, handle);
  return r;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  ENSURE_DRIVER();
  CUresult r = fdy_drv.cuMemUnmap(ptr, size);
  if (r == CUDA_SUCCESS && fdy_region_contains(ptr)) fdy_region_note_map(ptr, size, 0);
  if (r == CUDA_SUCCESS) fdy_imports_note_unmap(ptr, size);
  return r;
}

/* Memory of another process: listed while open, for SAVE to record or refuse (imports.c). */
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                        CUmemAllocationHandleType shHandleType) {
  ENSURE_DRIVER();
  CUresult r = fdy_drv.cuMemImportFromShareableHandle(handle, osHandle, shHandleType);
  if (r == CUDA_SUCCESS && handle) fdy_imports_note_import(*handle, (uint32_t)shHandleType);
  return r;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  ENSURE_DRIVER();
  CUresult r = fdy_drv.cuMemRelease(handle);
  if (r == CUDA_SUCCESS) fdy_imports_note_release(handle);
  return r;
}

/* cuIpcGetMemHandle, cuIpcOpenMemHandle and cuIpcCloseMemHandle: ipc.c (region memory has handles of its own). */
