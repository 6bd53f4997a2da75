/* The deterministic allocation region.
 *
 * One virtual range [base, base+size) is reserved at a fixed address. While the region is active,
 * every allocation made in the process (from any thread) on the region's device is placed by a rule
 * that depends only on the sequence of allocation calls, so the same sequence yields the same addresses
 * in every process, and pointers captured into a graph stay valid in another process that reserves the
 * same range:
 *   - an allocation of a granule or more gets the next granularity-aligned offset from a monotonic
 *     cursor and its own physical mapping;
 *   - a smaller one gets the next FDY_REGION_SMALL_ALIGN-aligned slot of the granule small allocations
 *     share now (opened at the cursor when none is open or the slot does not fit), as the driver packs
 *     small cuMemAllocs into shared pages. Mapping a granule for each of them made a process use 64 times
 *     the memory for 4 KiB allocations (docs/DESIGN.md, "Region"), and engines that size their
 *     KV cache from free memory sized it differently under Foundry.
 * Offsets never depend on whether memory was preallocated: preallocation only means the physical pages
 * are already there.
 *
 * Invariants (under `lock`):
 *   chunks  live allocations and carved VMM reservations, sorted by offset, non-overlapping;
 *   units   physical mappings, sorted by offset, non-overlapping, each one cuMemMap call.
 * A unit is owned by a chunk (unmapped with it), by a shared small-allocation granule (unmapped when its
 * last allocation is freed), by the preallocation, by LOAD's restore, or by the application (its own
 * cuMemMap into a carved reservation; never unmapped by us). */
#include <stdlib.h>
#include <string.h>

#include "region_state.h"

fdy_region_t fdy_region_state = {.lock = PTHREAD_MUTEX_INITIALIZER};

int fdy_region_contains(CUdeviceptr p) {
  if (!__atomic_load_n(&R.reserved, __ATOMIC_ACQUIRE)) return 0;
  return p >= R.base && p - R.base < R.size;
}

int fdy_region_is_active(void) { return __atomic_load_n(&R.active, __ATOMIC_ACQUIRE); }

void rg_log_event(uint32_t kind, uint64_t off, uint64_t size, uint64_t span) {
  if (R.nevents == R.capevents) {
    size_t cap = R.capevents ? R.capevents * 2 : 1024;
    fdy_alloc_event *e = realloc(R.events, cap * sizeof(*e));
    if (!e) return; /* the log is for verification; running out of host memory must not fail CUDA */
    R.events = e;
    R.capevents = cap;
  }
  R.events[R.nevents] = (fdy_alloc_event){R.nevents + 1, off, size, span, kind, fdy_gettid()};
  R.nevents++;
}

/* ------------------------------------------------------------ sorted arrays */
static size_t rg_chunk_lower(uint64_t off) { /* first chunk with chunk.off >= off */
  size_t lo = 0, hi = R.nchunks;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (R.chunks[mid].off < off) lo = mid + 1; else hi = mid;
  }
  return lo;
}

/* Inserts `item` (`size` bytes) at index `at` of a growable array of `*n` items; -1 when out of memory. */
static int array_insert(void **items, size_t *n, size_t *cap, size_t size, size_t at, const void *item) {
  if (*n == *cap) {
    size_t grown = *cap ? *cap * 2 : 256;
    void *p = realloc(*items, grown * size);
    if (!p) return -1;
    *items = p;
    *cap = grown;
  }
  uint8_t *base = *items;
  memmove(base + (at + 1) * size, base + at * size, (*n - at) * size);
  memcpy(base + at * size, item, size);
  (*n)++;
  return 0;
}

static void array_remove(void *items, size_t *n, size_t size, size_t at) {
  uint8_t *base = items;
  memmove(base + at * size, base + (at + 1) * size, (*n - at - 1) * size);
  (*n)--;
}

static int rg_chunk_insert(chunk_t c) {
  void *items = R.chunks;
  int rc = array_insert(&items, &R.nchunks, &R.capchunks, sizeof(c), rg_chunk_lower(c.off), &c);
  R.chunks = items;
  return rc;
}

