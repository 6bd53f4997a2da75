/* fakecuda: builtin kernels, implemented on the host and looked up by name.
 *
 * Parameters are laid out with natural C alignment in one argument buffer (what cuFuncGetParamInfo
 * reports). Element-wise kernels touch indices i < min(n, gridDim.x * blockDim.x), so a wrong grid
 * shows in the output. Pointers are checked against device memory: a bad one gives
 * CUDA_ERROR_ILLEGAL_ADDRESS instead of a crash. */
#include "fakecuda.h"

#define ARG(T, off) ({ T v__; memcpy(&v__, L->args + (off), sizeof(T)); v__; })
#define PTR(off) ((CUdeviceptr)ARG(uint64_t, off))

static size_t span(const fc_launch *L, long long n) {
  unsigned long long threads = (unsigned long long)L->grid[0] * L->block[0];
  if (n <= 0) return 0;
  return (size_t)((unsigned long long)n < threads ? (unsigned long long)n : threads);
}

#define CHECK(p, bytes) \
  do {                  \
    size_t b__ = (bytes);                                                      \
    if (b__ != 0 && fc_dev_ok((p), b__)) return CUDA_ERROR_ILLEGAL_ADDRESS; \
  } while (0)

static CUresult k_fill(const fc_launch *L) {
  CUdeviceptr out = PTR(0);
  float v = ARG(float, 8);
  size_t n = span(L, ARG(int32_t, 12));
  CHECK(out, n * 4);
  float *o = (float *)(uintptr_t)out;
  for (size_t i = 0; i < n; i++) o[i] = v;
  return CUDA_SUCCESS;
}

static CUresult k_add(const fc_launch *L) {
  CUdeviceptr a = PTR(0), b = PTR(8), out = PTR(16);
  size_t n = span(L, ARG(int32_t, 24));
  CHECK(a, n * 4);
  CHECK(b, n * 4);
  CHECK(out, n * 4);
  const float *x = (const float *)(uintptr_t)a, *y = (const float *)(uintptr_t)b;
  float *o = (float *)(uintptr_t)out;
  for (size_t i = 0; i < n; i++) o[i] = x[i] + y[i];
  return CUDA_SUCCESS;
}

static CUresult k_axpy(const fc_launch *L) {
  float alpha = ARG(float, 0);
  CUdeviceptr x = PTR(8), y = PTR(16);
  size_t n = span(L, ARG(int32_t, 24));
  CHECK(x, n * 4);
  CHECK(y, n * 4);
  const float *xs = (const float *)(uintptr_t)x;
  float *ys = (float *)(uintptr_t)y;
  for (size_t i = 0; i < n; i++) ys[i] += alpha * xs[i];
  return CUDA_SUCCESS;
}

static CUresult k_scale(const fc_launch *L) {
  CUdeviceptr x = PTR(0);
  float s = ARG(float, 8);
  size_t n = span(L, ARG(int32_t, 12));
  CHECK(x, n * 4);
  float *xs = (float *)(uintptr_t)x;
  for (size_t i = 0; i < n; i++) xs[i] *= s;
  return CUDA_SUCCESS;
}

static CUresult k_sum(const fc_launch *L) {
  CUdeviceptr x = PTR(0), out = PTR(8);
  int32_t n = ARG(int32_t, 16);
  size_t cnt = n > 0 ? (size_t)n : 0;
  CHECK(x, cnt * 4);
  CHECK(out, 4);
  const float *xs = (const float *)(uintptr_t)x;
  double acc = 0;
  for (size_t i = 0; i < cnt; i++) acc += xs[i];
  *(float *)(uintptr_t)out = (float)acc;
  return CUDA_SUCCESS;
}

static uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* out[i] = (mix64(seed ^ mix64((offset + offset_intragraph) ^ mix64(i))) >> 40) / 2^24 */
static CUresult k_philox(const fc_launch *L) {
  CUdeviceptr seedp = PTR(0), offp = PTR(8), out = PTR(24);
  uint32_t intra = ARG(uint32_t, 16);
  size_t n = span(L, ARG(int32_t, 32));
  CHECK(seedp, 8);
  CHECK(offp, 8);
  CHECK(out, n * 4);
  uint64_t seed, off;
  memcpy(&seed, (void *)(uintptr_t)seedp, 8);
  memcpy(&off, (void *)(uintptr_t)offp, 8);
  off += intra;
  float *o = (float *)(uintptr_t)out;
  for (size_t i = 0; i < n; i++) o[i] = (float)(mix64(seed ^ mix64(off ^ mix64(i))) >> 40) * (1.0f / 16777216.0f);
  return CUDA_SUCCESS;
}

static CUresult k_copy(const fc_launch *L) {
  CUdeviceptr dst = PTR(0), src = PTR(8);
  uint64_t n = ARG(uint64_t, 16);
  CHECK(dst, n);
  CHECK(src, n);
  if (n) memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}

/* (void *dst, const void *const *table, u64 n): n bytes from the address stored at `table`, device memory the host
 * writes, as a custom all-reduce's kernel reads its peers' buffers through its registration table (`rank_data`):
 * the address reaches the kernel through memory, not its parameters. */
static CUresult k_copy_indirect(const fc_launch *L) {
  CUdeviceptr dst = PTR(0), table = PTR(8), src;
  uint64_t n = ARG(uint64_t, 16);
  CHECK(table, 8);
  memcpy(&src, (const void *)(uintptr_t)table, 8);
  CHECK(dst, n);
  CHECK(src, n);
  if (n) memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}

static CUresult k_bigsmem(const fc_launch *L) {
  CUdeviceptr out = PTR(0);
  size_t n = span(L, ARG(int32_t, 8));
  CHECK(out, n * 4);
  float *o = (float *)(uintptr_t)out;
  for (size_t i = 0; i < n; i++) o[i] = (float)i;
  return CUDA_SUCCESS;
}

/* struct { float *out; float scale; int n; double bias; } passed by value (24 bytes). */
static CUresult k_struct(const fc_launch *L) {
  CUdeviceptr out = PTR(0);
  float scale = ARG(float, 8);
  size_t n = span(L, ARG(int32_t, 12));
  double bias = ARG(double, 16);
  CHECK(out, n * 4);
  float *o = (float *)(uintptr_t)out;
  for (size_t i = 0; i < n; i++) o[i] = (float)((double)(scale * (float)i) + bias);
  return CUDA_SUCCESS;
}

/* The address and size of variable `index` (image order) of the launched kernel's module. */
static int module_var(const fc_launch *L, uint32_t index, CUdeviceptr *addr, size_t *size) {
  if (!L->mod || index >= L->mod->img.nvars) return -1;
  *addr = L->mod->var_addr[index];
  *size = L->mod->img.vars[index].size;
  return 0;
}

/* (void *out, unsigned index, unsigned long long nbytes): out = the first nbytes of variable `index`. */
static CUresult k_read_var(const fc_launch *L) {
  CUdeviceptr out = PTR(0), var;
  size_t size;
  uint64_t n = ARG(uint64_t, 16);
  if (module_var(L, ARG(uint32_t, 8), &var, &size) || n > size) return CUDA_ERROR_INVALID_VALUE;
  CHECK(out, n);
  if (n) memcpy((void *)(uintptr_t)out, (const void *)(uintptr_t)var, n);
  return CUDA_SUCCESS;
}

