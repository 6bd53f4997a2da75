/* Memory of other processes this process has open: IPC mappings (cuIpcOpenMemHandle), physical
 * allocations imported from a shareable handle (cuMemImportFromShareableHandle) and not released,
 * and the mappings made of those (which outlive the handle's release until cuMemUnmap). A graph
 * captured while such memory is open may read it (NCCL's peer buffers, a custom all-reduce's),
 * directly or through pointers kept in device memory.
 *
 * SAVE asks two things (foundry/ranks/peers.py): how much is open (fdy_imports_summary_get) and where
 * each mapping of an imported handle lies (fdy_imports_mappings). A mapping inside a reservation carved
 * from the region sits at an address that only the sequence of calls decides, so a fresh process that
 * repeats the same set-up maps the peer's memory there again; SAVE records it and LOAD checks it. IPC
 * mappings and mappings elsewhere land where the driver chooses, so SAVE refuses while any is open.
 * Counting errs on the side of refusing: a bookkeeping allocation that failed sets `untracked`, and an
 * unmap that covers only part of a mapping keeps the whole mapping listed. */
#include <stdlib.h>

#include "internal.h"

typedef struct {
  CUmemGenericAllocationHandle handle;
  uint64_t count;        /* times imported and not released */
  uint32_t handle_type;  /* CUmemAllocationHandleType it was imported with */
  int32_t device;        /* device holding the memory, -1 when the driver did not say */
} imported_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static fdy_map ipc;                 /* device address -> times opened */
static imported_t *handles;         /* imported handles, unordered */
static size_t nhandles, caphandles;
static fdy_import_mapping *maps;    /* live mappings of imported handles, unordered (in_region unset) */
static size_t nmaps, capmaps;
static int untracked;               /* an import the lists could not record: never forgotten */

static int grow(void **items, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap * 2 : 16;
  void *p = realloc(*items, n * size);
  if (!p) return -1;
  *items = p;
  *cap = n;
  return 0;
}

static long find_handle(CUmemGenericAllocationHandle h) {
  for (size_t i = 0; i < nhandles; i++)
    if (handles[i].handle == h) return (long)i;
  return -1;
}

void fdy_imports_note_ipc(CUdeviceptr dptr, int delta) {
  if (!dptr) return;
  pthread_mutex_lock(&lock);
  uint64_t n = 0;
  int known = fdy_map_get(&ipc, (uint64_t)dptr, &n);
  if (delta > 0) {
    if (fdy_map_put(&ipc, (uint64_t)dptr, n + 1) != 0) untracked = 1;
  } else if (known && n > 0) {
    if (n == 1) fdy_map_del(&ipc, (uint64_t)dptr);
    else fdy_map_put(&ipc, (uint64_t)dptr, n - 1);
  }
  pthread_mutex_unlock(&lock);
}

/* The device the imported memory lives on, as cuMemGetAllocationPropertiesFromHandle reports it (the
 * exporter's device, in this process's numbering); -1 when the driver does not say. Called outside the lock. */
static int32_t handle_device(CUmemGenericAllocationHandle h) {
  CUmemAllocationProp prop;
  if (!fdy_drv.cuMemGetAllocationPropertiesFromHandle ||
      fdy_drv.cuMemGetAllocationPropertiesFromHandle(&prop, h) != CUDA_SUCCESS ||
      prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return -1;
  return (int32_t)prop.location.id;
}

void fdy_imports_note_import(CUmemGenericAllocationHandle h, uint32_t handle_type) {
  if (!h) return;
  int32_t device = handle_device(h);
  pthread_mutex_lock(&lock);
  long i = find_handle(h);
  if (i >= 0) handles[i].count++;
  else if (grow((void **)&handles, &caphandles, nhandles + 1, sizeof(*handles)) != 0) untracked = 1;
  else handles[nhandles++] = (imported_t){h, 1, handle_type, device};
  pthread_mutex_unlock(&lock);
}

void fdy_imports_note_release(CUmemGenericAllocationHandle h) {
  pthread_mutex_lock(&lock);
  long i = find_handle(h);
  if (i >= 0 && --handles[i].count == 0) handles[i] = handles[--nhandles];
  pthread_mutex_unlock(&lock);
}

void fdy_imports_note_map(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle h) {
  pthread_mutex_lock(&lock);
  long i = find_handle(h);
  if (i >= 0) {
    if (grow((void **)&maps, &capmaps, nmaps + 1, sizeof(*maps)) != 0) untracked = 1;
    else maps[nmaps++] = (fdy_import_mapping){ptr, size, handles[i].handle_type, handles[i].device, 0, 0};
  }
  pthread_mutex_unlock(&lock);
}

void fdy_imports_note_unmap(CUdeviceptr ptr, size_t size) {
  pthread_mutex_lock(&lock);
  for (size_t i = nmaps; i-- > 0;)
    if (maps[i].address >= ptr && maps[i].address + maps[i].size <= ptr + size) maps[i] = maps[--nmaps];
  pthread_mutex_unlock(&lock);
}

FDY_EXPORT int fdy_imports_summary_get(fdy_imports_summary *out) {
  if (!out) return fdy_fail(FDY_ERR_INVALID, "fdy_imports_summary_get: out is NULL");
  pthread_mutex_lock(&lock);
  uint64_t open = 0;
  for (size_t i = 0; i < ipc.cap; i++)
    if (ipc.keys[i]) open += ipc.vals[i];
  uint64_t held = 0;
  for (size_t i = 0; i < nhandles; i++) held += handles[i].count;
  *out = (fdy_imports_summary){open, (uint64_t)nmaps, held, (uint64_t)untracked};
  pthread_mutex_unlock(&lock);
  return FDY_OK;
}

FDY_EXPORT size_t fdy_imports_mappings(fdy_import_mapping *out, size_t cap) {
  pthread_mutex_lock(&lock);
  size_t n = nmaps;
  for (size_t i = 0; i < n && i < cap && out; i++) out[i] = maps[i];
  pthread_mutex_unlock(&lock);
  /* Asked outside this lock: the region's lock is never taken inside it. */
  for (size_t i = 0; i < n && i < cap && out; i++) out[i].in_region = fdy_region_in_reservation(out[i].address, out[i].size);
  return n;
}

FDY_EXPORT uint64_t fdy_imports_live(void) {
  fdy_imports_summary s;
  fdy_imports_summary_get(&s);
  return s.ipc_open + s.mappings + s.handles + s.untracked;
}
