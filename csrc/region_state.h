/* The region's state, shared by the allocation engine (region.c) and its control API
 * (region_api.c). Everything here is used under fdy_region_state.lock. */
#ifndef FOUNDRY_REGION_STATE_H
#define FOUNDRY_REGION_STATE_H

#include "internal.h"

enum { OWN_CHUNK = 1, OWN_PREALLOC = 2, OWN_RESTORE = 3, OWN_APP = 4, OWN_PACK = 5 };

typedef struct {
  uint64_t off, span, size;
  uint32_t kind;
} chunk_t;

typedef struct {
  uint64_t off, len, owner_off;
  uint32_t owner;
  /* Which physical allocation this is: a number no other unit of this process had, so that memory mapped again
   * at the same offsets is told apart from what was there before (ipc.c's handles carry it). */
  uint64_t serial;
} unit_t;

typedef struct {
  pthread_mutex_t lock;
  int reserved, active;
  CUdeviceptr base;
  uint64_t size, gran, cursor, hwm, mapped;
  uint64_t unit_serial;           /* the last unit's serial */
  CUdevice device;
  chunk_t *chunks;
  size_t nchunks, capchunks;
  unit_t *units;
  size_t nunits, capunits;
  uint64_t prealloc_off, prealloc_size;
  /* The granule small allocations are placed in now ([pack_off, pack_off + gran), pack_used bytes handed
   * out from its start); none while pack_open is 0. Slots are never reused: the granule is given back
   * whole when its last allocation is freed, so placement depends only on the sequence of calls. */
  int pack_open;
  uint64_t pack_off, pack_used;
  uint64_t reserve_size;          /* bytes actually reserved at base (>= size when adopted from a hold) */
  CUdeviceptr held_base;          /* a range reserved ahead of set (fdy_region_hold), not in use yet */
  uint64_t held_size;
  fdy_alloc_event *events;
  size_t nevents, capevents;
} fdy_region_t;

extern fdy_region_t fdy_region_state;
#define R fdy_region_state

static inline uint64_t rg_round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
void rg_log_event(uint32_t kind, uint64_t off, uint64_t size, uint64_t span);
void rg_unmap_unit(size_t i);
int rg_map_gaps(uint64_t off, uint64_t len, uint32_t owner, uint64_t owner_off);
void rg_unmap_owned(uint32_t owner, uint64_t owner_off);
void rg_adopt_units(uint64_t off, uint64_t len);

#endif
