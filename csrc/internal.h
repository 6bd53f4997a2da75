/* Declarations shared by libfoundry's translation units. Not part of the ABI. */
#ifndef FOUNDRY_INTERNAL_H
#define FOUNDRY_INTERNAL_H

/* Driver prototypes get default visibility: the hooks that define them are the exported interposer
 * symbols; everything else in the library stays hidden. */
#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop
#include <pthread.h>
#include <stdint.h>
#include <stddef.h>

#include "foundry.h"

/* The _ptsz and 4-argument variants are declared by cuda.h only in some compilation modes;
 * declare the ones we define or call so that every translation unit agrees on their types. */
typedef __typeof__(cuMemAllocAsync) fdy_cuMemAllocAsync_t;
typedef __typeof__(cuMemAllocFromPoolAsync) fdy_cuMemAllocFromPoolAsync_t;
typedef __typeof__(cuMemFreeAsync) fdy_cuMemFreeAsync_t;
typedef __typeof__(cuLaunchKernel) fdy_cuLaunchKernel_t;
typedef __typeof__(cuLaunchKernelEx) fdy_cuLaunchKernelEx_t;
typedef __typeof__(cuLaunchCooperativeKernel) fdy_cuLaunchCooperativeKernel_t;
typedef __typeof__(cuGraphLaunch) fdy_cuGraphLaunch_t;
typedef CUresult fdy_cuGetProcAddress_v1_t(const char *, void **, int, cuuint64_t);
typedef __typeof__(cuGetProcAddress_v2) fdy_cuGetProcAddress_v2_t;
#pragma GCC visibility push(default)
fdy_cuMemAllocAsync_t cuMemAllocAsync_ptsz;
fdy_cuMemAllocFromPoolAsync_t cuMemAllocFromPoolAsync_ptsz;
fdy_cuMemFreeAsync_t cuMemFreeAsync_ptsz;
fdy_cuLaunchKernel_t cuLaunchKernel_ptsz;
fdy_cuLaunchKernelEx_t cuLaunchKernelEx_ptsz;
fdy_cuLaunchCooperativeKernel_t cuLaunchCooperativeKernel_ptsz;
fdy_cuGraphLaunch_t cuGraphLaunch_ptsz;
#pragma GCC visibility pop

/* ---------------------------------------------------------------- the real driver
 * Every driver entry point Foundry itself calls, resolved by exported symbol name from the real
 * libcuda.so.1. Hooked entry points have their real pointer here too (same name). */
#define FDY_DRIVER_CALLS(X)                                                                    \
  X(cuGetErrorName) X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize)                  \
  X(cuMemGetAllocationGranularity) X(cuMemCreate) X(cuMemRelease) X(cuMemSetAccess)           \
  X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap)                        \
  X(cuMemAlloc_v2) X(cuMemAllocPitch_v2) X(cuMemFree_v2) X(cuMemGetAddressRange_v2)           \
  X(cuMemGetInfo_v2)                                                                         \
  X(cuMemAllocManaged) X(cuStreamIsCapturing) X(cuIpcOpenMemHandle_v2) X(cuIpcCloseMemHandle)   \
  X(cuMemImportFromShareableHandle) X(cuMemGetAllocationPropertiesFromHandle)                \
  X(cuIpcGetMemHandle) X(cuMemRetainAllocationHandle) X(cuMemExportToShareableHandle)         \
  X(cuPointerGetAttribute)                                                                   \
  X(cuModuleLoad) X(cuModuleLoadData) X(cuModuleLoadDataEx) X(cuModuleLoadFatBinary)          \
  X(cuModuleUnload) X(cuModuleGetFunction) X(cuModuleGetFunctionCount)                        \
  X(cuModuleEnumerateFunctions) X(cuLibraryLoadData) X(cuLibraryLoadFromFile)                 \
  X(cuLibraryUnload) X(cuLibraryGetKernel) X(cuLibraryGetKernelCount)                         \
  X(cuLibraryEnumerateKernels) X(cuKernelGetFunction) X(cuKernelGetName)                      \
  X(cuFuncGetName) X(cuFuncGetModule) X(cuFuncGetParamInfo) X(cuKernelGetParamInfo)          \
  X(cuFuncGetAttribute)                                                                      \
  X(cuFuncSetAttribute) X(cuEventCreate) X(cuEventDestroy_v2)                                 \
  X(cuGraphCreate) X(cuGraphDestroy) X(cuGraphGetNodes) X(cuGraphGetEdges_v2)                 \
  X(cuGraphNodeGetType) X(cuGraphKernelNodeGetParams_v2) X(cuGraphKernelNodeGetAttribute)     \
  X(cuGraphKernelNodeSetAttribute) X(cuGraphMemsetNodeGetParams) X(cuGraphMemcpyNodeGetParams) \
  X(cuGraphChildGraphNodeGetGraph) X(cuGraphEventRecordNodeGetEvent)                          \
  X(cuGraphEventWaitNodeGetEvent) X(cuGraphAddKernelNode_v2) X(cuGraphAddMemsetNode)          \
  X(cuGraphAddMemcpyNode) X(cuGraphAddEmptyNode) X(cuGraphAddEventRecordNode)                 \
  X(cuGraphAddEventWaitNode) X(cuGraphAddChildGraphNode) X(cuGraphAddDependencies_v2)         \
  X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphExecDestroy)                      \
  X(cuGraphKernelNodeSetParams_v2) X(cuGraphExecKernelNodeSetParams_v2)                       \
  X(cuGraphMemsetNodeSetParams) X(cuGraphMemcpyNodeSetParams)                                 \
  X(cuGraphExecMemsetNodeSetParams) X(cuGraphExecMemcpyNodeSetParams) X(cuGraphNodeSetEnabled)     \
  X(cuMemcpyDtoH_v2) X(cuMemcpyDtoHAsync_v2) X(cuMemcpyBatchAsync_v2) X(cuMemHostAlloc) X(cuMemFreeHost)  \
  X(cuStreamCreate) X(cuStreamSynchronize) X(cuStreamWaitEvent) X(cuEventRecord) X(cuStreamDestroy_v2)     \
  X(cuGraphUpload) X(cuLibraryGetGlobal) X(cuLibraryGetManaged) X(cuModuleGetGlobal_v2)         \
  X(cuThreadExchangeStreamCaptureMode)

