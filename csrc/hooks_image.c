/* Image and launch hooks: record what the driver loads (registry.c), then pass through. */
#include "internal.h"

#define ON_LOAD(r, handle, kind, image, from_file) \
  if ((r) == CUDA_SUCCESS) fdy_registry_on_load((uint64_t)(uintptr_t)(handle), kind, image, from_file)

CUresult cuModuleLoad(CUmodule *module, const char *fname) {
  ENSURE_DRIVER();
  CUresult r = fdy_drv.cuModuleLoad(module, fname);
  ON_LOAD(r, *module, FDY_IMG_MODULE, fname, 1);
  return r;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  ENSURE_DRIVER();
  CUresult r = fdy_drv.cuModuleLoadData(module, image);
  ON_LOAD(r, *module, FDY_IMG_MODULE, image, 0);
  return r;
}

CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions, CUjit_option *options,
                            void **optionValues) {
  ENSURE_DRIVER();
  CUresult r = fdy_drv.cuModuleLoadDataEx(module, image, numOptions, options, optionValues);
  ON_LOAD(r, *module, FDY_IMG_MODULE, image, 0);
  return r;
}

CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin) {
  ENSURE_DRIVER();
  CUresult r = fdy_drv.cuModuleLoadFatBinary(module, fatCubin);
  ON_LOAD(r, *module, FDY_IMG_MODULE, fatCubin, 0);
  return r;
}

CUresult cuModuleUnload(CUmodule hmod) {
  ENSURE_DRIVER();
  CUresult r = fdy_drv.cuModuleUnload(hmod);
  if (r == CUDA_SUCCESS) fdy_registry_on_unload((uint64_t)(uintptr_t)hmod, FDY_IMG_MODULE);
  return r;
}

CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions, void **jitOptionsValues,
                           unsigned int numJitOptions, CUlibraryOption *libraryOptions, void **libraryOptionValues,
                           unsigned int numLibraryOptions) {
  ENSURE_DRIVER();
  CUresult r = fdy_drv.cuLibraryLoadData(library, code, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                                         libraryOptionValues, numLibraryOptions);
  ON_LOAD(r, *library, FDY_IMG_LIBRARY, code, 0);
  return r;
}

CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
                               void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions,
                               void **libraryOptionValues, unsigned int numLibraryOptions) {
  ENSURE_DRIVER();
  CUresult r = fdy_drv.cuLibraryLoadFromFile(library, fileName, jitOptions, jitOptionsValues, numJitOptions,
                                             libraryOptions, libraryOptionValues, numLibraryOptions);
  ON_LOAD(r, *library, FDY_IMG_LIBRARY, fileName, 1);
  return r;
}

CUresult cuLibraryUnload(CUlibrary library) {
  ENSURE_DRIVER();
  CUresult r = fdy_drv.cuLibraryUnload(library);
  if (r == CUDA_SUCCESS) fdy_registry_on_unload((uint64_t)(uintptr_t)library, FDY_IMG_LIBRARY);
  return r;
}

CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
  ENSURE_DRIVER();
  CUresult r = fdy_drv.cuLibraryGetKernel(pKernel, library, name);
  if (r == CUDA_SUCCESS) fdy_registry_note_kernel(*pKernel, library);
  return r;
}

/* Launch tracing costs one relaxed load per launch when off. */
#define TRACE(f) \
  if (__atomic_load_n(&fdy_trace_launches, __ATOMIC_RELAXED)) fdy_registry_note_launch(f)

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params, void **extra) {
  ENSURE_DRIVER();
  TRACE(f);
  return fdy_drv.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                             unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params,
                             void **extra) {
  ENSURE_DRIVER();
  TRACE(f);
  return fdy_drv.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
  ENSURE_DRIVER();
  TRACE(f);
  return fdy_drv.cuLaunchKernelEx(config, f, params, extra);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
  ENSURE_DRIVER();
  TRACE(f);
  return fdy_drv.cuLaunchKernelEx_ptsz(config, f, params, extra);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                   unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params) {
  ENSURE_DRIVER();
  TRACE(f);
  return fdy_drv.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                        CUstream s, void **params) {
  ENSURE_DRIVER();
  TRACE(f);
  return fdy_drv.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, s, params);
}
