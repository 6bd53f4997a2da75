/* The kernel-image registry: every module and library the process loads, and the way back from a
 * CUfunction to (image, mangled entry name).
 *
 * Recording is cheap because PyTorch registers hundreds of fatbins at start-up: images that live in a
 * loaded shared object are kept as a pointer (valid for the life of the process); images from JIT
 * buffers (Triton, NVRTC, cupy) and files are copied at load time, since their buffers may be freed.
 * Hashing happens at SAVE (Python), and only for images the saved graphs use. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct {
  uint64_t handle;
  const void *data;
  uint64_t size;
  uint32_t kind, format, owned, loaded, restored;
  char hash[68];
} image_t;

typedef struct {
  size_t image;
  char *name;
} resolved_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static image_t *images;
static size_t nimages, capimages;
static fdy_map modules, libraries; /* handle -> image index + 1 */
static fdy_map kernel_lib;         /* CUkernel -> CUlibrary, from cuLibraryGetKernel */
static fdy_map func_cache;         /* CUfunction -> resolved index + 1 */
static resolved_t *resolved;
static size_t nresolved, capresolved;
static fdy_map launched;           /* set of CUfunctions launched while tracing */
volatile int fdy_trace_launches;

static void *read_file(const char *path, uint64_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  void *buf = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long n = ftell(f);
    if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
      if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
      } else {
        ((char *)buf)[n] = 0; /* PTX files carry no NUL of their own */
        *size = (uint64_t)n;
      }
    }
  }
  fclose(f);
  return buf;
}

static size_t add_image(image_t img) {
  if (nimages == capimages) {
    size_t cap = capimages ? capimages * 2 : 256;
    image_t *p = realloc(images, cap * sizeof(*p));
    if (!p) return SIZE_MAX;
    images = p;
    capimages = cap;
  }
  images[nimages] = img;
  fdy_map_put(img.kind == FDY_IMG_MODULE ? &modules : &libraries, img.handle, nimages + 1);
  return nimages++;
}

void fdy_registry_on_load(uint64_t handle, uint32_t kind, const void *image, int from_file) {
  image_t img = {.handle = handle, .kind = kind, .loaded = 1};
  if (from_file) {
    uint64_t file_size = 0;
    void *buf = read_file((const char *)image, &file_size);
    const void *data;
    if (buf && fdy_image_probe(buf, &data, &img.size, &img.format) == 0 && data == buf && img.size <= file_size + 1) {
      img.data = buf;
      img.owned = 1;
    } else {
      free(buf);
      fdy_fail(FDY_ERR_UNSUPPORTED, "image file %s could not be recorded; graphs using its kernels cannot be saved",
               (const char *)image);
    }
  } else if (fdy_image_probe(image, &img.data, &img.size, &img.format) == 0) {
    Dl_info info;
    if (!dladdr(img.data, &info) || !info.dli_fname) {
      void *copy = malloc(img.size);
      if (copy) memcpy(copy, img.data, img.size);
      img.data = copy;
      img.owned = 1;
      if (!copy) img.size = 0;
    }
  }
  pthread_mutex_lock(&lock);
  add_image(img);
  pthread_mutex_unlock(&lock);
}

void fdy_registry_on_unload(uint64_t handle, uint32_t kind) {
  pthread_mutex_lock(&lock);
  fdy_map *m = kind == FDY_IMG_MODULE ? &modules : &libraries;
  uint64_t idx;
  if (fdy_map_get(m, handle, &idx)) {
    image_t *img = &images[idx - 1];
    img->loaded = 0;
    fdy_map_del(m, handle);
    /* Handles may be reused by the driver: forget functions resolved to this image. A value of 0 is
     * an entry an earlier unload already forgot; reading resolved[0 - 1] for it read out of bounds on
     * every later unload (AddressSanitizer, tests/cpu/test_native_sanitized.py). */
    for (size_t i = 0; i < func_cache.cap; i++)
      if (func_cache.keys && func_cache.keys[i] && func_cache.vals[i] &&
          resolved[func_cache.vals[i] - 1].image == idx - 1)
        func_cache.vals[i] = 0;
    /* Its CUkernels too: the driver may hand the same kernel handle to another library's kernel, and
     * the same library handle to another library, which would name the wrong image. A forgotten
     * entry (0) makes find_library_of search the loaded libraries instead. */
    if (kind == FDY_IMG_LIBRARY)
      for (size_t i = 0; i < kernel_lib.cap; i++)
        if (kernel_lib.keys && kernel_lib.keys[i] && kernel_lib.vals[i] == handle) kernel_lib.vals[i] = 0;
  }
  pthread_mutex_unlock(&lock);
  fdy_kernel_params_forget(); /* its functions' handles may name other kernels later */
}

