/* fakecuda: modules, libraries, functions, kernels, module variables, function attributes, parameter
 * info.
 *
 * A CUfunction is per (module, name); a CUkernel per (library, name) and owns the CUfunction of the
 * library's module (one context). Unloaded objects are kept allocated (kind FC_K_DEAD) so their
 * handles are never reused and stale uses are detected. Every load gets its own copy of the image's
 * variables in device memory, initialised from the image (zeros, initial bytes, relocated pointers),
 * as the driver does. */
#include "fakecuda.h"

#include <unistd.h>

#define MAX_DYN_SMEM 232448 /* 227 KiB */

static fc_func *func_new(fc_module *m, const char *name) {
  fc_func *f = calloc(1, sizeof(*f));
  if (!f) return NULL;
  f->name = strdup(name);
  if (!f->name) {
    free(f);
    return NULL;
  }
  f->mod = m;
  f->bi = fc_builtin_find(name);
  f->loaded = 1;
  f->attr[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = 1024;
  f->attr[CU_FUNC_ATTRIBUTE_NUM_REGS] = 32;
  f->attr[CU_FUNC_ATTRIBUTE_PTX_VERSION] = fc_g.cc_major * 10 + fc_g.cc_minor;
  f->attr[CU_FUNC_ATTRIBUTE_BINARY_VERSION] = fc_g.cc_major * 10 + fc_g.cc_minor;
  f->attr[CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT] = -1;
  f->attr[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] = 48 * 1024; /* 48 KiB less static (none here) */
  f->attr[CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET] = f->bi && (f->bi->flags & FC_BI_CLUSTER2) ? 1 : 0;
  fc_handle_add(f, FC_K_FUNC);
  return f;
}

/* Device memory for the module's variables (one allocation, each variable 16-byte aligned), filled
 * from the image: initial bytes or zeros, then each relocation's variable or code address. */
static CUresult module_vars(fc_module *m) {
  const fc_image *img = &m->img;
  if (!img->nvars) return CUDA_SUCCESS;
  m->var_addr = calloc(img->nvars, sizeof(*m->var_addr));
  if (!m->var_addr) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t total = 0;
  for (size_t i = 0; i < img->nvars; i++) total = ((total + 15) & ~(size_t)15) + img->vars[i].size;
  CUresult r = fc_alloc(&m->vars_base, total, FC_MEM_MODULE, 0);
  if (r) return r;
  size_t at = 0;
  for (size_t i = 0; i < img->nvars; i++) {
    at = (at + 15) & ~(size_t)15;
    m->var_addr[i] = m->vars_base + at;
    if (img->vars[i].init >= 0)
      memcpy((void *)(uintptr_t)m->var_addr[i], img->data + img->vars[i].init, img->vars[i].size);
    at += img->vars[i].size;
  }
  for (size_t k = 0; k < img->nrelocs; k++) {
    const fc_reloc *rel = &img->relocs[k];
    for (size_t i = 0; i < img->nvars; i++) {
      const fc_var *v = &img->vars[i];
      if (v->sec != rel->sec || rel->at < v->at || rel->at + 8 > v->at + v->size) continue;
      uint64_t value = rel->target == FC_RELOC_CODE ? m->code_base + (uint64_t)rel->addend
                                                    : m->var_addr[rel->target] + (uint64_t)rel->addend;
      memcpy((void *)(uintptr_t)(m->var_addr[i] + (rel->at - v->at)), &value, 8);
    }
  }
  return CUDA_SUCCESS;
}

/* Takes ownership of img. */
static CUresult module_new(fc_image *img, fc_library *lib, fc_module **out) {
  fc_module *m = calloc(1, sizeof(*m));
  if (!m) {
    fc_image_free(img);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  static unsigned long long loads; /* under the fake's API lock, like every other fake state */
  m->img = *img;
  m->lib = lib;
  m->loaded = 1;
  m->code_base = FC_CODE_BASE0 + ((unsigned long long)getpid() << 40) + FC_CODE_SPAN * (loads++ % 256);
  m->funcs = calloc(img->nnames ? img->nnames : 1, sizeof(*m->funcs));
  if (!m->funcs) {
    fc_image_free(&m->img);
    free(m);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (size_t i = 0; i < img->nnames; i++) {
    fc_func *f = func_new(m, img->names[i]);
    if (!f) return CUDA_ERROR_OUT_OF_MEMORY; /* partially built module leaks; acceptable in a fake */
    m->funcs[m->nfuncs++] = f;
  }
  CUresult r = module_vars(m);
  if (r) return r; /* partially built module leaks; acceptable in a fake */
  fc_handle_add(m, FC_K_MODULE);
  *out = m;
  return CUDA_SUCCESS;
}

static void module_unload(fc_module *m) {
  for (size_t i = 0; i < m->nfuncs; i++) {
    m->funcs[i]->loaded = 0;
    fc_handle_add(m->funcs[i], FC_K_DEAD);
  }
  m->loaded = 0;
  if (m->vars_base) fc_free(m->vars_base, 1 << FC_MEM_MODULE);
  m->vars_base = 0;
  free(m->img.data);
  m->img.data = NULL;
  fc_handle_add(m, FC_K_DEAD);
}

/* (address, size) of the module variable `name`; CUDA_ERROR_NOT_FOUND when the module has none. */
static CUresult module_global(fc_module *m, CUdeviceptr *dptr, size_t *bytes, const char *name) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = fc_need_ctx();
  if (r) return r;
  for (size_t i = 0; i < m->img.nvars; i++) {
    if (strcmp(m->img.vars[i].name, name) != 0) continue;
    if (dptr) *dptr = m->var_addr[i];
    if (bytes) *bytes = m->img.vars[i].size;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_NOT_FOUND;
}

fc_func *fc_func_resolve(const void *h) {
  int k = fc_handle_kind(h);
  if (k == FC_K_FUNC) return (fc_func *)h;
  if (k == FC_K_KERNEL) return ((const fc_kernel *)h)->func;
  return NULL;
}

static int name_in_list(const char *name, const char *list) {
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && memcmp(p, name, n) == 0) return 1;
    if (!e) break;
    p = e + 1;
  }
  return 0;
}

CUresult fc_param_info(const fc_func *f, size_t index, size_t *off, size_t *size) {
  if (name_in_list(f->name, fc_g.no_param_info)) return CUDA_ERROR_NOT_SUPPORTED;
  if (!f->bi || index >= f->bi->nparams) return CUDA_ERROR_INVALID_VALUE;
  if (off) *off = f->bi->off[index];
  if (size) *size = f->bi->size[index];
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ modules */
static CUresult module_load_impl(CUmodule *out, const void *image, const char *path) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  fc_image img;
  r = path ? fc_image_read_file(path, &img) : fc_image_parse(image, 0, &img);
  if (r) return r;
  fc_module *m;
  if ((r = module_new(&img, NULL, &m))) return r;
  *out = (CUmodule)m;
  return CUDA_SUCCESS;
}

FC_API CUresult cuModuleLoadData(CUmodule *m, const void *image) { FC_GUARD(module_load_impl(m, image, NULL)); }
FC_API CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n, CUjit_option *o, void **v) {
  FC_GUARD(module_load_impl(m, image, NULL));
}
FC_API CUresult cuModuleLoadFatBinary(CUmodule *m, const void *fatCubin) { FC_GUARD(module_load_impl(m, fatCubin, NULL)); }
FC_API CUresult cuModuleLoad(CUmodule *m, const char *fname) {
  if (!fname) return CUDA_ERROR_INVALID_VALUE;
  FC_GUARD(module_load_impl(m, NULL, fname));
}