static void rg_chunk_remove(size_t i) { array_remove(R.chunks, &R.nchunks, sizeof(chunk_t), i); }

static long rg_chunk_find(uint64_t off) {
  size_t i = rg_chunk_lower(off);
  return i < R.nchunks && R.chunks[i].off == off ? (long)i : -1;
}

static size_t rg_unit_lower(uint64_t off) { /* first unit ending after off */
  size_t lo = 0, hi = R.nunits;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (R.units[mid].off + R.units[mid].len <= off) lo = mid + 1; else hi = mid;
  }
  return lo;
}

static int rg_unit_insert(unit_t u) {
  u.serial = ++R.unit_serial;
  void *items = R.units;
  int rc = array_insert(&items, &R.nunits, &R.capunits, sizeof(u), rg_unit_lower(u.off), &u);
  R.units = items;
  return rc;
}

static void rg_unit_remove(size_t i) { array_remove(R.units, &R.nunits, sizeof(unit_t), i); }

/* ------------------------------------------------------------ physical mapping */
static int rg_map_one(uint64_t off, uint64_t len, uint32_t owner, uint64_t owner_off) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = R.device;
  /* Exportable, so that another process can map these pages: ipc.c hands them out for cuIpcGetMemHandle (a
   * custom all-reduce's buffers), as NCCL asks for its own peer buffers. */
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h;
  CUdeviceptr at = R.base + off;
  CUresult r = fdy_drv.cuMemCreate(&h, len, &prop, 0);
  if (r != CUDA_SUCCESS)
    return fdy_fail_cu(r, "cuMemCreate",
                       "%llu bytes of device memory for region offset 0x%llx on device %d. The GPU is out of "
                       "memory: free memory, lower the model's memory use, or lower prealloc_size",
                       (unsigned long long)len, (unsigned long long)off, (int)R.device);
  r = fdy_drv.cuMemMap(at, len, 0, h, 0);
  if (r != CUDA_SUCCESS) {
    fdy_drv.cuMemRelease(h);
    return fdy_fail_cu(r, "cuMemMap", "at 0x%llx, %llu bytes (region offset 0x%llx)", (unsigned long long)at,
                       (unsigned long long)len, (unsigned long long)off);
  }
  CUmemAccessDesc access;
  memset(&access, 0, sizeof(access));
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = R.device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = fdy_drv.cuMemSetAccess(at, len, &access, 1);
  /* The mapping keeps the memory alive; the handle is not needed after this point. */
  fdy_drv.cuMemRelease(h);
  if (r != CUDA_SUCCESS) {
    fdy_drv.cuMemUnmap(at, len);
    return fdy_fail_cu(r, "cuMemSetAccess", "at 0x%llx, %llu bytes", (unsigned long long)at, (unsigned long long)len);
  }
  if (rg_unit_insert((unit_t){.off = off, .len = len, .owner_off = owner_off, .owner = owner}) != 0) {
    fdy_drv.cuMemUnmap(at, len);
    return fdy_fail(CUDA_ERROR_OUT_OF_MEMORY, "out of host memory while recording a region mapping");
  }
  R.mapped += len;
  return 0;
}

void rg_unmap_unit(size_t i) {
  unit_t u = R.units[i];
  if (u.owner != OWN_APP) {
    CUresult r = fdy_drv.cuMemUnmap(R.base + u.off, u.len);
    if (r != CUDA_SUCCESS)
      fdy_fail_cu(r, "cuMemUnmap", "region offset 0x%llx, %llu bytes", (unsigned long long)u.off,
                  (unsigned long long)u.len);
    R.mapped -= u.len;
  }
  rg_unit_remove(i);
}

/* owner_off of the units a rg_map_gaps call is still making (real owner offsets are below R.size). */
#define UNIT_PENDING UINT64_MAX

