/* fakecuda: lock, handle table, environment knobs, init, devices, contexts. */
#include "fakecuda.h"

#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

fc_globals fc_g;
static pthread_mutex_t fc_mutex = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

void fc_lock(void) { pthread_mutex_lock(&fc_mutex); }
void fc_unlock(void) { pthread_mutex_unlock(&fc_mutex); }

double fc_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

unsigned long fc_thread_id(void) { return (unsigned long)syscall(SYS_gettid); }

int fc_grow(void **ptr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 1;
  size_t n = *cap ? *cap * 2 : 8;
  while (n < need) n *= 2;
  void *p = realloc(*ptr, n * elem);
  if (!p) return 0;
  memset((char *)p + *cap * elem, 0, (n - *cap) * elem);
  *ptr = p;
  *cap = n;
  return 1;
}

/* ------------------------------------------------------------------ handle table
 * Open addressing with linear probing and backward-shift deletion: pointer -> kind. */
static const void **ht_keys;
static int *ht_kinds;
static size_t ht_cap, ht_n;

static size_t ht_hash(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x;
}

static void ht_put(const void **keys, int *kinds, size_t cap, const void *p, int kind) {
  size_t i = ht_hash(p) & (cap - 1);
  while (keys[i] && keys[i] != p) i = (i + 1) & (cap - 1);
  keys[i] = p;
  kinds[i] = kind;
}

void fc_handle_add(const void *p, int kind) {
  if (!p) return;
  if ((ht_n + 1) * 2 > ht_cap) {
    size_t ncap = ht_cap ? ht_cap * 2 : 256;
    const void **nk = calloc(ncap, sizeof(*nk));
    int *nv = calloc(ncap, sizeof(*nv));
    if (!nk || !nv) {
      free(nk);
      free(nv);
      return;
    }
    for (size_t i = 0; i < ht_cap; i++)
      if (ht_keys[i]) ht_put(nk, nv, ncap, ht_keys[i], ht_kinds[i]);
    free(ht_keys);
    free(ht_kinds);
    ht_keys = nk;
    ht_kinds = nv;
    ht_cap = ncap;
  }
  if (fc_handle_kind(p) == FC_K_NONE) ht_n++;
  ht_put(ht_keys, ht_kinds, ht_cap, p, kind);
}

int fc_handle_kind(const void *p) {
  if (!p || !ht_cap) return FC_K_NONE;
  size_t i = ht_hash(p) & (ht_cap - 1);
  while (ht_keys[i]) {
    if (ht_keys[i] == p) return ht_kinds[i];
    i = (i + 1) & (ht_cap - 1);
  }
  return FC_K_NONE;
}

void fc_handle_del(const void *p) {
  if (!p || !ht_cap) return;
  size_t mask = ht_cap - 1, i = ht_hash(p) & mask;
  while (ht_keys[i] && ht_keys[i] != p) i = (i + 1) & mask;
  if (!ht_keys[i]) return;
  ht_keys[i] = NULL;
  ht_n--;
  for (size_t j = (i + 1) & mask; ht_keys[j]; j = (j + 1) & mask) {
    size_t k = ht_hash(ht_keys[j]) & mask;
    int stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
    if (stays) continue;
    ht_keys[i] = ht_keys[j];
    ht_kinds[i] = ht_kinds[j];
    ht_keys[j] = NULL;
    i = j;
  }
}

/* ------------------------------------------------------------------ environment */
static long long env_ll(const char *name, long long dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  long long x = strtoll(v, &end, 0);
  return end == v ? dflt : x;
}

