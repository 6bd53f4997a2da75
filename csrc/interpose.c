/* The two doors into the driver: dlsym and cuGetProcAddress.
 *
 * The CUDA runtime never calls exported driver symbols: it asks cuGetProcAddress for each entry point
 * by name, version and flags. PyTorch, Triton and cuda-bindings mostly use dlsym(handle, "cu...").
 * dlsym(handle, ...) only searches that handle's library, so a preloaded definition is invisible to
 * it. Foundry therefore overrides dlsym itself and hands out its own cuGetProcAddress; both return a
 * hook from hooks.h when the name (and, for cuGetProcAddress, the ABI) matches, and the driver's own
 * answer otherwise. */
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "hooks.h"
#include "internal.h"

#undef cuGetProcAddress /* we define the 4-argument v1 function under its exported name */

FDY_EXPORT fdy_cuGetProcAddress_v1_t cuGetProcAddress;

typedef struct {
  const char *base, *symbol;
  int min_version, per_thread;
  void *hook;
} hook_entry;

/* -Bsymbolic-functions makes &symbol our own definition even when another library defines it too. */
static const hook_entry hooks[] = {
#define FDY_HOOK_ENTRY(base, symbol, min_version, per_thread) {#base, #symbol, min_version, per_thread, (void *)&symbol},
    FDY_HOOKS(FDY_HOOK_ENTRY)
#undef FDY_HOOK_ENTRY
};
#define FDY_HOOK_COUNT (sizeof(hooks) / sizeof(hooks[0]))

/* By hook: whether any caller got it (fdy_hook_handed_out). Set, never cleared. */
static int handed[FDY_HOOK_COUNT];

static void *hand_out(const hook_entry *e) {
  __atomic_store_n(&handed[e - hooks], 1, __ATOMIC_RELAXED);
  return e->hook;
}

static const hook_entry *find_by_symbol(const char *name) {
  for (size_t i = 0; i < FDY_HOOK_COUNT; i++)
    if (strcmp(hooks[i].symbol, name) == 0) return &hooks[i];
  return NULL;
}

/* The entry whose ABI a request for (base, version, per_thread) gets: the highest min_version that
 * the requested version reaches. */
static const hook_entry *find_for_request(const char *base, int version, int per_thread) {
  const hook_entry *best = NULL;
  for (size_t i = 0; i < FDY_HOOK_COUNT; i++) {
    const hook_entry *e = &hooks[i];
    if (e->per_thread != per_thread || e->min_version > version || strcmp(e->base, base) != 0) continue;
    if (!best || e->min_version > best->min_version) best = e;
  }
  return best;
}

static void *real_of(const char *symbol) {
  /* fdy_driver_symbol would load the driver; here it is loaded already (the caller got a pointer). */
  return fdy_real_dlsym ? fdy_driver_symbol(symbol) : NULL;
}

static void *hook_for_request(const char *base, void *answer, int version, cuuint64_t flags) {
  int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const hook_entry *e = find_for_request(base, version, per_thread);
  if (!e) return answer;
  if (answer == e->hook) return hand_out(e);
  void *real = real_of(e->symbol);
  if (answer == real) return hand_out(e);
  /* The driver may hand out an internal pointer rather than the exported one. Our headers know
   * every ABI change up to CUDA_VERSION, so within that range the version alone fixes the ABI. */
  if (version <= CUDA_VERSION) {
    fdy_driver_note(e->symbol, answer);
    return hand_out(e);
  }
  fdy_fail(FDY_ERR_UNSUPPORTED,
           "cuGetProcAddress(%s, version %d) returned an ABI newer than Foundry's CUDA %d headers; it is "
           "passed through unhooked, so its calls are not placed in the region. Rebuild Foundry against "
           "newer CUDA headers.",
           base, version, CUDA_VERSION);
  return answer;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status) {
  if (fdy_driver_ensure() != 0) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = fdy_drv.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, status);
  if (r == CUDA_SUCCESS && pfn && *pfn && symbol && symbol[0] == 'c' && symbol[1] == 'u')
    *pfn = hook_for_request(symbol, *pfn, cudaVersion, flags);
  return r;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
  if (fdy_driver_ensure() != 0) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = fdy_drv.cuGetProcAddress_v1 ? fdy_drv.cuGetProcAddress_v1(symbol, pfn, cudaVersion, flags)
                                        : fdy_drv.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
  if (r == CUDA_SUCCESS && pfn && *pfn && symbol && symbol[0] == 'c' && symbol[1] == 'u')
    *pfn = hook_for_request(symbol, *pfn, cudaVersion, flags);
  return r;
}