void fdy_registry_note_kernel(CUkernel kernel, CUlibrary lib) {
  pthread_mutex_lock(&lock);
  fdy_map_put(&kernel_lib, (uint64_t)(uintptr_t)kernel, (uint64_t)(uintptr_t)lib);
  pthread_mutex_unlock(&lock);
}

void fdy_registry_note_launch(CUfunction f) {
  pthread_mutex_lock(&lock);
  fdy_map_put(&launched, (uint64_t)(uintptr_t)f, 1);
  pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------ queries */
FDY_EXPORT size_t fdy_registry_count(void) {
  pthread_mutex_lock(&lock);
  size_t n = nimages;
  pthread_mutex_unlock(&lock);
  return n;
}

FDY_EXPORT int fdy_registry_get(size_t index, fdy_image_info *out) {
  pthread_mutex_lock(&lock);
  if (index >= nimages || !out) {
    pthread_mutex_unlock(&lock);
    return fdy_fail(FDY_ERR_INVALID, "image index %zu out of range (%zu images recorded)", index, nimages);
  }
  image_t *img = &images[index];
  memset(out, 0, sizeof(*out));
  out->handle = img->handle;
  out->data = (uint64_t)(uintptr_t)img->data;
  out->size = img->size;
  out->kind = img->kind;
  out->format = img->format;
  out->owned = img->owned;
  out->loaded = img->loaded;
  out->restored = img->restored;
  memcpy(out->hash, img->hash, sizeof(out->hash));
  pthread_mutex_unlock(&lock);
  return 0;
}

static long find_library_of(CUfunction f, const char *name) {
  uint64_t lib;
  if (fdy_map_get(&kernel_lib, (uint64_t)(uintptr_t)f, &lib)) { /* f is itself a CUkernel */
    uint64_t idx;
    if (fdy_map_get(&libraries, lib, &idx)) return (long)idx - 1;
  }
  for (size_t i = nimages; i-- > 0;) {
    image_t *img = &images[i];
    if (img->kind != FDY_IMG_LIBRARY || !img->loaded) continue;
    CUkernel k;
    if (fdy_drv.cuLibraryGetKernel(&k, (CUlibrary)(uintptr_t)img->handle, name) != CUDA_SUCCESS) continue;
    CUfunction kf = NULL;
    if ((CUfunction)k == f || (fdy_drv.cuKernelGetFunction(&kf, k) == CUDA_SUCCESS && kf == f)) return (long)i;
  }
  return -1;
}

static int resolve_locked(CUfunction f, size_t *image_index, const char **name_out) {
  uint64_t cached;
  if (fdy_map_get(&func_cache, (uint64_t)(uintptr_t)f, &cached) && cached) {
    *image_index = resolved[cached - 1].image;
    *name_out = resolved[cached - 1].name;
    return 0;
  }
  const char *name = NULL;
  CUresult by_func = fdy_drv.cuFuncGetName(&name, f);
  if (by_func != CUDA_SUCCESS || !name) {
    name = NULL;
    CUresult by_kernel = fdy_drv.cuKernelGetName(&name, (CUkernel)f);
    if (by_kernel != CUDA_SUCCESS || !name) {
      /* An invalid handle is a function whose module or library was unloaded after capture (a kernel
       * passed through the `extra` buffer reaches this point without a parameter-info call first). */
      if (by_func == CUDA_ERROR_INVALID_HANDLE || by_kernel == CUDA_ERROR_INVALID_HANDLE)
        return fdy_fail(FDY_ERR_NOT_FOUND,
                        "a kernel node launches function %p, which is no longer loaded (cuFuncGetName returned "
                        "CUDA_ERROR_INVALID_HANDLE): its module or library was unloaded after capture. Nothing was "
                        "written. Next step: save graphs before unloading the modules and libraries their kernels "
                        "come from.",
                        (void *)f);
      return fdy_fail(FDY_ERR_NOT_FOUND, "function %p has no name the driver can report (cuFuncGetName: %s)",
                      (void *)f, fdy_cu_name(by_func));
    }
  }
  long idx = -1;
  CUmodule mod = NULL;
  uint64_t v;
  if (fdy_drv.cuFuncGetModule(&mod, f) == CUDA_SUCCESS && fdy_map_get(&modules, (uint64_t)(uintptr_t)mod, &v))
    idx = (long)v - 1;
  if (idx < 0) idx = find_library_of(f, name);
  if (idx < 0)
    return fdy_fail(FDY_ERR_NOT_FOUND,
                    "kernel %s (function %p) is not in any image Foundry recorded. The interposer must be loaded "
                    "before CUDA starts: run the program with `foundry run -- python ...`.",
                    name, (void *)f);
  if (nresolved == capresolved) {
    size_t cap = capresolved ? capresolved * 2 : 256;
    resolved_t *p = realloc(resolved, cap * sizeof(*p));
    if (!p) return fdy_fail(FDY_ERR_INVALID, "out of host memory");
    resolved = p;
    capresolved = cap;
  }
  resolved[nresolved] = (resolved_t){(size_t)idx, strdup(name)};
  fdy_map_put(&func_cache, (uint64_t)(uintptr_t)f, ++nresolved);
  *image_index = (size_t)idx;
  *name_out = resolved[nresolved - 1].name;
  return 0;
}

static int append_name(char *buf, size_t cap, size_t *used, const char *name) {
  size_t n = strlen(name) + 1;
  if (buf && *used + n <= cap) memcpy(buf + *used, name, n);
  *used += n;
  return 0;
}

FDY_EXPORT int fdy_registry_entries(size_t index, char *buf, size_t cap, size_t *needed) {
  if (fdy_driver_ensure() != 0) return FDY_ERR_NO_DRIVER;
  pthread_mutex_lock(&lock);
  int rc = 0;
  size_t used = 0;
  if (index >= nimages || !images[index].loaded) {
    rc = fdy_fail(FDY_ERR_INVALID, "image %zu is not loaded", index);
    goto out;
  }
  image_t img = images[index];
  unsigned int count = 0;
  CUresult r;
  if (img.kind == FDY_IMG_MODULE) {
    CUmodule mod = (CUmodule)(uintptr_t)img.handle;
    if ((r = fdy_drv.cuModuleGetFunctionCount(&count, mod)) != CUDA_SUCCESS) {
      rc = fdy_fail_cu(r, "cuModuleGetFunctionCount", "image %zu", index);
      goto out;
    }
    CUfunction *fs = calloc(count ? count : 1, sizeof(*fs));
    if (fs && (r = fdy_drv.cuModuleEnumerateFunctions(fs, count, mod)) == CUDA_SUCCESS) {
      for (unsigned i = 0; i < count; i++) {
        const char *n = NULL;
        if (fdy_drv.cuFuncGetName(&n, fs[i]) == CUDA_SUCCESS && n) append_name(buf, cap, &used, n);
      }
    } else {
      rc = fdy_fail_cu(fs ? r : CUDA_ERROR_OUT_OF_MEMORY, "cuModuleEnumerateFunctions", "image %zu", index);
    }
    free(fs);
  } else {
    CUlibrary lib = (CUlibrary)(uintptr_t)img.handle;
    if ((r = fdy_drv.cuLibraryGetKernelCount(&count, lib)) != CUDA_SUCCESS) {
      rc = fdy_fail_cu(r, "cuLibraryGetKernelCount", "image %zu", index);
      goto out;
    }
    CUkernel *ks = calloc(count ? count : 1, sizeof(*ks));
    if (ks && (r = fdy_drv.cuLibraryEnumerateKernels(ks, count, lib)) == CUDA_SUCCESS) {
      for (unsigned i = 0; i < count; i++) {
        const char *n = NULL;
        if (fdy_drv.cuKernelGetName(&n, ks[i]) == CUDA_SUCCESS && n) append_name(buf, cap, &used, n);
      }
    } else {
      rc = fdy_fail_cu(ks ? r : CUDA_ERROR_OUT_OF_MEMORY, "cuLibraryEnumerateKernels", "image %zu", index);
    }
    free(ks);
  }
  if (rc == 0 && used > cap) rc = FDY_ERR_TRUNCATED;
out:
  if (needed) *needed = used;
  pthread_mutex_unlock(&lock);
  return rc;
}

/* ------------------------------------------------------------ LOAD side */
FDY_EXPORT int fdy_image_load(const void *data, uint64_t size, const char *hash, size_t *image_index) {
  int rc = fdy_driver_ensure();
  if (rc) return rc;
  if (!data || !size) return fdy_fail(FDY_ERR_INVALID, "fdy_image_load: empty image");
  /* The caller keeps the bytes mapped for the life of the process, so the driver need not copy them. */
  CUlibraryOption opt = CU_LIBRARY_BINARY_IS_PRESERVED;
  void *val = (void *)(uintptr_t)1;
  CUlibrary lib;
  CUresult r = fdy_drv.cuLibraryLoadData(&lib, data, NULL, NULL, 0, &opt, &val, 1);
  if (r != CUDA_SUCCESS)
    return fdy_fail_cu(r, "cuLibraryLoadData",
                       "image %s (%llu bytes) from the archive. The image may be for another GPU architecture, "
                       "or the file is damaged: run `foundry verify` on the archive",
                       hash ? hash : "?", (unsigned long long)size);
  image_t img = {.handle = (uint64_t)(uintptr_t)lib, .data = data, .size = size, .kind = FDY_IMG_LIBRARY,
                 .loaded = 1, .restored = 1};
  fdy_image_probe(data, &img.data, &img.size, &img.format);
  img.data = data;
  img.size = size;
  if (hash) snprintf(img.hash, sizeof(img.hash), "%s", hash);
  pthread_mutex_lock(&lock);
  size_t idx = add_image(img);
  pthread_mutex_unlock(&lock);
  if (idx == SIZE_MAX) {
    fdy_drv.cuLibraryUnload(lib);
    return fdy_fail(FDY_ERR_INVALID, "out of host memory");
  }
  *image_index = idx;
  return 0;
}

FDY_EXPORT int fdy_image_function(size_t image_index, const char *name, uint64_t *function) {
  pthread_mutex_lock(&lock);
  int ok = image_index < nimages && images[image_index].loaded;
  image_t img = ok ? images[image_index] : (image_t){0};
  pthread_mutex_unlock(&lock);
  if (!ok) return fdy_fail(FDY_ERR_INVALID, "image %zu is not loaded", image_index);
  CUfunction f = NULL;
  CUresult r;
  if (img.kind == FDY_IMG_MODULE) {
    r = fdy_drv.cuModuleGetFunction(&f, (CUmodule)(uintptr_t)img.handle, name);
    if (r != CUDA_SUCCESS) return fdy_fail_cu(r, "cuModuleGetFunction", "kernel %s in image %s", name, img.hash);
  } else {
    CUkernel k;
    r = fdy_drv.cuLibraryGetKernel(&k, (CUlibrary)(uintptr_t)img.handle, name);
    if (r != CUDA_SUCCESS) return fdy_fail_cu(r, "cuLibraryGetKernel", "kernel %s in image %s", name, img.hash);
    r = fdy_drv.cuKernelGetFunction(&f, k);
    if (r != CUDA_SUCCESS) return fdy_fail_cu(r, "cuKernelGetFunction", "kernel %s in image %s", name, img.hash);
  }
  *function = (uint64_t)(uintptr_t)f;
  return 0;
}

FDY_EXPORT int fdy_image_load_many(size_t count, const uint64_t *datas, const uint64_t *sizes,
                                   const char *const *hashes, size_t *indices, size_t *done) {
  if (!done) return fdy_fail(FDY_ERR_INVALID, "fdy_image_load_many: no count out");
  *done = 0;
  if (count && (!datas || !sizes || !hashes || !indices)) return fdy_fail(FDY_ERR_INVALID, "fdy_image_load_many: NULL array");
  for (size_t i = 0; i < count; i++) {
    int rc = fdy_image_load((const void *)(uintptr_t)datas[i], sizes[i], hashes[i], &indices[i]);
    if (rc) return rc;
    *done = i + 1;
  }
  return 0;
}

FDY_EXPORT int fdy_image_functions(size_t count, const size_t *image_indices, const char *const *names,
                                   uint64_t *functions, size_t *done) {
  if (!done) return fdy_fail(FDY_ERR_INVALID, "fdy_image_functions: no count out");
  *done = 0;
  if (count && (!image_indices || !names || !functions)) return fdy_fail(FDY_ERR_INVALID, "fdy_image_functions: NULL array");
  for (size_t i = 0; i < count; i++) {
    if (!names[i]) return fdy_fail(FDY_ERR_INVALID, "fdy_image_functions: kernel %zu has no name", i);
    int rc = fdy_image_function(image_indices[i], names[i], &functions[i]);
    if (rc) return rc;
    *done = i + 1;
  }
  return 0;
}

/* ------------------------------------------------------------ per-function attributes */
static const CUfunction_attribute func_attrs[FDY_FUNC_ATTR_COUNT] = {FDY_FUNC_ATTRS(FDY_CUDA_VALUE)};

FDY_EXPORT int fdy_func_get_attrs(uint64_t function, int32_t *values) {
  if (fdy_driver_ensure() != 0) return FDY_ERR_NO_DRIVER;
  for (int i = 0; i < FDY_FUNC_ATTR_COUNT; i++) {
    int v = 0;
    values[i] = fdy_drv.cuFuncGetAttribute(&v, func_attrs[i], (CUfunction)(uintptr_t)function) == CUDA_SUCCESS
                    ? v : FDY_FUNC_ATTR_UNKNOWN;
  }
  return 0;
}

FDY_EXPORT int fdy_functions_describe(size_t count, const uint64_t *functions, size_t *image_indices,
                                      int32_t *attrs, char *names, size_t cap, size_t *needed, size_t *done) {
  if (!done || !needed) return fdy_fail(FDY_ERR_INVALID, "fdy_functions_describe: null count output");
  *done = 0;
  *needed = 0;
  if (count && (!functions || !image_indices || !attrs))
    return fdy_fail(FDY_ERR_INVALID, "fdy_functions_describe: null array");
  if (fdy_driver_ensure() != 0) return FDY_ERR_NO_DRIVER;
  int rc = 0;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < count && !rc; i++) {
    const char *name = NULL;
    if ((rc = resolve_locked((CUfunction)(uintptr_t)functions[i], &image_indices[i], &name))) break;
    append_name(names, cap, needed, name);
    *done = i + 1;
  }
  pthread_mutex_unlock(&lock);
  /* Attributes outside the registry's lock: each is a driver call, and nothing here is the registry's. */
  for (size_t i = 0; i < *done; i++) fdy_func_get_attrs(functions[i], attrs + i * FDY_FUNC_ATTR_COUNT);
  if (!rc && *needed > cap) rc = fdy_fail(FDY_ERR_TRUNCATED, "kernel names need %zu bytes, %zu given", *needed, cap);
  return rc;
}

