/* The region's control API (set, hold, stop, resume, release, cursor, preallocation, LOAD's restore,
 * the allocation log). The allocation engine and its invariants are in region.c. */
#include <stdlib.h>
#include <string.h>

#include "region_state.h"

/* Gives back the range fdy_region_hold reserved, if any. Caller holds R.lock. */
static void drop_hold(void) {
  if (!R.held_size) return;
  fdy_drv.cuMemAddressFree(R.held_base, R.held_size);
  R.held_base = 0;
  R.held_size = 0;
}

FDY_EXPORT int fdy_region_set(uint64_t base, uint64_t size) {
  int rc = fdy_driver_ensure();
  if (rc) return rc;
  pthread_mutex_lock(&R.lock);
  if (R.reserved) {
    rc = fdy_fail(FDY_ERR_REGION_STATE,
                  "a Foundry region is already reserved at 0x%llx (%llu bytes); call resume_allocation_region() "
                  "to reuse it, or release it first",
                  (unsigned long long)R.base, (unsigned long long)R.size);
    goto out;
  }
  CUdevice dev;
  CUresult r = fdy_drv.cuCtxGetDevice(&dev);
  if (r != CUDA_SUCCESS) {
    rc = fdy_fail_cu(r, "cuCtxGetDevice",
                     "set_allocation_region needs a current CUDA context: initialise CUDA first (torch.cuda.init())");
    goto out;
  }
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t gran = 0;
  r = fdy_drv.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS || gran == 0) {
    rc = fdy_fail_cu(r, "cuMemGetAllocationGranularity", "device %d: virtual memory management unsupported?", (int)dev);
    goto out;
  }
  if (base == 0 || base % gran != 0 || size == 0 || base + size < base) {
    rc = fdy_fail(FDY_ERR_INVALID,
                  "region base 0x%llx / size %llu invalid: the base must be a non-zero multiple of the device's "
                  "mapping granularity (%zu bytes) and the range must not wrap",
                  (unsigned long long)base, (unsigned long long)size, gran);
    goto out;
  }
  size = rg_round_up(size, gran);
  CUdeviceptr got = 0;
  uint64_t reserve_size = size;
  if (R.held_size && R.held_base == base && R.held_size >= size) {
    got = base; /* adopt the range fdy_region_hold reserved before the program loaded anything */
    reserve_size = R.held_size;
    R.held_base = 0;
    R.held_size = 0;
    goto adopt;
  }
  drop_hold(); /* a hold for another range: give it back first */
  r = fdy_drv.cuMemAddressReserve(&got, size, gran, base, 0);
  if (r != CUDA_SUCCESS) {
    rc = fdy_fail_cu(r, "cuMemAddressReserve",
                     "%llu bytes at 0x%llx. Next step: a smaller region size, or another base address",
                     (unsigned long long)size, (unsigned long long)base);
    goto out;
  }
  if (got != base) {
    fdy_drv.cuMemAddressFree(got, size);
    rc = fdy_fail(FDY_ERR_BASE_TAKEN,
                  "the region base 0x%llx is not available: the driver placed the %llu-byte reservation at 0x%llx "
                  "instead, so [0x%llx, 0x%llx) is (partly) in use in this process. Next step: choose another "
                  "base (0x600000000000 or 0x700000000000 are usually free on Linux, away from where shared "
                  "libraries are mapped) and use the same one for SAVE and LOAD.",
                  (unsigned long long)base, (unsigned long long)size, (unsigned long long)got,
                  (unsigned long long)base, (unsigned long long)(base + size));
    goto out;
  }
adopt:
  R.base = base;
  R.size = size;
  R.reserve_size = reserve_size;
  R.gran = gran;
  R.device = dev;
  R.cursor = R.hwm = R.mapped = 0;
  R.prealloc_off = R.prealloc_size = 0;
  R.pack_open = 0;
  R.nchunks = R.nunits = 0;
  R.nevents = 0; /* the log describes this region: a released one's entries would read as live */
  __atomic_store_n(&R.reserved, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&R.active, 1, __ATOMIC_RELEASE);
