/* Memory of other processes this process has open: IPC mappings (cuIpcOpenMemHandle), physical
 * allocations imported from a shareable handle (cuMemImportFromShareableHandle) and not released,
 * and the mappings made of those (which outlive the handle's release until cuMemUnmap). A graph
 * captured while such memory is open may read it (NCCL's peer buffers, a custom all-reduce's),
 * directly or through pointers kept in device memory; LOAD, in another process, cannot make that
 * memory identical, so SAVE refuses while any is open (fdy_imports_live). Counting errs on the side
 * of refusing: an unmap of part of a mapping, or a bookkeeping allocation that failed, keeps the
 * count above zero. */
#include "internal.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static fdy_map ipc;      /* device address -> times opened */
static fdy_map handles;  /* imported allocation handle -> times imported */
static fdy_map mapped;   /* start of a mapping of an imported handle -> times mapped there */
static int untracked;    /* an import the maps could not record: never forgotten */

static void note(fdy_map *m, uint64_t key, int delta) {
  if (!key) return;
  uint64_t n = 0;
  int known = fdy_map_get(m, key, &n);
  if (delta > 0) {
    if (fdy_map_put(m, key, n + 1) != 0) untracked = 1;
  } else if (known && n > 0) {
    if (n == 1) fdy_map_del(m, key);
    else fdy_map_put(m, key, n - 1);
  }
}

void fdy_imports_note_ipc(CUdeviceptr dptr, int delta) {
  pthread_mutex_lock(&lock);
  note(&ipc, (uint64_t)dptr, delta);
  pthread_mutex_unlock(&lock);
}

void fdy_imports_note_handle(CUmemGenericAllocationHandle h, int delta) {
  pthread_mutex_lock(&lock);
  note(&handles, (uint64_t)h, delta);
  pthread_mutex_unlock(&lock);
}

void fdy_imports_note_map(CUdeviceptr ptr, CUmemGenericAllocationHandle h) {
  pthread_mutex_lock(&lock);
  if (fdy_map_get(&handles, (uint64_t)h, NULL)) note(&mapped, (uint64_t)ptr, 1);
  pthread_mutex_unlock(&lock);
}

void fdy_imports_note_unmap(CUdeviceptr ptr) {
  pthread_mutex_lock(&lock);
  note(&mapped, (uint64_t)ptr, -1);
  pthread_mutex_unlock(&lock);
}

static uint64_t count(const fdy_map *m) {
  uint64_t n = 0;
  for (size_t i = 0; i < m->cap; i++)
    if (m->keys[i]) n += m->vals[i];
  return n;
}

FDY_EXPORT uint64_t fdy_imports_live(void) {
  pthread_mutex_lock(&lock);
  uint64_t n = count(&ipc) + count(&handles) + count(&mapped) + (uint64_t)untracked;
  pthread_mutex_unlock(&lock);
  return n;
}