typedef struct {
#define FDY_DECLARE_REAL(name) __typeof__(name) *name;
  FDY_DRIVER_CALLS(FDY_DECLARE_REAL)
#undef FDY_DECLARE_REAL
  /* variants whose prototypes cuda.h hides in this compilation mode */
  fdy_cuMemAllocAsync_t *cuMemAllocAsync, *cuMemAllocAsync_ptsz;
  fdy_cuMemAllocFromPoolAsync_t *cuMemAllocFromPoolAsync, *cuMemAllocFromPoolAsync_ptsz;
  fdy_cuMemFreeAsync_t *cuMemFreeAsync, *cuMemFreeAsync_ptsz;
  fdy_cuLaunchKernel_t *cuLaunchKernel, *cuLaunchKernel_ptsz;
  fdy_cuLaunchKernelEx_t *cuLaunchKernelEx, *cuLaunchKernelEx_ptsz;
  fdy_cuLaunchCooperativeKernel_t *cuLaunchCooperativeKernel, *cuLaunchCooperativeKernel_ptsz;
  fdy_cuGraphLaunch_t *cuGraphLaunch_ptsz;
  fdy_cuGetProcAddress_v1_t *cuGetProcAddress_v1; /* the 4-argument "cuGetProcAddress" */
  fdy_cuGetProcAddress_v2_t *cuGetProcAddress_v2;
} fdy_driver_t;

extern fdy_driver_t fdy_drv;
/* Loads the real driver once; returns 0 or FDY_ERR_NO_DRIVER (message set). Cheap after the first
 * call. Every hook calls it first, because a hook can be reached before anyone asked us to load. */
int fdy_driver_ensure(void);
/* A hook's first line: without the real driver it can only answer CUDA_ERROR_NOT_INITIALIZED. */
#define ENSURE_DRIVER()                                              \
  do {                                                               \
    if (fdy_driver_ensure() != 0) return CUDA_ERROR_NOT_INITIALIZED; \
  } while (0)
/* The real dlsym (glibc's), resolved by the library constructor. */
extern void *(*fdy_real_dlsym)(void *, const char *);
/* Resolves fdy_real_dlsym (idempotent); the interposer calls it when dlsym is reached before the constructor. */
void fdy_resolve_real_dlsym(void);
/* Fills the pointer slot of a symbol Foundry knows (hooked or called) if it is still empty. */
void fdy_driver_note(const char *symbol, void *real);