out:
  pthread_mutex_unlock(&R.lock);
  return rc;
}

/* Reserves [base, base+size) before the region is set, so that nothing the program does first (loading
 * kernel images, the driver's own reservations) can take the range: LOAD's images are loaded before
 * set_allocation_region in the seed README's order. fdy_region_set adopts it. */
FDY_EXPORT int fdy_region_hold(uint64_t base, uint64_t size) {
  int rc = fdy_driver_ensure();
  if (rc) return rc;
  pthread_mutex_lock(&R.lock);
  if (R.reserved || R.held_size) {
    pthread_mutex_unlock(&R.lock);
    return 0; /* a region or a hold exists already: nothing to do */
  }
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUdevice dev = 0;
  fdy_drv.cuCtxGetDevice(&dev);
  prop.location.id = dev;
  size_t gran = 0;
  CUresult r = fdy_drv.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS || !gran || base % gran) {
    pthread_mutex_unlock(&R.lock);
    return fdy_fail(FDY_ERR_INVALID, "cannot hold region 0x%llx: no granularity or a misaligned base", (unsigned long long)base);
  }
  size = rg_round_up(size, gran);
  CUdeviceptr got = 0;
  r = fdy_drv.cuMemAddressReserve(&got, size, gran, base, 0);
  if (r == CUDA_SUCCESS && got != base) {
    fdy_drv.cuMemAddressFree(got, size);
    r = CUDA_ERROR_INVALID_VALUE;
  }
  if (r == CUDA_SUCCESS) {
    R.held_base = base;
    R.held_size = size;
  }
  pthread_mutex_unlock(&R.lock);
  return r == CUDA_SUCCESS ? 0 : fdy_fail(FDY_ERR_BASE_TAKEN, "region 0x%llx could not be held: already in use", (unsigned long long)base);
}

/* Under the lock, so that a resume racing release cannot leave the region active over a freed range. */
static int set_active(int active) {
  pthread_mutex_lock(&R.lock);
  int reserved = R.reserved;
  if (reserved) __atomic_store_n(&R.active, active, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&R.lock);
  return reserved;
}

FDY_EXPORT int fdy_region_stop(void) {
  if (!set_active(0)) return fdy_fail(FDY_ERR_REGION_STATE, "stop_allocation_region(): no region is set");
  return 0;
}

FDY_EXPORT int fdy_region_resume(void) {
  if (!set_active(1))
    return fdy_fail(FDY_ERR_REGION_STATE, "resume_allocation_region(): no region was set; call set_allocation_region()");
  return 0;
}

FDY_EXPORT int fdy_region_release(void) {
  int rc = fdy_driver_ensure();
  if (rc) return rc;
  pthread_mutex_lock(&R.lock);
  drop_hold(); /* a hold never adopted by set_allocation_region() */
  if (!R.reserved) {
    pthread_mutex_unlock(&R.lock);
    return 0;
  }
  __atomic_store_n(&R.active, 0, __ATOMIC_RELEASE);
  fdy_drv.cuCtxSynchronize();
  while (R.nunits) rg_unmap_unit(R.nunits - 1);
  CUresult r = fdy_drv.cuMemAddressFree(R.base, R.reserve_size);
  if (r != CUDA_SUCCESS) rc = fdy_fail_cu(r, "cuMemAddressFree", "region at 0x%llx", (unsigned long long)R.base);
  R.nchunks = 0;
  R.prealloc_off = R.prealloc_size = 0;
  R.pack_open = 0;
  __atomic_store_n(&R.reserved, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&R.lock);
  return rc;
}