/* Maps every part of [off, off+len) not mapped yet. On failure, what this call mapped is undone.
 * The new units carry UNIT_PENDING until the call succeeds: undoing "every unit of this owner in the
 * range" also unmapped units an earlier call had mapped (a failed LOAD restore of [0, 12 MiB) undid
 * an earlier restore of [4, 6 MiB), whose memory the program was using; tests/cpu/test_region_restore.py). */
int rg_map_gaps(uint64_t off, uint64_t len, uint32_t owner, uint64_t owner_off) {
  uint64_t at = off, end = off + len;
  int rc = 0;
  while (at < end && rc == 0) {
    size_t i = rg_unit_lower(at);
    if (i < R.nunits && R.units[i].off <= at) {
      at = R.units[i].off + R.units[i].len;
      continue;
    }
    uint64_t gap_end = i < R.nunits && R.units[i].off < end ? R.units[i].off : end;
    rc = rg_map_one(at, gap_end - at, owner, UNIT_PENDING);
    at = gap_end;
  }
  for (size_t i = rg_unit_lower(off); i < R.nunits && R.units[i].off < end;) {
    if (R.units[i].owner_off != UNIT_PENDING) {
      i++;
    } else if (rc == 0) {
      R.units[i++].owner_off = owner_off;
    } else {
      rg_unmap_unit(i); /* removes unit i; the next one moves into its place */
    }
  }
  return rc;
}

void rg_unmap_owned(uint32_t owner, uint64_t owner_off) {
  for (size_t i = R.nunits; i-- > 0;)
    if (R.units[i].owner == owner && R.units[i].owner_off == owner_off) rg_unmap_unit(i);
}

/* LOAD restored [off, off+len): the graphs read SAVE's memory there for as long as the process lives. A
 * shared small-allocation granule in that range becomes the restore's, so that freeing this process's own
 * small allocations in it (which need not be SAVE's) never unmaps the SAVE allocations beside them. */
void rg_adopt_units(uint64_t off, uint64_t len) {
  for (size_t i = rg_unit_lower(off); i < R.nunits && R.units[i].off < off + len; i++)
    if (R.units[i].owner == OWN_PACK) {
      R.units[i].owner_off = 0;
      R.units[i].owner = OWN_RESTORE;
    }
}

static int rg_on_region_device(void) {
  CUdevice dev;
  return fdy_drv.cuCtxGetDevice(&dev) == CUDA_SUCCESS && dev == R.device;
}

/* ------------------------------------------------------------ hook entry points */
static int rg_refuse_full(uint64_t off, size_t size, uint64_t span, CUresult *res) {
  rg_log_event(FDY_EV_REFUSED, off, size, span);
  fdy_fail(FDY_ERR_REGION_FULL,
           "an allocation of %zu bytes escapes the Foundry region [0x%llx, 0x%llx): %llu bytes are used and "
           "%llu remain. Next step: pass a larger size to set_allocation_region()/allocation_region() "
           "(virtual space is cheap; 2-4x the GPU's memory is a good size).",
           size, (unsigned long long)R.base, (unsigned long long)(R.base + R.size), (unsigned long long)off,
           (unsigned long long)(R.size - (off < R.size ? off : R.size)));
  *res = CUDA_ERROR_OUT_OF_MEMORY;
  return 1;
}

static int rg_refuse_mapping(int rc, uint64_t off, size_t size, uint64_t span, CUresult *res) {
  rg_log_event(FDY_EV_REFUSED, off, size, span);
  *res = rc == CUDA_ERROR_OUT_OF_MEMORY || rc >= FDY_ERR_NO_DRIVER ? CUDA_ERROR_OUT_OF_MEMORY : (CUresult)rc;
  return 1;
}

/* The first offset at or after `off`, a multiple of `align`, where `span` bytes overlap no live chunk.
 * Above the cursor nothing is live unless the cursor was moved back below live memory (LOAD resuming at
 * SAVE's phase boundary, with memory of its own allocated past SAVE's in between): placement then steps
 * over what is live, so no memory is handed out twice, and where a step changes an offset SAVE recorded,
 * LOAD's phase check names it. Chunks are sorted by offset and do not overlap. */