static fc_module *mod_get(CUmodule h) { return fc_is(h, FC_K_MODULE) ? (fc_module *)h : NULL; }

static CUresult module_unload_impl(CUmodule h) {
  fc_module *m = mod_get(h);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  if (m->lib) return CUDA_ERROR_NOT_PERMITTED; /* owned by its library */
  module_unload(m);
  return CUDA_SUCCESS;
}

FC_API CUresult cuModuleUnload(CUmodule h) { FC_GUARD(module_unload_impl(h)); }

static CUresult module_get_function_impl(CUfunction *out, CUmodule h, const char *name) {
  fc_module *m = mod_get(h);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < m->nfuncs; i++) {
    if (strcmp(m->funcs[i]->name, name) == 0) {
      *out = (CUfunction)m->funcs[i];
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

FC_API CUresult cuModuleGetFunction(CUfunction *out, CUmodule h, const char *name) {
  FC_GUARD(module_get_function_impl(out, h, name));
}

static CUresult module_get_global_impl(CUdeviceptr *dptr, size_t *bytes, CUmodule h, const char *name) {
  fc_module *m = mod_get(h);
  return m ? module_global(m, dptr, bytes, name) : CUDA_ERROR_INVALID_HANDLE;
}

FC_API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule h, const char *name) {
  FC_GUARD(module_get_global_impl(dptr, bytes, h, name));
}

static CUresult module_count_impl(unsigned int *count, CUmodule h) {
  fc_module *m = mod_get(h);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = (unsigned)m->nfuncs;
  return CUDA_SUCCESS;
}

FC_API CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule h) { FC_GUARD(module_count_impl(count, h)); }

