/* The real driver: glibc's dlsym, libcuda.so.1, and the entry points Foundry calls itself. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

fdy_driver_t fdy_drv;
void *(*fdy_real_dlsym)(void *, const char *);

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static int driver_status = FDY_ERR_NO_DRIVER;
static void *driver_handle;

/* Resolves glibc's dlsym. Runs as our constructor, and also from our dlsym when that is called before
 * the constructor: libraries initialised earlier (our dependencies such as libc/libstdc++, and the
 * ASan runtime, which looks up every function it intercepts) may call dlsym first, and must get glibc's
 * answer, not NULL. In a sanitized build this may run before the sanitizer runtime is initialised, so
 * it is not instrumented (tests/cpu/test_native_sanitized.py). */
__attribute__((no_sanitize("address", "undefined"))) void fdy_resolve_real_dlsym(void) {
  if (__atomic_load_n(&fdy_real_dlsym, __ATOMIC_ACQUIRE)) return;
  void *(*real)(void *, const char *) = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!real) real = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  __atomic_store_n(&fdy_real_dlsym, real, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void resolve_real_dlsym(void) { fdy_resolve_real_dlsym(); }

typedef struct {
  const char *name;
  void **slot;
} slot_entry;

static const slot_entry slots[] = {
#define FDY_SLOT(name) {#name, (void **)&fdy_drv.name},
    FDY_DRIVER_CALLS(FDY_SLOT)
#undef FDY_SLOT
    {"cuMemAllocAsync", (void **)&fdy_drv.cuMemAllocAsync},
    {"cuMemAllocAsync_ptsz", (void **)&fdy_drv.cuMemAllocAsync_ptsz},
    {"cuMemAllocFromPoolAsync", (void **)&fdy_drv.cuMemAllocFromPoolAsync},
    {"cuMemAllocFromPoolAsync_ptsz", (void **)&fdy_drv.cuMemAllocFromPoolAsync_ptsz},
    {"cuMemFreeAsync", (void **)&fdy_drv.cuMemFreeAsync},
    {"cuMemFreeAsync_ptsz", (void **)&fdy_drv.cuMemFreeAsync_ptsz},
    {"cuLaunchKernel", (void **)&fdy_drv.cuLaunchKernel},
    {"cuLaunchKernel_ptsz", (void **)&fdy_drv.cuLaunchKernel_ptsz},
    {"cuLaunchKernelEx", (void **)&fdy_drv.cuLaunchKernelEx},
    {"cuLaunchKernelEx_ptsz", (void **)&fdy_drv.cuLaunchKernelEx_ptsz},
    {"cuLaunchCooperativeKernel", (void **)&fdy_drv.cuLaunchCooperativeKernel},
    {"cuLaunchCooperativeKernel_ptsz", (void **)&fdy_drv.cuLaunchCooperativeKernel_ptsz},
    {"cuGraphLaunch_ptsz", (void **)&fdy_drv.cuGraphLaunch_ptsz},
    {"cuGetProcAddress", (void **)&fdy_drv.cuGetProcAddress_v1},
    {"cuGetProcAddress_v2", (void **)&fdy_drv.cuGetProcAddress_v2},
};

void fdy_driver_note(const char *symbol, void *real) {
  if (!real) return;
  for (size_t i = 0; i < sizeof(slots) / sizeof(slots[0]); i++) {
    if (strcmp(slots[i].name, symbol) == 0) {
      void *expected = NULL;
      /* Slots are written once; concurrent writers agree on the value. */
      __atomic_compare_exchange_n(slots[i].slot, &expected, real, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
      return;
    }
  }
}

static void load_driver(void) {
  fdy_resolve_real_dlsym();
  if (!fdy_real_dlsym) {
    driver_status = fdy_fail(FDY_ERR_NO_DRIVER, "glibc's dlsym could not be found (dlvsym GLIBC_2.34/2.2.5)");
    return;
  }
  driver_handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!driver_handle) {
    const char *why = dlerror();
    driver_status = fdy_fail(FDY_ERR_NO_DRIVER,
                             "cannot load the CUDA driver libcuda.so.1 (%s). Is an NVIDIA driver installed and "
                             "on the library path?",
                             why ? why : "unknown reason");
    return;
  }
  for (size_t i = 0; i < sizeof(slots) / sizeof(slots[0]); i++) {
    void *p = fdy_real_dlsym(driver_handle, slots[i].name);
    if (p) __atomic_store_n(slots[i].slot, p, __ATOMIC_RELEASE);
  }
  /* The entry points without which nothing works; the rest are checked where used. */
  if (!fdy_drv.cuGetProcAddress_v2 || !fdy_drv.cuMemCreate || !fdy_drv.cuMemMap || !fdy_drv.cuCtxGetDevice) {
    driver_status = fdy_fail(FDY_ERR_NO_DRIVER,
                             "libcuda.so.1 lacks cuGetProcAddress_v2 or the virtual memory API: a driver for CUDA "
                             "12.0 or newer is required");
    return;
  }
  driver_status = 0;
}

int fdy_driver_ensure(void) {
  pthread_once(&driver_once, load_driver);
  return driver_status;
}

FDY_EXPORT int fdy_driver_open(void) { return fdy_driver_ensure(); }

FDY_EXPORT void *fdy_driver_symbol(const char *name) {
  if (fdy_driver_ensure() != 0 || !name) return NULL;
  return fdy_real_dlsym(driver_handle, name);
}

FDY_EXPORT int fdy_abi_version(void) { return FDY_ABI_VERSION; }

uint32_t fdy_gettid(void) { return (uint32_t)syscall(SYS_gettid); }