static uint64_t rg_skip_live(uint64_t off, uint64_t span, uint64_t align) {
  size_t i = rg_chunk_lower(off);
  if (i > 0 && R.chunks[i - 1].off + R.chunks[i - 1].span > off) i--; /* one that starts below and reaches in */
  for (; i < R.nchunks; i++) {
    uint64_t start = R.chunks[i].off, end = start + R.chunks[i].span;
    if (end <= off) continue;
    if (start >= off + span) break;
    off = rg_round_up(end, align);
  }
  return off;
}

static int rg_open_pack(uint64_t taken, uint64_t *g);

/* Where an allocation of `size` bytes goes (*off, *span), mapping what it needs; 1 with *res set when it is
 * refused. Caller holds R.lock. */
static int rg_place(size_t size, uint64_t *off, uint64_t *span, CUresult *res) {
  if (size >= R.gran) {
    *span = rg_round_up(size, R.gran);
    *off = rg_skip_live(rg_round_up(R.cursor, R.gran), *span, R.gran);
    if (*off > R.size || *span > R.size - *off) return rg_refuse_full(*off, size, *span, res);
    int rc = rg_map_gaps(*off, *span, OWN_CHUNK, *off);
    if (rc != 0) return rg_refuse_mapping(rc, *off, size, *span, res);
    R.cursor = *off + *span;
    return 0;
  }
  *span = rg_round_up(size, FDY_REGION_SMALL_ALIGN);
  if (!R.pack_open || *span > R.gran - R.pack_used) {
    uint64_t g;
    int rc = rg_open_pack(0, &g);
    if (rc == FDY_ERR_REGION_FULL) return rg_refuse_full(g, size, R.gran, res); /* a refusal logs it */
    if (rc != 0) return rg_refuse_mapping(rc, g, size, R.gran, res);
  }
  *off = R.pack_off + R.pack_used;
  R.pack_used += *span;
  return 0;
}

/* Maps the granule at the cursor as the one small allocations share from now on, with its first `taken` bytes
 * counted as used (*g: its offset). FDY_ERR_REGION_FULL past the region's end, else rg_map_gaps's answer. */
static int rg_open_pack(uint64_t taken, uint64_t *g) {
  *g = rg_skip_live(rg_round_up(R.cursor, R.gran), R.gran, R.gran);
  if (*g > R.size || R.gran > R.size - *g) return FDY_ERR_REGION_FULL;
  int rc = rg_map_gaps(*g, R.gran, OWN_PACK, *g);
  if (rc != 0) return rc;
  R.pack_open = 1;
  R.pack_off = *g;
  R.pack_used = taken;
  R.cursor = *g + R.gran;
  return 0;
}

FDY_EXPORT int fdy_region_open_pack(uint64_t room) {
  pthread_mutex_lock(&R.lock);
  int rc = 0;
  room = (room < R.gran ? room : R.gran) / FDY_REGION_SMALL_ALIGN * FDY_REGION_SMALL_ALIGN;
  if (!R.reserved || !R.active) {
    rc = fdy_fail(FDY_ERR_REGION_STATE, "open_small_allocation_granule(): no active region. Next step: call it "
                                        "after set_allocation_region().");
  } else if (room > 0) {
    uint64_t g;
    rc = rg_open_pack(R.gran - room, &g);
    if (rc == FDY_ERR_REGION_FULL) {
      rc = fdy_fail(rc, "open_small_allocation_granule(): the region [0x%llx, 0x%llx) has no granule left at "
                        "offset 0x%llx. Next step: pass a larger size to set_allocation_region().",
                    (unsigned long long)R.base, (unsigned long long)(R.base + R.size), (unsigned long long)g);
    }
  }
  pthread_mutex_unlock(&R.lock);
  return rc;
}

/* The granule a small allocation at `off` shares, when it holds no allocation but the chunk at index i:
 * freeing that chunk gives the granule back. */
static int rg_last_in_granule(size_t i) {
  uint64_t g = R.chunks[i].off / R.gran * R.gran;
  return (i == 0 || R.chunks[i - 1].off < g) && (i + 1 == R.nchunks || R.chunks[i + 1].off >= g + R.gran);
}

