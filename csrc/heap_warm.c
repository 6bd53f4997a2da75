/* Pre-faulted heap for LOAD's builder threads.
 *
 * The driver's graph building and instantiation allocate with malloc, about 12 KB of host memory
 * per node, from the calling thread's glibc arena. In a fresh process every one of those pages is
 * touched for the first time while LOAD runs, and those first-touch faults cost as much as the
 * driver's work itself (docs/DESIGN.md, "Templates and background loading", has the measurements).
 *
 * fdy_heap_warm, called on a builder thread before LOAD, grows that thread's arena by `bytes`,
 * writes every page, and frees it again, except the block allocated last. That block sits
 * between the freed memory and the arena's top chunk, so glibc does not trim the freed memory back
 * to the kernel (it only trims the top), and the driver's later allocations on this thread reuse
 * pages that are already there. fdy_heap_release frees the block, after which glibc may trim as
 * usual. Blocks stay below the mmap threshold, so they come from the arena, not from mmap. With an
 * allocator other than glibc's this is a harmless malloc/free round.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define WARM_BLOCK (64u * 1024u) /* below glibc's smallest mmap threshold (128 KiB) */

FDY_EXPORT void *fdy_heap_warm(size_t bytes) {
  size_t count = bytes / WARM_BLOCK;
  if (count < 2) return NULL;
  void **blocks = malloc(count * sizeof(void *));
  if (!blocks) return NULL;
  long page = sysconf(_SC_PAGESIZE);
  size_t step = page > 0 ? (size_t)page : 4096;
  size_t got = 0;
  for (; got < count; got++) {
    unsigned char *b = malloc(WARM_BLOCK);
    if (!b) break;
    for (size_t off = 0; off < WARM_BLOCK; off += step) b[off] = 1;
    blocks[got] = b;
  }
  /* The last block came off the top chunk (the arena had to grow for it, or there was nothing to
   * warm): it is the one kept. */
  void *keep = got ? blocks[got - 1] : NULL;
  for (size_t i = 0; i + 1 < got; i++) free(blocks[i]);
  free(blocks);
  return keep;
}

FDY_EXPORT void fdy_heap_release(void *keep) { free(keep); }
