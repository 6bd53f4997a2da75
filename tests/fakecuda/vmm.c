/* fakecuda: virtual memory management with real page mappings.
 *
 * Reservations are PROT_NONE anonymous mappings. Physical allocations are ranges of one sparse
 * memfd arena; cuMemMap maps the arena range MAP_SHARED|MAP_FIXED over the reservation (PROT_NONE
 * until cuMemSetAccess), cuMemUnmap puts the PROT_NONE reservation back. An allocation exported as a
 * POSIX file descriptor moves to a memfd of its own (its live mappings remapped onto it), whose
 * descriptor another process imports and maps: the two processes then share its pages, as two
 * processes share a GPU allocation. */
#include "fakecuda.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000 /* Linux >= 4.17; older kernels treat it as a hint */
#endif

#define GRAN (2ull << 20)

typedef struct fc_phys {
  unsigned long long off, size; /* range in the arena (off unused once fd is set) */
  int refs;                     /* handle references (cuMemCreate, cuMemRetainAllocationHandle) */
  int maps;                     /* live mappings */
  int device;                   /* the device it was created on (prop->location.id) */
  int exportable;               /* created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR requested */
  int fd;                       /* -1: in the arena; else a memfd of its own (exported or imported) */
  int imported;                 /* made by cuMemImportFromShareableHandle: another process's memory */
} fc_phys;

typedef struct fc_resv {
  CUdeviceptr base;
  size_t size;
} fc_resv;

typedef struct fc_map {
  CUdeviceptr base;
  size_t size;
  fc_phys *phys;
  size_t offset;
  int prot;
} fc_map;

static int arena_fd = -1;
static unsigned long long arena_size;
static fc_phys **phys;
static size_t nphys, capphys;
static fc_resv *resv;
static size_t nresv, capresv;
static fc_map *maps;
static size_t nmaps, capmaps;

int fc_vmm_range(CUdeviceptr p, CUdeviceptr *base, size_t *size, int *accessible) {
  for (size_t i = 0; i < nmaps; i++) {
    if (p >= maps[i].base && p < maps[i].base + maps[i].size) {
      *base = maps[i].base;
      *size = maps[i].size;
      *accessible = maps[i].prot != PROT_NONE;
      return 0;
    }
  }
  CUdeviceptr next = UINT64_MAX;
  for (size_t i = 0; i < nresv; i++) {
    if (p >= resv[i].base && p < resv[i].base + resv[i].size) return -1;
    if (resv[i].base > p && resv[i].base < next) next = resv[i].base;
  }
  *base = next;
  *size = 0;
  *accessible = 0;
  return 1;
}

static int prop_ok(const CUmemAllocationProp *prop) {
  return prop && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
         prop->location.id >= 0 && prop->location.id < fc_g.device_count;
}

FC_API CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option) {
  if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!g || !prop_ok(prop)) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  *g = GRAN;
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ reservations */
static void *reserve_at(void *addr, size_t size, int fixed_noreplace) {
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (fixed_noreplace ? MAP_FIXED_NOREPLACE : 0);
  return mmap(addr, size, PROT_NONE, flags, -1, 0);
}