/* The definition of name in object l itself (not in one of its dependencies), or NULL.
 * Why not fdy_real_dlsym(l, name): a link map of an object loaded at start-up (LD_PRELOAD, DT_NEEDED)
 * has no search list of its own until something dlopens it, and glibc's dlsym dereferences that
 * missing list: any library calling dlsym(RTLD_NEXT, ...) crashed the process (found by
 * tests/cpu/test_interposer.py). dlopen(RTLD_NOLOAD) returns a proper handle for the loaded object. */
static void *lookup_in_object(struct link_map *l, const char *name) {
  void *h = dlopen(l->l_name, RTLD_LAZY | RTLD_NOLOAD); /* "" is the main program */
  if (!h) return NULL;
  void *p = fdy_real_dlsym(h, name);
  dlclose(h);
  Dl_info info;
  struct link_map *owner = NULL;
  /* dlsym(h) also searches l's dependencies; only l's own definition counts here. */
  if (p && dladdr1(p, &info, (void **)&owner, RTLD_DL_LINKMAP) && owner == l) return p;
  return NULL;
}

/* RTLD_NEXT means "after the caller's object". Forwarding it as is would mean "after libfoundry",
 * which can hand a caller its own definition back; walk the link map from the caller instead. */
static void *dlsym_next(const char *name, const void *caller) {
  Dl_info info;
  struct link_map *self = NULL;
  if (dladdr1(caller, &info, (void **)&self, RTLD_DL_LINKMAP) && self) {
    for (struct link_map *l = self->l_next; l; l = l->l_next) {
      void *p = lookup_in_object(l, name);
      if (p) return p;
    }
    return NULL;
  }
  return fdy_real_dlsym(RTLD_NEXT, name);
}

static void *dlsym_hooked(void *handle, const char *name, const void *caller) {
  void *p = handle == RTLD_NEXT ? dlsym_next(name, caller) : fdy_real_dlsym(handle, name);
  if (p && name[0] == 'c' && name[1] == 'u') {
    const hook_entry *e = find_by_symbol(name);
    if (e) {
      if (p != e->hook) fdy_driver_note(e->symbol, p);
      return hand_out(e);
    }
  }
  return p;
}

static int interposer_ready; /* set by our constructor */

__attribute__((constructor)) static void mark_interposer_ready(void) {
  fdy_resolve_real_dlsym();
  __atomic_store_n(&interposer_ready, 1, __ATOMIC_RELEASE);
}

/* Not instrumented: it can be called before the sanitizer runtime of a sanitized build is initialised
 * (the ASan runtime resolves its interceptors through dlsym, before any of our code may run). */
FDY_EXPORT __attribute__((no_sanitize("address", "undefined"))) void *dlsym(void *handle, const char *name) {
  if (!__atomic_load_n(&interposer_ready, __ATOMIC_ACQUIRE)) {
    /* Before our constructor (a library initialised earlier than us): nothing can have been interposed
     * yet, so the answer is glibc's, resolved here on demand (never NULL for a name glibc knows). RTLD_NEXT is then
     * relative to libfoundry, which defines nothing such an early caller asks for. */
    fdy_resolve_real_dlsym();
    void *(*real)(void *, const char *) = __atomic_load_n(&fdy_real_dlsym, __ATOMIC_ACQUIRE);
    return real ? real(handle, name) : NULL;
  }
  return dlsym_hooked(handle, name, __builtin_return_address(0));
}

FDY_EXPORT int fdy_interposer_active(void) {
  /* Preloaded: the process-wide dlsym is ours. Loaded later by Python: glibc's comes first. */
  return fdy_real_dlsym && fdy_real_dlsym(RTLD_DEFAULT, "dlsym") == (void *)&dlsym;
}

FDY_EXPORT int fdy_hook_handed_out(const char *symbol) {
  const hook_entry *e = symbol ? find_by_symbol(symbol) : NULL;
  return e ? __atomic_load_n(&handed[e - hooks], __ATOMIC_RELAXED) : 0;
}