FDY_EXPORT int fdy_region_info_get(fdy_region_info *out) {
  if (!out) return FDY_ERR_INVALID;
  pthread_mutex_lock(&R.lock);
  *out = (fdy_region_info){R.base, R.size, R.cursor, R.hwm, R.gran, R.mapped, R.prealloc_off, R.prealloc_size,
                           (int32_t)R.device, R.active, R.reserved, FDY_REGION_SMALL_ALIGN};
  pthread_mutex_unlock(&R.lock);
  return 0;
}

FDY_EXPORT int fdy_region_set_cursor(uint64_t offset) {
  pthread_mutex_lock(&R.lock);
  int rc = 0;
  if (!R.reserved) {
    rc = fdy_fail(FDY_ERR_REGION_STATE, "set_current_alloc_offset(): no region is set");
  } else {
    uint64_t off = rg_round_up(offset, R.gran);
    if (off > R.size) {
      rc = fdy_fail(FDY_ERR_INVALID, "set_current_alloc_offset(0x%llx): beyond the region size %llu",
                    (unsigned long long)offset, (unsigned long long)R.size);
    } else {
      /* Below live memory too: placement steps over it (rg_skip_live). Small allocations start a fresh
       * granule after a cursor move, even one to where the cursor is: a program that moves the cursor in one
       * run (LOAD resuming at SAVE's phase boundary) and marks the same boundary with a move to the cursor
       * itself in the other places the next phase's small allocations alike in both. */
      R.cursor = off;
      R.pack_open = 0;
      rg_log_event(FDY_EV_CURSOR, off, 0, 0);
    }
  }
  pthread_mutex_unlock(&R.lock);
  return rc;
}

FDY_EXPORT int fdy_region_preallocate(uint64_t size) {
  pthread_mutex_lock(&R.lock);
  int rc = 0;
  if (!R.reserved) {
    rc = fdy_fail(FDY_ERR_REGION_STATE, "preallocate_region(): no region is set");
  } else if (R.prealloc_size) {
    rc = fdy_fail(FDY_ERR_REGION_STATE, "preallocate_region(): memory is already preallocated (%llu bytes)",
                  (unsigned long long)R.prealloc_size);
  } else {
    uint64_t off = rg_round_up(R.cursor, R.gran), span = rg_round_up(size, R.gran);
    if (span == 0 || off > R.size || span > R.size - off) {
      rc = fdy_fail(FDY_ERR_REGION_FULL, "preallocate_region(%llu): does not fit in the %llu bytes left in the region",
                    (unsigned long long)size, (unsigned long long)(R.size - (off < R.size ? off : R.size)));
    } else if ((rc = rg_map_gaps(off, span, OWN_PREALLOC, 0)) == 0) {
      R.prealloc_off = off;
      R.prealloc_size = span;
      rg_log_event(FDY_EV_PREALLOC, off, size, span);
    }
  }
  pthread_mutex_unlock(&R.lock);
  return rc;
}

FDY_EXPORT int fdy_region_free_preallocated(void) {
  pthread_mutex_lock(&R.lock);
  int rc = 0;
  if (!R.prealloc_size) {
    rc = fdy_fail(FDY_ERR_REGION_STATE, "free_preallocated_region(): nothing is preallocated");
  } else {
    size_t live = 0;
    for (size_t i = 0; i < R.nchunks; i++)
      if (R.chunks[i].off < R.prealloc_off + R.prealloc_size && R.chunks[i].off + R.chunks[i].span > R.prealloc_off)
        live++;
    if (live) {
      rc = fdy_fail(FDY_ERR_REGION_STATE,
                    "free_preallocated_region(): %zu allocations still live in the preallocated range; free them "
                    "first (for PyTorch: delete the tensors, then torch.cuda.empty_cache())",
                    live);
    } else {
      fdy_drv.cuCtxSynchronize();
      rg_unmap_owned(OWN_PREALLOC, 0);
      rg_log_event(FDY_EV_PREALLOC_FREE, R.prealloc_off, R.prealloc_size, R.prealloc_size);
      R.prealloc_off = R.prealloc_size = 0;
    }
  }
  pthread_mutex_unlock(&R.lock);
  return rc;
}