FDY_EXPORT int fdy_func_set_attrs(uint64_t function, const int32_t *values) {
  if (fdy_driver_ensure() != 0) return FDY_ERR_NO_DRIVER;
  CUfunction f = (CUfunction)(uintptr_t)function;
  for (int i = 0; i < FDY_FUNC_ATTR_COUNT; i++) {
    int now = 0;
    if (values[i] == FDY_FUNC_ATTR_UNKNOWN) continue;
    /* The dynamic shared-memory limit is only raised: SAVE read it after the captures, and a program that lowers
     * it between launches (FlashInfer) leaves a value below what its graphs' earlier nodes need (record.h). A limit
     * the rule could neither read nor raise goes on to the plain set below, which reports the driver's error. */
    if (func_attrs[i] == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES &&
        (fdy_raise_smem_limit(f, (unsigned)values[i], &now) || now >= values[i]))
      continue;
    /* Compile-time cluster shapes cannot be set again; only differences are applied. */
    if (fdy_drv.cuFuncGetAttribute(&now, func_attrs[i], f) == CUDA_SUCCESS && now == values[i]) continue;
    CUresult r = fdy_drv.cuFuncSetAttribute(f, func_attrs[i], values[i]);
    if (r != CUDA_SUCCESS) {
      const char *name = "?";
      fdy_drv.cuFuncGetName(&name, f);
      return fdy_fail_cu(r, "cuFuncSetAttribute", "attribute %d = %d (its value at SAVE) on kernel %s, which has %d now",
                         (int)func_attrs[i], values[i], name, now);
    }
  }
  return 0;
}

/* ------------------------------------------------------------ launch tracing */
FDY_EXPORT void fdy_launch_trace(int on) {
  pthread_mutex_lock(&lock);
  if (on) fdy_map_free(&launched);
  __atomic_store_n(&fdy_trace_launches, on ? 1 : 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&lock);
}

FDY_EXPORT size_t fdy_launch_trace_read(uint64_t *out, size_t cap) {
  pthread_mutex_lock(&lock);
  size_t n = 0;
  for (size_t i = 0; i < launched.cap; i++) {
    if (!launched.keys[i]) continue;
    if (out && n < cap) out[n] = launched.keys[i];
    n++;
  }
  pthread_mutex_unlock(&lock);
  return n;
}
