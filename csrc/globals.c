/* Module variables' addresses for SAVE, looked up in one call per load (an image's variables number in
 * the hundreds for GEMM libraries, and SAVE asks for each in every load a graph's kernels come from). */
#include "internal.h"

FDY_EXPORT int fdy_module_globals(uint64_t handle, int library, size_t count, const char *const *names,
                                  const uint8_t *managed, uint64_t *addresses, uint64_t *sizes, size_t *done) {
  if (!done) return fdy_fail(FDY_ERR_INVALID, "fdy_module_globals: no count out");
  *done = 0;
  if (count && (!names || !managed || !addresses || !sizes))
    return fdy_fail(FDY_ERR_INVALID, "fdy_module_globals: NULL array");
  if (fdy_driver_ensure() != 0) return FDY_ERR_NO_DRIVER;
  if (library ? !fdy_drv.cuLibraryGetGlobal : !fdy_drv.cuModuleGetGlobal_v2)
    return fdy_fail(FDY_ERR_NO_DRIVER, "the CUDA driver has no %s: a newer NVIDIA driver is needed",
                    library ? "cuLibraryGetGlobal" : "cuModuleGetGlobal_v2");
  for (size_t i = 0; i < count; i++) {
    if (!names[i]) return fdy_fail(FDY_ERR_INVALID, "fdy_module_globals: variable %zu has no name", i);
    CUdeviceptr address = 0;
    size_t size = 0;
    const char *call = library ? "cuLibraryGetGlobal" : "cuModuleGetGlobal_v2";
    CUresult r = library ? fdy_drv.cuLibraryGetGlobal(&address, &size, (CUlibrary)(uintptr_t)handle, names[i])
                         : fdy_drv.cuModuleGetGlobal_v2(&address, &size, (CUmodule)(uintptr_t)handle, names[i]);
    /* A managed variable of a library is known to cuLibraryGetManaged only, on some drivers. */
    if (r == CUDA_ERROR_NOT_FOUND && library && managed[i] && fdy_drv.cuLibraryGetManaged) {
      call = "cuLibraryGetManaged";
      r = fdy_drv.cuLibraryGetManaged(&address, &size, (CUlibrary)(uintptr_t)handle, names[i]);
    }
    if (r == CUDA_ERROR_NOT_FOUND) {
      address = 0; /* not in the code the driver loaded for this device: no kernel of this load reads it */
      size = 0;
    } else if (r != CUDA_SUCCESS) {
      return fdy_fail_cu(r, call, "module variable %s", names[i]);
    }
    addresses[i] = (uint64_t)address;
    sizes[i] = (uint64_t)size;
    *done = i + 1;
  }
  return 0;
}