int fdy_region_alloc(CUdeviceptr *dptr, size_t size, uint32_t kind, CUresult *res) {
  if (!fdy_region_is_active()) return 0;
  pthread_mutex_lock(&R.lock);
  if (!R.active || !rg_on_region_device()) {
    pthread_mutex_unlock(&R.lock);
    return 0; /* stopped meanwhile, or another device: the region covers one device */
  }
  if (!dptr || size == 0) {
    pthread_mutex_unlock(&R.lock);
    *res = CUDA_ERROR_INVALID_VALUE;
    return 1;
  }
  uint64_t off = 0, span = 0;
  if (rg_place(size, &off, &span, res)) {
    pthread_mutex_unlock(&R.lock);
    return 1;
  }
  if (rg_chunk_insert((chunk_t){off, span, size, kind}) != 0) {
    /* Out of host memory: what rg_place mapped for this chunk alone is given back. A shared granule stays
     * mapped and open with the slot spent, as placement must not depend on whether host memory ran out. */
    if (span >= R.gran) rg_unmap_owned(OWN_CHUNK, off);
    pthread_mutex_unlock(&R.lock);
    *res = CUDA_ERROR_OUT_OF_MEMORY;
    return 1;
  }
  if (R.cursor > R.hwm) R.hwm = R.cursor;
  rg_log_event(kind, off, size, span);
  *dptr = R.base + off;
  pthread_mutex_unlock(&R.lock);
  *res = CUDA_SUCCESS;
  return 1;
}

int fdy_region_free(CUdeviceptr ptr, uint32_t kind, CUresult *res) {
  if (!fdy_region_contains(ptr)) return 0;
  pthread_mutex_lock(&R.lock);
  uint64_t off = ptr - R.base;
  long i = rg_chunk_find(off);
  if (i < 0 || R.chunks[i].kind == FDY_EV_VMM_RESERVE) {
    pthread_mutex_unlock(&R.lock);
    fdy_fail(FDY_ERR_INVALID,
             "free of 0x%llx: not the start of a live allocation in the Foundry region (offset 0x%llx). A "
             "double free, or a pointer that was not returned by an allocation.",
             (unsigned long long)ptr, (unsigned long long)off);
    *res = CUDA_ERROR_INVALID_VALUE;
    return 1;
  }
  /* A small allocation gives back the granule it shares only when it is the granule's last; the granule
   * is closed then even where it owns no mapping (preallocated or restored), so that placement does not
   * depend on which pages were mapped already. */
  int small = R.chunks[i].span < R.gran, last = small && rg_last_in_granule((size_t)i);
  uint32_t owner = small ? OWN_PACK : OWN_CHUNK;
  uint64_t owner_off = small ? off / R.gran * R.gran : off;
  /* cuMemFree implicitly synchronizes; unmapping memory that queued work may still touch would not.
   * Memory that stays mapped (a shared granule still in use, the preallocation) needs no synchronization. */
  int owns_units = 0;
  for (size_t u = 0; u < R.nunits && !owns_units && (!small || last); u++)
    owns_units = R.units[u].owner == owner && R.units[u].owner_off == owner_off;
  CUresult s = owns_units ? fdy_drv.cuCtxSynchronize() : CUDA_SUCCESS;
  if (s != CUDA_SUCCESS) {
    pthread_mutex_unlock(&R.lock);
    *res = s;
    fdy_fail_cu(s, "cuCtxSynchronize", "before freeing region memory at 0x%llx", (unsigned long long)ptr);
    return 1;
  }
  if (!small || last) rg_unmap_owned(owner, owner_off);
  if (last && R.pack_open && R.pack_off == owner_off) R.pack_open = 0;
  rg_log_event(kind, off, R.chunks[i].size, R.chunks[i].span);
  rg_chunk_remove((size_t)i);
  pthread_mutex_unlock(&R.lock);
  *res = CUDA_SUCCESS;
  return 1;
}