static CUresult module_enum_impl(CUfunction *fs, unsigned int n, CUmodule h) {
  fc_module *m = mod_get(h);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  if (!fs || n == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < m->nfuncs && i < n; i++) fs[i] = (CUfunction)m->funcs[i];
  return CUDA_SUCCESS;
}

FC_API CUresult cuModuleEnumerateFunctions(CUfunction *fs, unsigned int n, CUmodule h) {
  FC_GUARD(module_enum_impl(fs, n, h));
}

FC_API CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  *mode = CU_MODULE_EAGER_LOADING;
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ libraries */
static CUresult library_load_impl(CUlibrary *out, const void *code, const char *path) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  fc_image img;
  CUresult r = path ? fc_image_read_file(path, &img) : fc_image_parse(code, 0, &img);
  if (r) return r;
  fc_library *lib = calloc(1, sizeof(*lib));
  if (!lib) {
    fc_image_free(&img);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if ((r = module_new(&img, lib, &lib->mod))) {
    free(lib);
    return r;
  }
  lib->kernels = calloc(lib->mod->nfuncs ? lib->mod->nfuncs : 1, sizeof(*lib->kernels));
  if (!lib->kernels) return CUDA_ERROR_OUT_OF_MEMORY;
  for (size_t i = 0; i < lib->mod->nfuncs; i++) {
    fc_kernel *k = calloc(1, sizeof(*k));
    if (!k) return CUDA_ERROR_OUT_OF_MEMORY;
    k->lib = lib;
    k->func = lib->mod->funcs[i];
    k->func->kernel = k;
    fc_handle_add(k, FC_K_KERNEL);
    lib->kernels[lib->nkernels++] = k;
  }
  lib->loaded = 1;
  fc_handle_add(lib, FC_K_LIBRARY);
  *out = (CUlibrary)lib;
  return CUDA_SUCCESS;
}

FC_API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jo, void **jv, unsigned int njo,
                                  CUlibraryOption *lo, void **lv, unsigned int nlo) {
  FC_GUARD(library_load_impl(library, code, NULL));
}

FC_API CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jo, void **jv,
                                      unsigned int njo, CUlibraryOption *lo, void **lv, unsigned int nlo) {
  if (!fileName) return CUDA_ERROR_INVALID_VALUE;
  FC_GUARD(library_load_impl(library, NULL, fileName));
}

static fc_library *lib_get(CUlibrary h) { return fc_is(h, FC_K_LIBRARY) ? (fc_library *)h : NULL; }
static fc_kernel *kern_get(CUkernel h) { return fc_is(h, FC_K_KERNEL) ? (fc_kernel *)h : NULL; }

static CUresult library_unload_impl(CUlibrary h) {
  fc_library *lib = lib_get(h);
  if (!lib) return CUDA_ERROR_INVALID_HANDLE;
  for (size_t i = 0; i < lib->nkernels; i++) fc_handle_add(lib->kernels[i], FC_K_DEAD);
  module_unload(lib->mod);
  lib->loaded = 0;
  fc_handle_add(lib, FC_K_DEAD);
  return CUDA_SUCCESS;
}

FC_API CUresult cuLibraryUnload(CUlibrary h) { FC_GUARD(library_unload_impl(h)); }