FDY_EXPORT int fdy_region_map_range(uint64_t offset, uint64_t size) {
  pthread_mutex_lock(&R.lock);
  int rc = 0;
  if (!R.reserved) {
    rc = fdy_fail(FDY_ERR_REGION_STATE, "no region is set: call set_allocation_region() with the SAVE base first");
  } else {
    uint64_t off = offset / R.gran * R.gran, end = rg_round_up(offset + size, R.gran);
    if (end > R.size || end < off)
      rc = fdy_fail(FDY_ERR_REGION_FULL,
                    "restoring [0x%llx, +%llu) needs a region of at least %llu bytes; this one has %llu. Use the "
                    "region size SAVE used",
                    (unsigned long long)offset, (unsigned long long)size, (unsigned long long)end,
                    (unsigned long long)R.size);
    else if ((rc = rg_map_gaps(off, end - off, OWN_RESTORE, 0)) == 0) {
      rg_adopt_units(off, end - off);
      rg_log_event(FDY_EV_RESTORE, off, size, end - off);
    }
  }
  pthread_mutex_unlock(&R.lock);
  return rc;
}

FDY_EXPORT size_t fdy_region_events(size_t first, fdy_alloc_event *out, size_t cap) {
  pthread_mutex_lock(&R.lock);
  size_t total = R.nevents;
  for (size_t i = 0; out && i < cap && first + i < total; i++) out[i] = R.events[first + i];
  pthread_mutex_unlock(&R.lock);
  return total;
}

/* Natively, the first small cudaMalloc after a memory snapshot may cost nothing: the driver packs small
 * allocations into a page, and one partly used before the snapshot takes them. The region's own granule for
 * them costs a granule when opened; an engine that sizes its KV cache from memory grown since a snapshot (vLLM)
 * then sizes it a granule smaller than natively. This measures the driver's room so that the region can open
 * its granule before the snapshot with as much room (fdy_region_open_pack): the driver's page size is not
 * documented, so the room is counted, 4 KiB at a time, until the device's free memory drops. */
#define FDY_ROOM_STEP 4096
#define FDY_ROOM_MAX_STEPS 1024

FDY_EXPORT int fdy_region_driver_room(uint64_t *room) {
  if (!room) return FDY_ERR_INVALID;
  ENSURE_DRIVER();
  *room = 0;
  size_t free0 = 0, total = 0, now = 0;
  CUresult r = fdy_drv.cuMemGetInfo_v2(&free0, &total);
  if (r != CUDA_SUCCESS) return fdy_fail_cu(r, "cuMemGetInfo", "measuring the driver's room for small allocations");
  uint64_t cap = R.gran ? R.gran : 2u << 20;
  size_t steps = (size_t)(cap / FDY_ROOM_STEP);
  if (steps > FDY_ROOM_MAX_STEPS) steps = FDY_ROOM_MAX_STEPS;
  CUdeviceptr taken[FDY_ROOM_MAX_STEPS + 1];
  size_t n = 0;
  int rc = 0;
  /* Real driver entry points: the region, active or not, must not place these. */
  while (n <= steps) {
    r = fdy_drv.cuMemAlloc_v2(&taken[n], FDY_ROOM_STEP);
    if (r != CUDA_SUCCESS) {
      rc = fdy_fail_cu(r, "cuMemAlloc", "measuring the driver's room for small allocations");
      break;
    }
    n++;
    r = fdy_drv.cuMemGetInfo_v2(&now, &total);
    if (r != CUDA_SUCCESS) {
      rc = fdy_fail_cu(r, "cuMemGetInfo", "measuring the driver's room for small allocations");
      break;
    }
    if (now < free0) break; /* the n-th did not fit the page: the n-1 before it did */
  }
  if (rc == 0) *room = n > steps ? cap : (uint64_t)(n - 1) * FDY_ROOM_STEP;
  while (n) fdy_drv.cuMemFree_v2(taken[--n]);
  return rc;
}
