/* A placeholder over the seed README's region base, so that the program's later mappings keep out of it.
 *
 * The seed README places its region at 0x7f0000000000, which lies where Linux maps a process's shared
 * libraries, thread stacks and large allocations, top down from a randomised start. Whether that range is
 * still free when the program calls set_allocation_region, after torch and the CUDA libraries are mapped,
 * changes from run to run: the seed example's SAVE found it taken once in five runs on an H200, and the
 * driver placed the region elsewhere (RegionBaseTakenError). So when libfoundry is loaded (preloaded, before
 * the program maps anything of its own) it maps the range PROT_NONE and MAP_NORESERVE, which costs no
 * memory: later mappings go around it. The region's reservation gives the placeholder back immediately
 * before it asks the driver for that range (fdy_region_unguard). Where something already lies in the
 * range when libfoundry loads, nothing is placed. FOUNDRY_REGION_GUARD=0 turns it off. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

#define GUARD_BASE 0x7f0000000000ull
#define GUARD_SIZE (64ull << 30) /* the seed example's region and much larger ones */

static uint64_t guard_base, guard_size; /* 0 when no placeholder is held */

__attribute__((constructor)) static void region_guard(void) {
  const char *off = getenv("FOUNDRY_REGION_GUARD");
  if (off && strcmp(off, "0") == 0) return;
  void *want = (void *)(uintptr_t)GUARD_BASE;
  void *p = mmap(want, GUARD_SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) return;
  if (p != want) { /* a kernel without MAP_FIXED_NOREPLACE took the address as a hint only */
    munmap(p, GUARD_SIZE);
    return;
  }
  guard_base = GUARD_BASE;
  guard_size = GUARD_SIZE;
}

void fdy_region_unguard(uint64_t base, uint64_t size) {
  if (!guard_size || base >= guard_base + guard_size || base + size <= guard_base) return;
  munmap((void *)(uintptr_t)guard_base, guard_size);
  guard_base = guard_size = 0;
}