static CUresult library_get_kernel_impl(CUkernel *out, CUlibrary h, const char *name) {
  fc_library *lib = lib_get(h);
  if (!lib) return CUDA_ERROR_INVALID_HANDLE;
  if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < lib->nkernels; i++) {
    if (strcmp(lib->kernels[i]->func->name, name) == 0) {
      *out = (CUkernel)lib->kernels[i];
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

FC_API CUresult cuLibraryGetKernel(CUkernel *out, CUlibrary h, const char *name) {
  FC_GUARD(library_get_kernel_impl(out, h, name));
}

static CUresult library_get_global_impl(CUdeviceptr *dptr, size_t *bytes, CUlibrary h, const char *name) {
  fc_library *lib = lib_get(h);
  return lib ? module_global(lib->mod, dptr, bytes, name) : CUDA_ERROR_INVALID_HANDLE;
}

FC_API CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary h, const char *name) {
  FC_GUARD(library_get_global_impl(dptr, bytes, h, name));
}

/* The fake's images declare no __managed__ variables. */
static CUresult library_get_managed_impl(CUdeviceptr *dptr, size_t *bytes, CUlibrary h, const char *name) {
  (void)dptr;
  (void)bytes;
  if (!lib_get(h)) return CUDA_ERROR_INVALID_HANDLE;
  return name ? CUDA_ERROR_NOT_FOUND : CUDA_ERROR_INVALID_VALUE;
}

FC_API CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary h, const char *name) {
  FC_GUARD(library_get_managed_impl(dptr, bytes, h, name));
}

static CUresult library_count_impl(unsigned int *count, CUlibrary h) {
  fc_library *lib = lib_get(h);
  if (!lib) return CUDA_ERROR_INVALID_HANDLE;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = (unsigned)lib->nkernels;
  return CUDA_SUCCESS;
}

FC_API CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary h) { FC_GUARD(library_count_impl(count, h)); }

static CUresult library_enum_impl(CUkernel *ks, unsigned int n, CUlibrary h) {
  fc_library *lib = lib_get(h);
  if (!lib) return CUDA_ERROR_INVALID_HANDLE;
  if (!ks || n == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < lib->nkernels && i < n; i++) ks[i] = (CUkernel)lib->kernels[i];
  return CUDA_SUCCESS;
}

FC_API CUresult cuLibraryEnumerateKernels(CUkernel *ks, unsigned int n, CUlibrary h) {
  FC_GUARD(library_enum_impl(ks, n, h));
}

static CUresult library_module_impl(CUmodule *out, CUlibrary h) {
  fc_library *lib = lib_get(h);
  if (!lib) return CUDA_ERROR_INVALID_HANDLE;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = fc_need_ctx();
  if (r) return r;
  *out = (CUmodule)lib->mod;
  return CUDA_SUCCESS;
}

FC_API CUresult cuLibraryGetModule(CUmodule *out, CUlibrary h) { FC_GUARD(library_module_impl(out, h)); }

static CUresult kernel_function_impl(CUfunction *out, CUkernel h) {
  fc_kernel *k = kern_get(h);
  if (!k) return CUDA_ERROR_INVALID_HANDLE;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = fc_need_ctx();
  if (r) return r;
  *out = (CUfunction)k->func;
  return CUDA_SUCCESS;
}

FC_API CUresult cuKernelGetFunction(CUfunction *out, CUkernel h) { FC_GUARD(kernel_function_impl(out, h)); }

static CUresult kernel_name_impl(const char **name, CUkernel h) {
  fc_kernel *k = kern_get(h);
  if (!k) return CUDA_ERROR_INVALID_HANDLE;
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  *name = k->func->name;
  return CUDA_SUCCESS;
}

FC_API CUresult cuKernelGetName(const char **name, CUkernel h) { FC_GUARD(kernel_name_impl(name, h)); }

static CUresult kernel_library_impl(CUlibrary *out, CUkernel h) {
  fc_kernel *k = kern_get(h);
  if (!k) return CUDA_ERROR_INVALID_HANDLE;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  *out = (CUlibrary)k->lib;
  return CUDA_SUCCESS;
}