void fc_read_env(void) {
  fc_g.driver_version = (int)env_ll("FAKECUDA_DRIVER_VERSION", 13000);
  fc_g.device_count = (int)env_ll("FAKECUDA_DEVICE_COUNT", 1);
  if (fc_g.device_count < 0) fc_g.device_count = 0;
  if (fc_g.device_count > 64) fc_g.device_count = 64;
  const char *name = getenv("FAKECUDA_DEVICE_NAME");
  snprintf(fc_g.device_name, sizeof(fc_g.device_name), "%s", name && *name ? name : "Fake GPU");
  fc_g.sm_count = (int)env_ll("FAKECUDA_SM_COUNT", 132);
  fc_g.cc_major = 9;
  fc_g.cc_minor = 0;
  const char *cc = getenv("FAKECUDA_CC");
  if (cc && *cc) {
    int ma = 0, mi = 0;
    if (sscanf(cc, "%d.%d", &ma, &mi) >= 1) {
      fc_g.cc_major = ma;
      fc_g.cc_minor = mi;
    }
  }
  fc_g.phys_limit = (unsigned long long)env_ll("FAKECUDA_PHYS_LIMIT", 64LL << 30);
  fc_g.total_mem = (unsigned long long)env_ll("FAKECUDA_TOTAL_MEM", 80LL << 30);
  fc_g.small_page_room = env_ll("FAKECUDA_SMALL_PAGE_ROOM", -1);
  fc_g.edge_data_bug = (int)env_ll("FAKECUDA_EDGE_DATA_BUG", 0);
  fc_g.batch_copy_max = (unsigned long long)env_ll("FAKECUDA_BATCH_COPY_MAX", 0);
  const char *np = getenv("FAKECUDA_NO_PARAM_INFO");
  snprintf(fc_g.no_param_info, sizeof(fc_g.no_param_info), "%s", np ? np : "");
}

/* ------------------------------------------------------------------ init & version */
static fc_ctx fc_primary[64];

FC_API CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  fc_lock();
  if (!fc_g.initialized) {
    fc_read_env();
    for (int i = 0; i < 64; i++) {
      fc_primary[i].dev = i;
      if (i < fc_g.device_count) fc_handle_add(&fc_primary[i], FC_K_CTX);
    }
    fc_g.initialized = 1;
  }
  fc_unlock();
  return fc_g.device_count ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

FC_API CUresult cuDriverGetVersion(int *v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = fc_g.initialized ? fc_g.driver_version : (int)env_ll("FAKECUDA_DRIVER_VERSION", 13000);
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ devices */
static CUresult dev_ok(CUdevice d) { return (d >= 0 && d < fc_g.device_count) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }

FC_API CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  if (dev_ok(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetCount(int *n) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  *n = fc_g.device_count;
  return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (dev_ok(d)) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)len, "%s", fc_g.device_name);
  return CUDA_SUCCESS;
}

static int dev_attr(CUdevice_attribute a) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return fc_g.sm_count;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x18;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 50331648;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 3;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return 32;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return fc_g.cc_major;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return fc_g.cc_minor;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 233472;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO: return 2;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 232448;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: return 32505856;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE: return 134213632;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: return 1;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: return fc_g.cc_major >= 9;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: return 1;
    case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT: return 4;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID: return -1;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: return 0;
    default: return 0;
  }
}

FC_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice d) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pi || attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  if (dev_ok(d)) return CUDA_ERROR_INVALID_DEVICE;
  *pi = dev_attr(attrib);
  return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice d) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
  if (dev_ok(d)) return CUDA_ERROR_INVALID_DEVICE;
  *major = fc_g.cc_major;
  *minor = fc_g.cc_minor;
  return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (dev_ok(d)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = fc_g.total_mem;
  return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice d) {
  size_t b = 0;
  CUresult r = cuDeviceTotalMem_v2(&b, d);
  if (r == CUDA_SUCCESS) *bytes = b > 0xffffffffu ? 0xffffffffu : (unsigned)b;
  return r;
}

FC_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice d) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  if (dev_ok(d)) return CUDA_ERROR_INVALID_DEVICE;
  static const char base[16] = {'f', 'a', 'k', 'e', 'c', 'u', 'd', 'a', 0x13, 0x00, 0x42, 0x17, 0, 0, 0, 0};
  memcpy(uuid->bytes, base, 16);
  uuid->bytes[15] = (char)d;
  return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice d) { return cuDeviceGetUuid_v2(uuid, d); }

FC_API CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!id || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (dev_ok(d)) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(id, (size_t)len, "0000:%02x:00.0", 0x18 + d);
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ contexts (primary only) */
#define FC_CTX_STACK 32
static __thread fc_ctx *tls_stack[FC_CTX_STACK];
static __thread int tls_depth;