int fdy_region_address_range(CUdeviceptr ptr, CUdeviceptr *pbase, size_t *psize, CUresult *res) {
  if (!fdy_region_contains(ptr)) return 0;
  pthread_mutex_lock(&R.lock);
  uint64_t off = ptr - R.base;
  size_t i = rg_chunk_lower(off + 1);
  int found = 0;
  if (i > 0 && off < R.chunks[i - 1].off + R.chunks[i - 1].span && R.chunks[i - 1].kind != FDY_EV_VMM_RESERVE) {
    if (pbase) *pbase = R.base + R.chunks[i - 1].off;
    if (psize) *psize = R.chunks[i - 1].size;
    found = 1;
  }
  pthread_mutex_unlock(&R.lock);
  if (!found) return 0; /* restored or application-mapped memory: let the driver answer */
  *res = CUDA_SUCCESS;
  return 1;
}

int fdy_region_unit_range(CUdeviceptr ptr, int restored_only, CUdeviceptr *pbase, size_t *psize) {
  if (!fdy_region_contains(ptr)) return 0;
  pthread_mutex_lock(&R.lock);
  uint64_t off = ptr - R.base;
  size_t i = rg_unit_lower(off);
  int found = i < R.nunits && R.units[i].off <= off && (!restored_only || R.units[i].owner == OWN_RESTORE);
  if (found) {
    *pbase = R.base + R.units[i].off;
    *psize = R.units[i].len;
  }
  pthread_mutex_unlock(&R.lock);
  return found;
}

int fdy_region_vmm_reserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr, CUresult *res) {
  if (!fdy_region_is_active() || (addr && !fdy_region_contains(addr))) return 0;
  pthread_mutex_lock(&R.lock);
  if (!R.active || !rg_on_region_device()) {
    pthread_mutex_unlock(&R.lock);
    return 0;
  }
  uint64_t a = align > R.gran ? rg_round_up(align, R.gran) : R.gran;
  uint64_t span = rg_round_up(size ? size : 1, R.gran), off = rg_skip_live(rg_round_up(R.cursor, a), span, a);
  if (off > R.size || span > R.size - off) {
    rg_log_event(FDY_EV_REFUSED, off, size, span);
    fdy_fail(FDY_ERR_REGION_FULL,
             "cuMemAddressReserve of %zu bytes (PyTorch expandable segments reserve large ranges) escapes the "
             "Foundry region at 0x%llx of %llu bytes. Next step: a larger region size.",
             size, (unsigned long long)R.base, (unsigned long long)R.size);
    pthread_mutex_unlock(&R.lock);
    *res = CUDA_ERROR_OUT_OF_MEMORY;
    return 1;
  }
  if (R.prealloc_size && off < R.prealloc_off + R.prealloc_size && R.prealloc_off < off + span) {
    /* The preallocation's pages are mapped already, so the application's own cuMemMap into this
     * reservation would fail; skipping the preallocated range instead would make offsets depend on
     * whether memory was preallocated. */
    rg_log_event(FDY_EV_REFUSED, off, size, span);
    fdy_fail(FDY_ERR_UNSUPPORTED,
             "cuMemAddressReserve of %zu bytes (PyTorch expandable segments) would lie inside the preallocated "
             "range of the Foundry region, whose pages are mapped already. Next step: drop prealloc_size, or "
             "unset PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
             size);
    pthread_mutex_unlock(&R.lock);
    *res = CUDA_ERROR_NOT_SUPPORTED;
    return 1;
  }
  if (rg_chunk_insert((chunk_t){off, span, size, FDY_EV_VMM_RESERVE}) != 0) {
    pthread_mutex_unlock(&R.lock);
    *res = CUDA_ERROR_OUT_OF_MEMORY;
    return 1;
  }
  R.cursor = off + span;
  if (R.cursor > R.hwm) R.hwm = R.cursor;
  rg_log_event(FDY_EV_VMM_RESERVE, off, size, span);
  *ptr = R.base + off;
  pthread_mutex_unlock(&R.lock);
  *res = CUDA_SUCCESS;
  return 1;
}