/* ---------------------------------------------------------------- errors */
/* Formats a message, stores it for this thread and in the process-wide log, returns code. */
int fdy_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Like fdy_fail for a failed driver call: appends the CUresult name. */
int fdy_fail_cu(CUresult r, const char *call, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
const char *fdy_cu_name(CUresult r);

/* ---------------------------------------------------------------- kernels' shared-memory limit (codec_params.c) */
/* The one rule for a kernel's dynamic shared-memory limit at LOAD (record.h says why): only ever raised, by one
 * thread at a time. Raises the limit of f to need where it is lower; 1 when it raised it, else 0 (*now: the
 * limit it found, -1 where the driver would not say). */
int fdy_raise_smem_limit(CUfunction f, unsigned need, int *now);

/* ---------------------------------------------------------------- region (region.c) */
/* 1 if ptr lies in the reserved region (active or stopped). */
int fdy_region_contains(CUdeviceptr ptr);
/* Hook entry points: return 1 and set *res when the region handled the call, 0 to pass through. */
int fdy_region_alloc(CUdeviceptr *dptr, size_t size, uint32_t kind, CUresult *res);
int fdy_region_free(CUdeviceptr ptr, uint32_t kind, CUresult *res);
int fdy_region_address_range(CUdeviceptr ptr, CUdeviceptr *pbase, size_t *psize, CUresult *res);
/* 1 if ptr lies in a physical allocation the region mapped (with restored_only, one LOAD's restore mapped, which no
 * allocation of this process holds): that allocation's range, the one cuIpcGetMemHandle's handle covers (ipc.c). */
int fdy_region_unit_range(CUdeviceptr ptr, int restored_only, CUdeviceptr *pbase, size_t *psize);
int fdy_region_vmm_reserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr, CUresult *res);
int fdy_region_vmm_free(CUdeviceptr ptr, size_t size, CUresult *res);
void fdy_region_note_map(CUdeviceptr ptr, size_t size, int mapped);
/* 1 if [ptr, ptr+size) lies inside one reservation carved from the region (cuMemAddressReserve while active). */
int fdy_region_in_reservation(CUdeviceptr ptr, size_t size);
/* imports.c: memory of other processes open here (see fdy_imports_live) */
void fdy_imports_note_ipc(CUdeviceptr dptr, int delta);
void fdy_imports_note_import(CUmemGenericAllocationHandle h, uint32_t handle_type);
void fdy_imports_note_release(CUmemGenericAllocationHandle h);
void fdy_imports_note_map(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle h);
void fdy_imports_note_unmap(CUdeviceptr ptr, size_t size);
/* Region refuses an allocation it cannot place while active (managed memory, capture, ...). */
int fdy_region_refuse(size_t size, const char *what, CUresult *res);
int fdy_region_is_active(void);

/* ---------------------------------------------------------------- registry (registry.c) */
void fdy_registry_on_load(uint64_t handle, uint32_t kind, const void *image, int from_file);
void fdy_registry_on_unload(uint64_t handle, uint32_t kind);
void fdy_registry_note_kernel(CUkernel kernel, CUlibrary lib);
void fdy_registry_note_launch(CUfunction f);
extern volatile int fdy_trace_launches;

/* ---------------------------------------------------------------- kernel parameter lists (kernel_params.c) */
/* A kernel's parameters as the driver reports them (cuFuncGetParamInfo), in ordinal order. */
typedef struct {
  uint32_t count;
  uint32_t span;   /* the end of the last byte any parameter occupies (max offset + size), 0 without any */
  uint32_t reach;  /* the shortest `extra` buffer LOAD hands over: one byte into the parameter placed last
                    * (max offset + 1), 0 without any (codec_params.c says why) */
  rec_param p[];   /* count entries: offset and size, the layout a kernel node record's table has */
} fdy_kparams;
/* The parameter list of f, asked of the driver once per function and kept for the life of the process (the
 * pointer stays valid). Returns 0, or sets no message and returns FDY_ERR_NO_PARAM_INFO (the driver refused:
 * *cause its CUresult, CUDA_ERROR_NOT_SUPPORTED without cuFuncGetParamInfo, *index the parameter asked),
 * FDY_ERR_UNSUPPORTED (more parameters, or larger, than a graph record holds) or FDY_ERR_INVALID (no memory). */
int fdy_kernel_params(CUfunction f, const fdy_kparams **out, CUresult *cause, uint32_t *index);
/* Forgets every list kept: a module or library was unloaded, and the driver may reuse its functions' handles. */
void fdy_kernel_params_forget(void);

/* ---------------------------------------------------------------- images (image.c) */
/* Finds the real image behind a pointer handed to the driver (unwrapping a fatbin wrapper) and its
 * size from its own headers. Returns 0 or FDY_ERR_UNSUPPORTED when the format is unknown. */
int fdy_image_probe(const void *p, const void **data, uint64_t *size, uint32_t *format);

/* ---------------------------------------------------------------- small containers */
/* Open-addressing map from non-zero 64-bit keys to 64-bit values. */
typedef struct {
  uint64_t *keys, *vals;
  size_t cap, len;
} fdy_map;
int fdy_map_put(fdy_map *m, uint64_t key, uint64_t val);
int fdy_map_get(const fdy_map *m, uint64_t key, uint64_t *val);
void fdy_map_del(fdy_map *m, uint64_t key);
void fdy_map_free(fdy_map *m);

/* Growable byte buffer. */
typedef struct {
  uint8_t *data;
  size_t len, cap;
  int oom;
} fdy_buf;
size_t fdy_buf_reserve(fdy_buf *b, size_t n); /* returns offset of n zeroed bytes */
void fdy_buf_put(fdy_buf *b, const void *src, size_t n);
void fdy_buf_align8(fdy_buf *b);

uint32_t fdy_gettid(void);

#endif