FC_API CUresult cuKernelGetLibrary(CUlibrary *out, CUkernel h) { FC_GUARD(kernel_library_impl(out, h)); }

/* ------------------------------------------------------------------ functions & attributes */
static CUresult func_get_attr(int *pi, CUfunction_attribute a, fc_func *f) {
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (!pi || (int)a < 0 || a >= CU_FUNC_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  *pi = f->attr[a];
  return CUDA_SUCCESS;
}

static CUresult func_set_attr(fc_func *f, CUfunction_attribute a, int v) {
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      if (v < 0 || v > MAX_DYN_SMEM) return CUDA_ERROR_INVALID_VALUE;
      break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      if (v < -1 || v > 100) return CUDA_ERROR_INVALID_VALUE;
      break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
      if (v < 0 || v > 16) return CUDA_ERROR_INVALID_VALUE;
      break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
      if (v != 0 && v != 1) return CUDA_ERROR_INVALID_VALUE;
      break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      if (v < 0 || v > 2) return CUDA_ERROR_INVALID_VALUE;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE; /* read-only or unknown */
  }
  f->attr[a] = v;
  return CUDA_SUCCESS;
}

static fc_func *func_get(CUfunction h) { return fc_is(h, FC_K_FUNC) ? (fc_func *)h : NULL; }

FC_API CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute a, CUfunction h) { FC_GUARD(func_get_attr(pi, a, func_get(h))); }
FC_API CUresult cuFuncSetAttribute(CUfunction h, CUfunction_attribute a, int v) { FC_GUARD(func_set_attr(func_get(h), a, v)); }

static fc_func *kfunc(CUkernel h, CUdevice dev) {
  fc_kernel *k = kern_get(h);
  return k && dev >= 0 && dev < fc_g.device_count ? k->func : NULL;
}

FC_API CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute a, CUkernel h, CUdevice dev) {
  FC_GUARD(func_get_attr(pi, a, kfunc(h, dev)));
}
FC_API CUresult cuKernelSetAttribute(CUfunction_attribute a, int v, CUkernel h, CUdevice dev) {
  FC_GUARD(func_set_attr(kfunc(h, dev), a, v));
}

static CUresult func_name_impl(const char **name, CUfunction h) {
  fc_func *f = func_get(h);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  *name = f->name;
  return CUDA_SUCCESS;
}

FC_API CUresult cuFuncGetName(const char **name, CUfunction h) { FC_GUARD(func_name_impl(name, h)); }

static CUresult func_module_impl(CUmodule *out, CUfunction h) {
  fc_func *f = func_get(h);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  *out = (CUmodule)f->mod;
  return CUDA_SUCCESS;
}

FC_API CUresult cuFuncGetModule(CUmodule *out, CUfunction h) { FC_GUARD(func_module_impl(out, h)); }

static CUresult param_info_impl(fc_func *f, size_t index, size_t *off, size_t *size) {
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (!off && !size) return CUDA_ERROR_INVALID_VALUE;
  return fc_param_info(f, index, off, size);
}

FC_API CUresult cuFuncGetParamInfo(CUfunction h, size_t index, size_t *off, size_t *size) {
  FC_GUARD(param_info_impl(func_get(h), index, off, size));
}
FC_API CUresult cuKernelGetParamInfo(CUkernel h, size_t index, size_t *off, size_t *size) {
  FC_GUARD(param_info_impl(kfunc(h, 0), index, off, size));
}

FC_API CUresult cuFuncLoad(CUfunction h) { FC_GUARD(func_get(h) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE); }

static CUresult func_loaded_impl(CUfunctionLoadingState *st, CUfunction h) {
  if (!func_get(h)) return CUDA_ERROR_INVALID_HANDLE;
  if (!st) return CUDA_ERROR_INVALID_VALUE;
  *st = CU_FUNCTION_LOADING_STATE_LOADED;
  return CUDA_SUCCESS;
}

FC_API CUresult cuFuncIsLoaded(CUfunctionLoadingState *st, CUfunction h) { FC_GUARD(func_loaded_impl(st, h)); }

FC_API CUresult cuFuncSetCacheConfig(CUfunction h, CUfunc_cache config) {
  FC_GUARD(func_get(h) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}