/* (const void *src, unsigned index, unsigned long long nbytes): device code writes variable `index`. */
static CUresult k_write_var(const fc_launch *L) {
  CUdeviceptr src = PTR(0), var;
  size_t size;
  uint64_t n = ARG(uint64_t, 16);
  if (module_var(L, ARG(uint32_t, 8), &var, &size) || n > size) return CUDA_ERROR_INVALID_VALUE;
  CHECK(src, n);
  if (n) memcpy((void *)(uintptr_t)var, (const void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}

/* (void *out, unsigned index, unsigned long long nbytes): out = nbytes at the address variable `index`
 * holds in its first 8 bytes (a pointer variable); an address that is not device memory faults. */
static CUresult k_read_var_ptr(const fc_launch *L) {
  CUdeviceptr out = PTR(0), var, target;
  size_t size;
  uint64_t n = ARG(uint64_t, 16);
  if (module_var(L, ARG(uint32_t, 8), &var, &size) || size < 8) return CUDA_ERROR_INVALID_VALUE;
  memcpy(&target, (const void *)(uintptr_t)var, 8);
  CHECK(out, n);
  CHECK(target, n);
  if (n) memcpy((void *)(uintptr_t)out, (const void *)(uintptr_t)target, n);
  return CUDA_SUCCESS;
}

/* (unsigned long long *out, unsigned index, unsigned slot): a call through entry `slot` of a table of device
 * function pointers (variable `index`, as NCCL's ncclDevFuncTable): out = where the called code lies from
 * this load's code base. An entry that is not code of this load (another load's address, written over the
 * loader's) faults, as the call would on a GPU. */
static CUresult k_call_table(const fc_launch *L) {
  CUdeviceptr out = PTR(0), var;
  size_t size;
  uint32_t slot = ARG(uint32_t, 12);
  if (module_var(L, ARG(uint32_t, 8), &var, &size) || (uint64_t)slot * 8 + 8 > size) return CUDA_ERROR_INVALID_VALUE;
  uint64_t target;
  memcpy(&target, (const void *)(uintptr_t)(var + (uint64_t)slot * 8), 8);
  if (target < L->mod->code_base || target >= L->mod->code_base + FC_CODE_SPAN) return CUDA_ERROR_ILLEGAL_ADDRESS;
  CHECK(out, 8);
  uint64_t at = target - L->mod->code_base;
  memcpy((void *)(uintptr_t)out, &at, 8);
  return CUDA_SUCCESS;
}

static const fc_builtin builtins[] = {
    {"fk_fill_f32", k_fill, 3, {0, 8, 12}, {8, 4, 4}, 0},
    {"fk_add_f32", k_add, 4, {0, 8, 16, 24}, {8, 8, 8, 4}, 0},
    {"fk_axpy_f32", k_axpy, 4, {0, 8, 16, 24}, {4, 8, 8, 4}, 0},
    {"fk_scale_f32", k_scale, 3, {0, 8, 12}, {8, 4, 4}, 0},
    {"fk_sum_f32", k_sum, 3, {0, 8, 16}, {8, 8, 4}, 0},
    {"fk_philox_f32", k_philox, 5, {0, 8, 16, 24, 32}, {8, 8, 4, 8, 4}, 0},
    {"fk_copy_bytes", k_copy, 3, {0, 8, 16}, {8, 8, 8}, 0},
    {"fk_copy_indirect", k_copy_indirect, 3, {0, 8, 16}, {8, 8, 8}, 0},
    {"fk_cluster_add_f32", k_add, 4, {0, 8, 16, 24}, {8, 8, 8, 4}, FC_BI_CLUSTER2},
    {"fk_bigsmem_f32", k_bigsmem, 2, {0, 8}, {8, 4}, 0},
    {"fk_struct_arg", k_struct, 1, {0}, {24}, 0},
    {"fk_read_var", k_read_var, 3, {0, 8, 16}, {8, 4, 8}, 0},
    {"fk_write_var", k_write_var, 3, {0, 8, 16}, {8, 4, 8}, 0},
    {"fk_read_var_ptr", k_read_var_ptr, 3, {0, 8, 16}, {8, 4, 8}, 0},
    {"fk_call_table", k_call_table, 3, {0, 8, 12}, {8, 4, 4}, 0},
};

const fc_builtin *fc_builtin_find(const char *name) {
  for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++)
    if (strcmp(builtins[i].name, name) == 0) return &builtins[i];
  return NULL;
}

size_t fc_builtin_argsize(const fc_builtin *b) {
  if (!b || b->nparams == 0) return 0;
  return b->off[b->nparams - 1] + b->size[b->nparams - 1];
}
