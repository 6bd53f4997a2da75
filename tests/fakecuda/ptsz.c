/* fakecuda: per-thread-default-stream (_ptsz / _ptds) variants of copies and memsets.
 * In the fake the per-thread default stream is a separate stream object per thread, otherwise
 * identical to the legacy stream; synchronous (_ptds) copies behave like their legacy forms. */
#include "fakecuda.h"

#define DP(x) ((void *)(uintptr_t)(x))

FC_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *s, size_t n) { return cuMemcpyHtoD_v2(d, s, n); }
FC_API CUresult cuMemcpyDtoH_v2_ptds(void *d, CUdeviceptr s, size_t n) { return cuMemcpyDtoH_v2(d, s, n); }
FC_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { return cuMemcpyDtoD_v2(d, s, n); }
FC_API CUresult cuMemcpy_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { return cuMemcpy(d, s, n); }
FC_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) { return cuMemsetD8_v2(d, v, n); }
FC_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) { return cuMemsetD32_v2(d, v, n); }

FC_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream st) {
  FC_GUARD(fc_memcpy_submit(st, 1, DP(d), CU_MEMORYTYPE_DEVICE, s, CU_MEMORYTYPE_HOST, n));
}
FC_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *d, CUdeviceptr s, size_t n, CUstream st) {
  FC_GUARD(fc_memcpy_submit(st, 1, d, CU_MEMORYTYPE_HOST, DP(s), CU_MEMORYTYPE_DEVICE, n));
}
FC_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
  FC_GUARD(fc_memcpy_submit(st, 1, DP(d), CU_MEMORYTYPE_DEVICE, DP(s), CU_MEMORYTYPE_DEVICE, n));
}
FC_API CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream s) {
  FC_GUARD(fc_memset_submit(s, 1, d, v, 2, n));
}