static CUresult reserve_impl(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags) {
  if (!ptr || size == 0 || size % GRAN || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (align == 0) align = GRAN;
  if (align & (align - 1)) return CUDA_ERROR_INVALID_VALUE;
  if (!fc_grow((void **)&resv, &capresv, nresv + 1, sizeof(*resv))) return CUDA_ERROR_OUT_OF_MEMORY;
  void *p = MAP_FAILED;
  if (addr && addr % align == 0) {
    p = reserve_at((void *)(uintptr_t)addr, size, 1);
    if (p != MAP_FAILED && (CUdeviceptr)(uintptr_t)p != addr) { /* kernel without MAP_FIXED_NOREPLACE */
      munmap(p, size);
      p = MAP_FAILED;
    }
  }
  if (p == MAP_FAILED) { /* the hint is taken (or absent): any suitably aligned address */
    void *q = reserve_at(NULL, size + align, 0);
    if (q == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t a = ((uintptr_t)q + align - 1) & ~(uintptr_t)(align - 1);
    if (a > (uintptr_t)q) munmap(q, a - (uintptr_t)q);
    uintptr_t tail = (uintptr_t)q + size + align - (a + size);
    if (tail) munmap((void *)(a + size), tail);
    p = (void *)a;
  }
  resv[nresv].base = (CUdeviceptr)(uintptr_t)p;
  resv[nresv].size = size;
  nresv++;
  *ptr = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}

FC_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                    unsigned long long flags) {
  FC_GUARD(reserve_impl(ptr, size, alignment, addr, flags));
}

static CUresult address_free_impl(CUdeviceptr ptr, size_t size) {
  for (size_t i = 0; i < nresv; i++) {
    if (resv[i].base != ptr || resv[i].size != size) continue;
    for (size_t j = 0; j < nmaps; j++)
      if (maps[j].base >= ptr && maps[j].base < ptr + size) return CUDA_ERROR_INVALID_VALUE; /* still mapped */
    munmap((void *)(uintptr_t)ptr, size);
    resv[i] = resv[--nresv];
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

FC_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) { FC_GUARD(address_free_impl(ptr, size)); }

/* ------------------------------------------------------------------ physical memory */
static unsigned long long phys_live(void) {
  unsigned long long t = 0;
  for (size_t i = 0; i < nphys; i++) t += phys[i]->size;
  return t;
}

static int arena_open(void) {
  if (arena_fd >= 0) return 0;
  arena_size = (fc_g.phys_limit + GRAN - 1) / GRAN * GRAN;
  if (arena_size == 0) arena_size = GRAN;
  int fd = memfd_create("fakecuda-vram", MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (ftruncate(fd, (off_t)arena_size) != 0) {
    close(fd);
    return -1;
  }
  arena_fd = fd;
  return 0;
}

/* First fit in the arena; phys[] is kept sorted by offset. */
static int arena_place(unsigned long long size, unsigned long long *off, size_t *at) {
  unsigned long long cur = 0;
  for (size_t i = 0; i <= nphys; i++) {
    unsigned long long next = i < nphys ? phys[i]->off : arena_size;
    if (next - cur >= size) {
      *off = cur;
      *at = i;
      return 0;
    }
    if (i < nphys) cur = phys[i]->off + phys[i]->size;
  }
  return -1;
}

static void phys_maybe_destroy(fc_phys *p) {
  if (p->refs > 0 || p->maps > 0) return;
  if (p->fd >= 0) close(p->fd); /* the pages live on while another process holds the memfd */
  if (!p->imported)
    fallocate(arena_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)p->off, (off_t)p->size);
  for (size_t i = 0; i < nphys; i++) {
    if (phys[i] != p) continue;
    memmove(&phys[i], &phys[i + 1], (nphys - i - 1) * sizeof(*phys));
    nphys--;
    break;
  }
  fc_handle_del(p);
  free(p);
}

static CUresult create_impl(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                            unsigned long long flags) {
  if (!h || size == 0 || size % GRAN || flags != 0 || !prop_ok(prop)) return CUDA_ERROR_INVALID_VALUE;
  if ((unsigned long long)size > fc_g.phys_limit || phys_live() + size > fc_g.phys_limit)
    return CUDA_ERROR_OUT_OF_MEMORY;
  if (arena_open() != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  unsigned long long off;
  size_t at;
  if (arena_place(size, &off, &at) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!fc_grow((void **)&phys, &capphys, nphys + 1, sizeof(*phys))) return CUDA_ERROR_OUT_OF_MEMORY;
  fc_phys *p = calloc(1, sizeof(*p));
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  p->off = off;
  p->size = size;
  p->refs = 1;
  p->device = prop->location.id;
  p->exportable = (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
  p->fd = -1;
  memmove(&phys[at + 1], &phys[at], (nphys - at) * sizeof(*phys));
  phys[at] = p;
  nphys++;
  fc_handle_add(p, FC_K_PHYS);
  *h = (CUmemGenericAllocationHandle)(uintptr_t)p;
  return CUDA_SUCCESS;
}

FC_API CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                            unsigned long long flags) {
  FC_GUARD(create_impl(h, size, prop, flags));
}

static fc_phys *phys_get(CUmemGenericAllocationHandle h) {
  fc_phys *p = (fc_phys *)(uintptr_t)h;
  return fc_is(p, FC_K_PHYS) && p->refs > 0 ? p : NULL;
}

static CUresult release_impl(CUmemGenericAllocationHandle h) {
  fc_phys *p = phys_get(h);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  p->refs--;
  phys_maybe_destroy(p);
  return CUDA_SUCCESS;
}

FC_API CUresult cuMemRelease(CUmemGenericAllocationHandle h) { FC_GUARD(release_impl(h)); }

static CUresult retain_impl(CUmemGenericAllocationHandle *h, void *addr) {
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr a = (CUdeviceptr)(uintptr_t)addr;
  for (size_t i = 0; i < nmaps; i++) {
    if (a >= maps[i].base && a < maps[i].base + maps[i].size) {
      maps[i].phys->refs++;
      *h = (CUmemGenericAllocationHandle)(uintptr_t)maps[i].phys;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

FC_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr) { FC_GUARD(retain_impl(h, addr)); }

static CUresult props_impl(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h) {
  if (!prop || !phys_get(h)) return CUDA_ERROR_INVALID_VALUE;
  memset(prop, 0, sizeof(*prop));
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = phys_get(h)->device;
  if (phys_get(h)->exportable) prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return CUDA_SUCCESS;
}

FC_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h) {
  FC_GUARD(props_impl(prop, h));
}

/* ------------------------------------------------------------------ mappings */
static fc_resv *resv_holding(CUdeviceptr p, size_t n) {
  for (size_t i = 0; i < nresv; i++)
    if (p >= resv[i].base && p + n <= resv[i].base + resv[i].size && p + n > p) return &resv[i];
  return NULL;
}

static CUresult map_impl(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                         unsigned long long flags) {
  fc_phys *p = phys_get(h);
  if (!p || flags != 0 || size == 0 || ptr % GRAN || size % GRAN || offset % GRAN) return CUDA_ERROR_INVALID_VALUE;
  if (offset + size > p->size || offset + size < offset) return CUDA_ERROR_INVALID_VALUE;
  if (!resv_holding(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < nmaps; i++)
    if (ptr < maps[i].base + maps[i].size && maps[i].base < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  if (!fc_grow((void **)&maps, &capmaps, nmaps + 1, sizeof(*maps))) return CUDA_ERROR_OUT_OF_MEMORY;
  int fd = p->fd >= 0 ? p->fd : arena_fd;
  off_t at = p->fd >= 0 ? (off_t)offset : (off_t)(p->off + offset);
  void *q = mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, at);
  if (q == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  maps[nmaps++] = (fc_map){ptr, size, p, offset, PROT_NONE};
  p->maps++;
  return CUDA_SUCCESS;
}

FC_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                         unsigned long long flags) {
  FC_GUARD(map_impl(ptr, size, offset, h, flags));
}

/* Indices of the mappings that exactly tile [ptr, ptr+size); -1 if they do not. */
static int tile(CUdeviceptr ptr, size_t size, size_t *idx, size_t cap, size_t *n) {
  CUdeviceptr cur = ptr, end = ptr + size;
  *n = 0;
  if (size == 0 || end < ptr) return -1;
  while (cur < end) {
    size_t i;
    for (i = 0; i < nmaps; i++)
      if (maps[i].base == cur) break;
    if (i == nmaps || maps[i].base + maps[i].size > end || *n >= cap) return -1;
    idx[(*n)++] = i;
    cur += maps[i].size;
  }
  return 0;
}

static CUresult set_access_impl(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
  if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
  int prot = -1;
  for (size_t i = 0; i < count; i++) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
        desc[i].location.id >= fc_g.device_count)
      return CUDA_ERROR_INVALID_VALUE;
    int pr;
    switch (desc[i].flags) {
      case CU_MEM_ACCESS_FLAGS_PROT_NONE: pr = PROT_NONE; break;
      case CU_MEM_ACCESS_FLAGS_PROT_READ: pr = PROT_READ; break;
      case CU_MEM_ACCESS_FLAGS_PROT_READWRITE: pr = PROT_READ | PROT_WRITE; break;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
    if (pr > prot) prot = pr;
  }
  size_t n, *idx = malloc(sizeof(size_t) * (nmaps + 1));
  if (!idx) return CUDA_ERROR_OUT_OF_MEMORY;
  if (tile(ptr, size, idx, nmaps + 1, &n) != 0) {
    free(idx);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (mprotect((void *)(uintptr_t)ptr, size, prot) != 0) {
    free(idx);
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < n; i++) maps[idx[i]].prot = prot;
  free(idx);
  return CUDA_SUCCESS;
}

FC_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
  FC_GUARD(set_access_impl(ptr, size, desc, count));
}

static CUresult get_access_impl(unsigned long long *flags, const CUmemLocation *loc, CUdeviceptr ptr) {
  if (!flags || !loc) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < nmaps; i++) {
    if (ptr >= maps[i].base && ptr < maps[i].base + maps[i].size) {
      *flags = maps[i].prot == (PROT_READ | PROT_WRITE) ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
               : maps[i].prot == PROT_READ             ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                                       : CU_MEM_ACCESS_FLAGS_PROT_NONE;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

FC_API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *loc, CUdeviceptr ptr) {
  FC_GUARD(get_access_impl(flags, loc, ptr));
}

static CUresult unmap_impl(CUdeviceptr ptr, size_t size) {
  size_t n, *idx = malloc(sizeof(size_t) * (nmaps + 1));
  if (!idx) return CUDA_ERROR_OUT_OF_MEMORY;
  if (tile(ptr, size, idx, nmaps + 1, &n) != 0) {
    free(idx);
    return CUDA_ERROR_INVALID_VALUE;
  }
  mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  /* Remove the tiles, highest index first so swaps do not disturb pending indices. */
  for (size_t a = 0; a < n; a++)
    for (size_t b = a + 1; b < n; b++)
      if (idx[b] > idx[a]) {
        size_t t = idx[a];
        idx[a] = idx[b];
        idx[b] = t;
      }
  for (size_t k = 0; k < n; k++) {
    fc_phys *p = maps[idx[k]].phys;
    maps[idx[k]] = maps[--nmaps];
    p->maps--;
    phys_maybe_destroy(p);
  }
  free(idx);
  return CUDA_SUCCESS;
}

FC_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) { FC_GUARD(unmap_impl(ptr, size)); }

/* ------------------------------------------------------------------ sharing between processes
 * An exported POSIX file descriptor is a real one: the allocation's own memfd (named after its device,
 * "fakecuda-dev<N>", which the importer reads back), duplicated for the caller, who owns it. Importing
 * one, in this process or another, makes a handle on the same pages. An IPC handle (cuIpcGetMemHandle)
 * still only carries the device address it was made for, and opening it gives that address back: it
 * models the legacy IPC calls inside one process. */

/* Moves an arena allocation to a memfd of its own, remapping its live mappings onto it (same addresses,
 * same protection): its pages can then be shared with another process. */
static CUresult phys_to_own_fd(fc_phys *p) {
  if (p->fd >= 0) return CUDA_SUCCESS;
  char name[32];
  snprintf(name, sizeof(name), "fakecuda-dev%d", p->device);
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, (off_t)p->size) != 0) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  char buf[1 << 16];
  for (unsigned long long done = 0; done < p->size;) {
    ssize_t n = pread(arena_fd, buf, sizeof(buf), (off_t)(p->off + done));
    if (n <= 0 || pwrite(fd, buf, (size_t)n, (off_t)done) != n) {
      close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    done += (unsigned long long)n;
  }
  for (size_t i = 0; i < nmaps; i++) {
    if (maps[i].phys != p) continue;
    void *q = mmap((void *)(uintptr_t)maps[i].base, maps[i].size, maps[i].prot, MAP_SHARED | MAP_FIXED, fd,
                   (off_t)maps[i].offset);
    if (q == MAP_FAILED) {
      close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  p->fd = fd;
  return CUDA_SUCCESS;
}

static CUresult export_impl(void *out, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type,
                            unsigned long long flags) {
  fc_phys *p = phys_get(h);
  if (!out || !p || flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
  if (!p->exportable) return CUDA_ERROR_INVALID_VALUE; /* as the driver: not created exportable */
  CUresult r = phys_to_own_fd(p);
  if (r != CUDA_SUCCESS) return r;
  int fd = fcntl(p->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *(int *)out = fd;
  return CUDA_SUCCESS;
}

FC_API CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type,
                                             unsigned long long flags) {
  FC_GUARD(export_impl(out, h, type, flags));
}

static CUresult import_impl(CUmemGenericAllocationHandle *h, void *os_handle, CUmemAllocationHandleType type) {
  int given = (int)(intptr_t)os_handle;
  if (!h || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || given < 0) return CUDA_ERROR_INVALID_VALUE;
  char link[64], target[128];
  snprintf(link, sizeof(link), "/proc/self/fd/%d", given);
  ssize_t n = readlink(link, target, sizeof(target) - 1);
  if (n <= 0) return CUDA_ERROR_INVALID_VALUE;
  target[n] = 0;
  int device = -1;
  if (sscanf(target, "/memfd:fakecuda-dev%d", &device) != 1 || device < 0) return CUDA_ERROR_INVALID_VALUE;
  struct stat st;
  if (fstat(given, &st) != 0 || st.st_size <= 0 || (unsigned long long)st.st_size % GRAN) return CUDA_ERROR_INVALID_VALUE;
  fc_phys *p = calloc(1, sizeof(*p));
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  p->fd = fcntl(given, F_DUPFD_CLOEXEC, 0); /* the caller closes its descriptor, as with the driver */
  if (p->fd < 0) {
    free(p);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  p->size = (unsigned long long)st.st_size;
  p->refs = 1;
  p->device = device;
  p->exportable = 1;
  p->imported = 1;
  fc_handle_add(p, FC_K_PHYS);
  *h = (CUmemGenericAllocationHandle)(uintptr_t)p;
  return CUDA_SUCCESS;
}

FC_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle,
                                               CUmemAllocationHandleType type) {
  FC_GUARD(import_impl(h, os_handle, type));
}

static CUresult ipc_get_impl(CUipcMemHandle *out, CUdeviceptr dptr) {
  if (!out || !dptr) return CUDA_ERROR_INVALID_VALUE;
  memset(out, 0, sizeof(*out));
  memcpy(out->reserved, &dptr, sizeof(dptr));
  return CUDA_SUCCESS;
}

FC_API CUresult cuIpcGetMemHandle(CUipcMemHandle *out, CUdeviceptr dptr) { FC_GUARD(ipc_get_impl(out, dptr)); }

static CUresult ipc_open_impl(CUdeviceptr *out, CUipcMemHandle handle) {
  CUdeviceptr dptr;
  memcpy(&dptr, handle.reserved, sizeof(dptr));
  if (!out || !dptr) return CUDA_ERROR_INVALID_VALUE;
  *out = dptr;
  return CUDA_SUCCESS;
}

FC_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *out, CUipcMemHandle handle, unsigned int flags) {
  (void)flags;
  FC_GUARD(ipc_open_impl(out, handle));
}

FC_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  FC_GUARD(dptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}
