/* Each kernel's parameter list as the driver reports it (cuFuncGetParamInfo), asked once per CUfunction.
 *
 * Why it is kept here, apart from the nodes: a kernel node hands the driver its arguments as kernelParams, one
 * pointer per parameter, and the driver reads as many parameters, each of the size, as the kernel itself
 * takes, whatever the array holds: a record with a parameter too few makes it read past the array (a crash,
 * or the bytes of whatever lies there). SAVE records the list the driver reported (codec_extract.c); LOAD
 * proves each node's table is that list before the driver sees the node (codec_params.c). The list belongs to
 * the function, not to the node, and LOAD rebuilds ~60k nodes at ~1.5 us each: asking the driver per node
 * would cost a call per parameter per node, so the list is asked once per function, kept for the process,
 * and a node's check is one comparison of its table with it.
 *
 * A list, once made, is never freed (it is a few bytes per kernel, and builders on other threads may hold
 * it); when a module or library is unloaded the lists are forgotten, because the driver may hand the same
 * CUfunction handle to another kernel later. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static fdy_map lists; /* CUfunction -> fdy_kparams * */

static CUresult param_info(CUfunction f, uint32_t i, size_t *off, size_t *size) {
  if (!fdy_drv.cuFuncGetParamInfo) return CUDA_ERROR_NOT_SUPPORTED; /* a driver older than CUDA 12.4 */
  CUresult r = fdy_drv.cuFuncGetParamInfo(f, i, off, size);
  /* A library's CUkernel may stand where a CUfunction does (the driver launches either). */
  if (r == CUDA_ERROR_INVALID_HANDLE && fdy_drv.cuKernelGetParamInfo)
    r = fdy_drv.cuKernelGetParamInfo((CUkernel)f, i, off, size);
  return r;
}

/* The list of f asked of the driver: 0, or FDY_ERR_NO_PARAM_INFO (*cause, *index: the call the driver refused),
 * FDY_ERR_UNSUPPORTED (a list a graph record cannot hold) or FDY_ERR_INVALID (out of host memory). */
static int query(CUfunction f, fdy_kparams **out, CUresult *cause, uint32_t *index) {
  size_t cap = 8;
  fdy_kparams *l = malloc(sizeof(*l) + cap * sizeof(rec_param));
  if (!l) return FDY_ERR_INVALID;
  l->count = l->span = l->reach = 0;
  for (uint32_t i = 0;; i++) {
    size_t off = 0, size = 0;
    CUresult r = param_info(f, i, &off, &size);
    if (r == CUDA_ERROR_INVALID_VALUE) break; /* past the last parameter (at i == 0: a kernel without any) */
    if (r != CUDA_SUCCESS) {
      free(l);
      *cause = r;
      *index = i;
      return FDY_ERR_NO_PARAM_INFO;
    }
    if (i == UINT16_MAX || off > UINT32_MAX || size > UINT32_MAX || off + size > UINT32_MAX) {
      free(l);
      *cause = CUDA_SUCCESS;
      *index = i;
      return FDY_ERR_UNSUPPORTED;
    }
    if (l->count == cap) {
      cap *= 2;
      fdy_kparams *g = realloc(l, sizeof(*l) + cap * sizeof(rec_param));
      if (!g) {
        free(l);
        return FDY_ERR_INVALID;
      }
      l = g;
    }
    l->p[l->count++] = (rec_param){(uint32_t)off, (uint32_t)size};
    if (off + size > l->span) l->span = (uint32_t)(off + size);
    if (off + 1 > l->reach) l->reach = (uint32_t)(off + 1);
  }
  *out = l;
  return 0;
}

int fdy_kernel_params(CUfunction f, const fdy_kparams **out, CUresult *cause, uint32_t *index) {
  *cause = CUDA_SUCCESS;
  *index = 0;
  uint64_t v;
  pthread_mutex_lock(&lock);
  int known = fdy_map_get(&lists, (uint64_t)(uintptr_t)f, &v);
  pthread_mutex_unlock(&lock);
  if (known) {
    *out = (const fdy_kparams *)(uintptr_t)v;
    return 0;
  }
  /* Asked outside the lock: builders on other threads look their own kernels up meanwhile. Two threads asking
   * for one function at once both ask the driver; the first list kept is the one every caller gets. */
  fdy_kparams *l = NULL;
  int rc = query(f, &l, cause, index);
  if (rc) return rc;
  pthread_mutex_lock(&lock);
  if (fdy_map_get(&lists, (uint64_t)(uintptr_t)f, &v)) {
    free(l);
    l = (fdy_kparams *)(uintptr_t)v;
  } else {
    fdy_map_put(&lists, (uint64_t)(uintptr_t)f, (uint64_t)(uintptr_t)l); /* unkept (no memory): asked again */
  }
  pthread_mutex_unlock(&lock);
  *out = l;
  return 0;
}

void fdy_kernel_params_forget(void) {
  pthread_mutex_lock(&lock);
  fdy_map_free(&lists); /* the lists themselves stay: a builder may still hold one */
  pthread_mutex_unlock(&lock);
}