int fdy_region_vmm_free(CUdeviceptr ptr, size_t size, CUresult *res) {
  if (!fdy_region_contains(ptr)) return 0;
  pthread_mutex_lock(&R.lock);
  long i = rg_chunk_find(ptr - R.base);
  if (i < 0 || R.chunks[i].kind != FDY_EV_VMM_RESERVE) {
    pthread_mutex_unlock(&R.lock);
    fdy_fail(FDY_ERR_INVALID, "cuMemAddressFree(0x%llx, %zu): not a reservation carved from the Foundry region",
             (unsigned long long)ptr, size);
    *res = CUDA_ERROR_INVALID_VALUE;
    return 1;
  }
  /* The driver refuses to free a reservation that still has mappings. Accepting it here forgot the
   * reservation while the application's pages stayed mapped in the region (and made the region's own
   * cuMemAddressFree fail at release); tests/cpu/test_region_driver_apis.py. */
  for (size_t u = rg_unit_lower(R.chunks[i].off); u < R.nunits && R.units[u].off < R.chunks[i].off + R.chunks[i].span;
       u++) {
    if (R.units[u].owner != OWN_APP) continue;
    pthread_mutex_unlock(&R.lock);
    fdy_fail(FDY_ERR_INVALID,
             "cuMemAddressFree(0x%llx, %zu): the reservation still has mappings (region offset 0x%llx); "
             "cuMemUnmap them first",
             (unsigned long long)ptr, size, (unsigned long long)R.units[u].off);
    *res = CUDA_ERROR_INVALID_VALUE;
    return 1;
  }
  rg_log_event(FDY_EV_VMM_FREE, R.chunks[i].off, R.chunks[i].size, R.chunks[i].span);
  rg_chunk_remove((size_t)i);
  pthread_mutex_unlock(&R.lock);
  *res = CUDA_SUCCESS;
  return 1;
}

/* mapped: 1 after the application mapped, 0 after it unmapped, -1 before it maps (restored pages in
 * the way are given up: the application's own mapping wins). */
void fdy_region_note_map(CUdeviceptr ptr, size_t size, int mapped) {
  pthread_mutex_lock(&R.lock);
  uint64_t off = ptr - R.base, end = off + size;
  if (mapped == 1) {
    if (rg_unit_insert((unit_t){.off = off, .len = size, .owner = OWN_APP}) == 0)
      rg_log_event(FDY_EV_VMM_MAP, off, size, size);
  } else {
    for (size_t i = R.nunits; i-- > 0;) {
      unit_t u = R.units[i];
      if (u.off >= end || u.off + u.len <= off) continue;
      if ((mapped == 0 && u.owner == OWN_APP) || (mapped == -1 && u.owner == OWN_RESTORE)) rg_unmap_unit(i);
    }
    if (mapped == 0) rg_log_event(FDY_EV_VMM_UNMAP, off, size, size);
  }
  pthread_mutex_unlock(&R.lock);
}

int fdy_region_refuse(size_t size, const char *what, CUresult *res) {
  if (!fdy_region_is_active()) return 0;
  pthread_mutex_lock(&R.lock);
  rg_log_event(FDY_EV_REFUSED, R.cursor, size, 0);
  pthread_mutex_unlock(&R.lock);
  fdy_fail(FDY_ERR_UNSUPPORTED, "Foundry region refused an allocation of %zu bytes: %s", size, what);
  *res = CUDA_ERROR_NOT_SUPPORTED;
  return 1;
}


int fdy_region_in_reservation(CUdeviceptr ptr, size_t size) {
  if (!fdy_region_contains(ptr) || size == 0) return 0;
  pthread_mutex_lock(&R.lock);
  uint64_t off = ptr - R.base;
  size_t i = rg_chunk_lower(off + 1);
  int inside = i > 0 && R.chunks[i - 1].kind == FDY_EV_VMM_RESERVE && off + size <= R.chunks[i - 1].off + R.chunks[i - 1].span &&
               off + size > off;
  pthread_mutex_unlock(&R.lock);
  return inside;
}