fc_ctx *fc_current_ctx(void) { return tls_depth > 0 ? tls_stack[tls_depth - 1] : NULL; }

CUresult fc_need_ctx(void) { return fc_current_ctx() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }

FC_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice d) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (dev_ok(d)) return CUDA_ERROR_INVALID_DEVICE;
  fc_lock();
  fc_primary[d].retained++;
  *pctx = (CUcontext)&fc_primary[d];
  fc_unlock();
  return CUDA_SUCCESS;
}

FC_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev_ok(d)) return CUDA_ERROR_INVALID_DEVICE;
  fc_lock();
  CUresult r = CUDA_SUCCESS;
  if (fc_primary[d].retained > 0)
    fc_primary[d].retained--;
  else
    r = CUDA_ERROR_INVALID_CONTEXT;
  fc_unlock();
  return r;
}

FC_API CUresult cuDevicePrimaryCtxRelease(CUdevice d) { return cuDevicePrimaryCtxRelease_v2(d); }

FC_API CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (dev_ok(d)) return CUDA_ERROR_INVALID_DEVICE;
  fc_lock();
  *flags = fc_primary[d].flags;
  *active = fc_primary[d].retained > 0;
  fc_unlock();
  return CUDA_SUCCESS;
}

FC_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned int flags) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev_ok(d)) return CUDA_ERROR_INVALID_DEVICE;
  fc_lock();
  fc_primary[d].flags = flags;
  fc_unlock();
  return CUDA_SUCCESS;
}

FC_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  return dev_ok(d);
}

static CUresult ctx_check(CUcontext c) { return fc_is(c, FC_K_CTX) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }

FC_API CUresult cuCtxSetCurrent(CUcontext c) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!c) {
    if (tls_depth > 0) tls_depth--;
    return CUDA_SUCCESS;
  }
  if (ctx_check(c)) return CUDA_ERROR_INVALID_CONTEXT;
  if (tls_depth == 0) tls_depth = 1;
  tls_stack[tls_depth - 1] = (fc_ctx *)c;
  return CUDA_SUCCESS;
}

FC_API CUresult cuCtxGetCurrent(CUcontext *pc) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pc) return CUDA_ERROR_INVALID_VALUE;
  *pc = (CUcontext)fc_current_ctx();
  return CUDA_SUCCESS;
}

FC_API CUresult cuCtxPushCurrent_v2(CUcontext c) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx_check(c)) return CUDA_ERROR_INVALID_CONTEXT;
  if (tls_depth >= FC_CTX_STACK) return CUDA_ERROR_INVALID_VALUE;
  tls_stack[tls_depth++] = (fc_ctx *)c;
  return CUDA_SUCCESS;
}

FC_API CUresult cuCtxPopCurrent_v2(CUcontext *pc) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (tls_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  fc_ctx *c = tls_stack[--tls_depth];
  if (pc) *pc = (CUcontext)c;
  return CUDA_SUCCESS;
}

FC_API CUresult cuCtxPushCurrent(CUcontext c) { return cuCtxPushCurrent_v2(c); }
FC_API CUresult cuCtxPopCurrent(CUcontext *pc) { return cuCtxPopCurrent_v2(pc); }

FC_API CUresult cuCtxGetDevice(CUdevice *d) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  fc_ctx *c = fc_current_ctx();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  *d = c->dev;
  return CUDA_SUCCESS;
}

FC_API CUresult cuCtxGetApiVersion(CUcontext c, unsigned int *version) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  if (!c) c = (CUcontext)fc_current_ctx();
  if (ctx_check(c)) return CUDA_ERROR_INVALID_CONTEXT;
  *version = 3020;
  return CUDA_SUCCESS;
}

FC_API CUresult cuCtxGetFlags(unsigned int *flags) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  fc_ctx *c = fc_current_ctx();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  *flags = c->flags;
  return CUDA_SUCCESS;
}

FC_API CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return CUDA_SUCCESS;
}

FC_API CUresult cuCtxSynchronize(void) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!fc_current_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
  FC_GUARD(fc_capture_unsafe_call());
}
