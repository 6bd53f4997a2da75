/* IPC handles of region memory: cuIpcGetMemHandle and cuIpcOpenMemHandle for allocations in the region.
 *
 * Why: a custom all-reduce (vLLM's and SGLang's default on NVLink) shares buffers between ranks with the legacy
 * IPC calls, and its captured kernels take the peers' addresses by value. The driver refuses legacy IPC handles
 * of virtual-memory allocations, which every region allocation is, and maps an opened handle where it chooses,
 * which no later process repeats. So, for a pointer in the region, the handle is Foundry's: the exporting
 * process, the allocation's range in its region, which physical memory holds that range now, and the pointer's
 * offset in it. Opening it asks the exporter for its physical allocations as POSIX file descriptors (NCCL
 * shares its peer buffers the same way), imports them and maps them into a reservation carved from this
 * process's region: the address then follows from the sequence of calls, as NCCL's peer mappings do
 * (imports.c), and SAVE records the mappings and LOAD checks them.
 *
 * The exporter serves descriptors from a thread listening on an abstract UNIX socket named after its pid
 * ("foundry-ipc.<pid>"), to processes of its own user only (SO_PEERCRED). A pointer outside the region, and a
 * handle not made here, pass through to the driver unchanged. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "region_state.h"

#define IPC_MAGIC "FDYIPC1"
#define IPC_MAX_UNITS 64   /* physical allocations one handle may span (SCM_RIGHTS takes up to 253) */
#define IPC_TIMEOUT_S 30   /* a peer that does not answer: an error, never a hang */

typedef struct {
  char magic[8];
  uint32_t pid;     /* the exporting process */
  int32_t device;   /* its device */
  uint64_t off;     /* the allocation's range in the exporter's region */
  uint64_t len;
  uint64_t at;      /* the handle's pointer, from the range's start */
  uint64_t gen;     /* the physical allocations holding the range when the handle was made (units_of) */
} ipc_handle;
_Static_assert(sizeof(ipc_handle) <= sizeof(CUipcMemHandle), "Foundry's IPC handle fits the driver's");

typedef struct {
  uint64_t off, len;
} ipc_span;

typedef struct {
  uint64_t off, len, gen;
} ipc_want;

typedef struct {
  int32_t status;   /* 0, or the CUresult that refused */
  uint32_t count;
  ipc_span units[IPC_MAX_UNITS];
} ipc_reply;

typedef struct {
  CUdeviceptr opened; /* what cuIpcOpenMemHandle returned */
  CUdeviceptr va;     /* the reservation the units are mapped into, back to back */
  uint64_t span;
  uint32_t count;     /* the units, each mapped on its own */
  uint64_t *lens;
} ipc_open_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t listening;       /* the pid whose listener runs (a forked child starts its own) */
static CUcontext exporting;   /* the context current where the first handle was made: the listener's */
static ipc_open_t *opens;
static size_t nopens, capopens;

static void socket_name(struct sockaddr_un *a, socklen_t *len, uint32_t pid) {
  memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "foundry-ipc.%u", pid);
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* The physical allocations (units) that hold [off, off + len) of this process's region, copied out, and their
 * serials folded into one number (*gen). The range alone would not do: a range freed and allocated again holds
 * other memory under the same offsets, and a program that opens each distinct handle once (vLLM's custom
 * all-reduce keeps them by their bytes) would read the old memory through the new handle. */
static uint32_t units_of(uint64_t off, uint64_t len, ipc_span *out, uint64_t *gen) {
  uint32_t n = 0;
  uint64_t g = 0;
  pthread_mutex_lock(&R.lock);
  for (size_t i = 0; i < R.nunits && n < IPC_MAX_UNITS + 1; i++) {
    unit_t u = R.units[i];
    if (u.off + u.len <= off || u.off >= off + len) continue;
    if (out && n < IPC_MAX_UNITS) out[n] = (ipc_span){u.off, u.len};
    g = g * 0x100000001b3ULL ^ u.serial;
    n++;
  }
  pthread_mutex_unlock(&R.lock);
  *gen = g;
  return n;
}

#define IPC_REPLACED (-1) /* reply status: the range holds other memory than when the handle was made */

/* One request: the range asked for, answered with its units and one descriptor each. */
static void serve(int conn) {
  struct ucred cred;
  socklen_t cl = sizeof(cred);
  ipc_want want;
  ipc_reply reply;
  memset(&reply, 0, sizeof(reply));
  int fds[IPC_MAX_UNITS];
  uint32_t nfds = 0;
  if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cred.uid != geteuid() ||
      recv(conn, &want, sizeof(want), 0) != (ssize_t)sizeof(want)) {
    reply.status = CUDA_ERROR_INVALID_HANDLE;
  } else {
    uint64_t gen;
    uint32_t n = units_of(want.off, want.len, reply.units, &gen);
    if (n == 0 || n > IPC_MAX_UNITS) reply.status = CUDA_ERROR_INVALID_HANDLE;
    else if (gen != want.gen) reply.status = IPC_REPLACED;
    for (uint32_t i = 0; i < n && !reply.status; i++) {
      CUmemGenericAllocationHandle h;
      CUresult r = fdy_drv.cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)(R.base + reply.units[i].off));
      int fd = -1;
      if (r == CUDA_SUCCESS) {
        r = fdy_drv.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        fdy_drv.cuMemRelease(h);
      }
      if (r != CUDA_SUCCESS) reply.status = (int32_t)r;
      else fds[nfds++] = fd;
    }
    reply.count = reply.status ? 0 : n;
  }
  char control[CMSG_SPACE(sizeof(fds))];
  memset(control, 0, sizeof(control));
  struct iovec iov = {&reply, sizeof(reply)};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  if (reply.count) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * reply.count);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * reply.count);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * reply.count);
  }
  sendmsg(conn, &msg, MSG_NOSIGNAL);
  for (uint32_t i = 0; i < nfds; i++) close(fds[i]);
}

static void *listen_loop(void *arg) {
  int s = (int)(intptr_t)arg;
  if (exporting && fdy_drv.cuCtxSetCurrent) fdy_drv.cuCtxSetCurrent(exporting);
  for (;;) {
    int conn = accept4(s, NULL, NULL, SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return NULL;
    }
    /* A peer that connects and says nothing must not hold the others up. */
    struct timeval tv = {IPC_TIMEOUT_S / 6, 0};
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    serve(conn);
    close(conn);
  }
}

/* Starts this process's listener once (again in a forked child); 0, or -1 with the error recorded. */
static int ensure_listener(void) {
  pid_t me = getpid();
  pthread_mutex_lock(&lock);
  if (listening == me) {
    pthread_mutex_unlock(&lock);
    return 0;
  }
  exporting = NULL;
  fdy_drv.cuCtxGetCurrent(&exporting);
  struct sockaddr_un a;
  socklen_t len;
  socket_name(&a, &len, (uint32_t)me);
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  int ok = s >= 0 && bind(s, (struct sockaddr *)&a, len) == 0 && listen(s, 64) == 0;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (ok) ok = pthread_create(&t, &attr, listen_loop, (void *)(intptr_t)s) == 0;
  pthread_attr_destroy(&attr);
  if (ok) listening = me;
  pthread_mutex_unlock(&lock);
  if (!ok) {
    int e = errno;
    if (s >= 0) close(s);
    fdy_fail(FDY_ERR_UNSUPPORTED, "cuIpcGetMemHandle of region memory: the listener that hands its pages to other "
             "processes could not start (%s)", strerror(e));
    return -1;
  }
  return 0;
}

/* The allocation holding p, as the range its handle covers: the region's allocation (chunk) where p lies in
 * one, else the physical allocation (unit) it is mapped by. 0 when p is not region memory mapped here. */
static int range_of(CUdeviceptr p, uint64_t *off, uint64_t *len) {
  CUresult r;
  CUdeviceptr base;
  size_t size;
  if ((fdy_region_address_range(p, &base, &size, &r) && r == CUDA_SUCCESS && size) ||
      fdy_region_unit_range(p, 0, &base, &size)) {
    *off = base - R.base;
    *len = size;
    return 1;
  }
  return 0;
}

CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr) {
  ENSURE_DRIVER();
  uint64_t off, len;
  if (!pHandle || !fdy_region_contains(dptr) || !range_of(dptr, &off, &len))
    return fdy_drv.cuIpcGetMemHandle(pHandle, dptr);
  if (!fdy_drv.cuMemRetainAllocationHandle || !fdy_drv.cuMemExportToShareableHandle) {
    fdy_fail(FDY_ERR_UNSUPPORTED, "cuIpcGetMemHandle of region memory needs cuMemExportToShareableHandle, which "
             "this driver lacks");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (ensure_listener() != 0) return CUDA_ERROR_OPERATING_SYSTEM;
  ipc_handle h;
  memset(&h, 0, sizeof(h));
  memcpy(h.magic, IPC_MAGIC, sizeof(IPC_MAGIC));
  h.pid = (uint32_t)getpid();
  h.device = (int32_t)R.device;
  h.off = off;
  h.len = len;
  h.at = dptr - R.base - off;
  units_of(off, len, NULL, &h.gen);
  memset(pHandle, 0, sizeof(*pHandle));
  memcpy(pHandle->reserved, &h, sizeof(h));
  return CUDA_SUCCESS;
}

/* Asks the exporter for the units of its range; their descriptors in fds (the caller closes them). */
static CUresult fetch(const ipc_handle *h, ipc_reply *reply, int *fds) {
  struct sockaddr_un a;
  socklen_t len;
  socket_name(&a, &len, h->pid);
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  struct timeval tv = {IPC_TIMEOUT_S, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  ipc_want want = {h->off, h->len, h->gen};
  char control[CMSG_SPACE(sizeof(int) * IPC_MAX_UNITS)];
  struct iovec iov = {reply, sizeof(*reply)};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof(control)};
  int ok = connect(s, (struct sockaddr *)&a, len) == 0 && send(s, &want, sizeof(want), MSG_NOSIGNAL) == sizeof(want);
  ssize_t got = ok ? recvmsg(s, &msg, MSG_CMSG_CLOEXEC) : -1;
  int e = errno;
  close(s);
  if (got != (ssize_t)sizeof(*reply)) {
    fdy_fail(FDY_ERR_INVALID, "cuIpcOpenMemHandle: process %u, which made the handle, did not answer (%s): it has "
             "exited, or it is not under Foundry's interposer. Open the handle while the process that made it runs",
             h->pid, got < 0 ? strerror(e) : "short answer");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  uint32_t nfds = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      nfds = (uint32_t)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      memcpy(fds, CMSG_DATA(c), sizeof(int) * nfds);
    }
  int gap = 0;
  for (uint32_t i = 1; i < reply->count && i < IPC_MAX_UNITS; i++)
    gap |= reply->units[i].off != reply->units[i - 1].off + reply->units[i - 1].len;
  if (reply->status || reply->count == 0 || reply->count > IPC_MAX_UNITS || nfds != reply->count || gap) {
    for (uint32_t i = 0; i < nfds; i++) close(fds[i]);
    fdy_fail(FDY_ERR_INVALID, "cuIpcOpenMemHandle: process %u refused its range at region offset 0x%llx (%llu "
             "bytes): %s", h->pid, (unsigned long long)h->off, (unsigned long long)h->len,
             reply->status == IPC_REPLACED
               ? "that memory was freed since the handle was made (other memory lies there now): ask the process "
                 "for a new handle"
             : reply->status ? fdy_cu_name((CUresult)reply->status)
             : gap          ? "its pages are not mapped back to back"
                            : "the memory is no longer mapped there");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return CUDA_SUCCESS;
}

/* Unmaps n units mapped back to back from va (lens: their sizes) and frees the reservation; the first error. */
static CUresult undo(CUdeviceptr va, uint64_t span, const uint64_t *lens, uint32_t n) {
  CUresult first = CUDA_SUCCESS;
  CUdeviceptr at = va;
  for (uint32_t i = 0; i < n; i++) {
    CUresult r = cuMemUnmap(at, lens[i]);
    if (first == CUDA_SUCCESS) first = r;
    at += lens[i];
  }
  CUresult r = cuMemAddressFree(va, span);
  return first != CUDA_SUCCESS ? first : r;
}

static CUresult open_foundry(CUdeviceptr *pdptr, const ipc_handle *h) {
  ipc_reply reply;
  int fds[IPC_MAX_UNITS];
  CUresult r = fetch(h, &reply, fds);
  if (r != CUDA_SUCCESS) return r;
  CUdevice dev = 0;
  fdy_drv.cuCtxGetDevice(&dev);
  uint64_t first = reply.units[0].off, span = 0, lens[IPC_MAX_UNITS];
  for (uint32_t i = 0; i < reply.count; i++) {
    lens[i] = reply.units[i].len;
    span += lens[i];
  }
  /* Through the hooks: carved from the region while it is active, and listed as imported memory. */
  CUdeviceptr va = 0;
  r = cuMemAddressReserve(&va, span, 0, 0, 0);
  uint32_t mapped = 0;
  for (uint32_t i = 0; i < reply.count && r == CUDA_SUCCESS; i++) {
    CUmemGenericAllocationHandle mem;
    r = cuMemImportFromShareableHandle(&mem, (void *)(intptr_t)fds[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS) break;
    CUdeviceptr at = va + (reply.units[i].off - first);
    r = cuMemMap(at, reply.units[i].len, 0, mem, 0);
    cuMemRelease(mem); /* the mapping keeps it */
    if (r != CUDA_SUCCESS) break;
    mapped++;
    CUmemAccessDesc access;
    memset(&access, 0, sizeof(access));
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = dev;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = fdy_drv.cuMemSetAccess(at, reply.units[i].len, &access, 1);
  }
  for (uint32_t i = 0; i < reply.count; i++) close(fds[i]);
  if (r != CUDA_SUCCESS) {
    if (va) undo(va, span, lens, mapped);
    fdy_fail_cu(r, "cuIpcOpenMemHandle", "mapping process %u's %u allocation(s) of its region offset 0x%llx", h->pid,
                reply.count, (unsigned long long)h->off);
    return r;
  }
  CUdeviceptr opened = va + (h->off - first) + h->at;
  uint64_t *kept_lens = malloc(sizeof(uint64_t) * reply.count);
  pthread_mutex_lock(&lock);
  if (kept_lens && nopens == capopens) {
    size_t cap = capopens ? capopens * 2 : 16;
    void *p = realloc(opens, cap * sizeof(*opens));
    if (p) {
      opens = p;
      capopens = cap;
    }
  }
  int kept = kept_lens && nopens < capopens;
  if (kept) {
    memcpy(kept_lens, lens, sizeof(uint64_t) * reply.count);
    opens[nopens++] = (ipc_open_t){opened, va, span, reply.count, kept_lens};
  }
  pthread_mutex_unlock(&lock);
  if (!kept) {
    free(kept_lens);
    undo(va, span, lens, mapped);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *pdptr = opened;
  return CUDA_SUCCESS;
}

/* 1 when the handle is one cuIpcGetMemHandle made for region memory (here or in another process). */
static int foundry_handle(const CUipcMemHandle *handle, ipc_handle *h) {
  memcpy(h, handle->reserved, sizeof(*h));
  return memcmp(h->magic, IPC_MAGIC, sizeof(IPC_MAGIC)) == 0 && h->len > 0;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags) {
  ENSURE_DRIVER();
  ipc_handle h;
  if (pdptr && foundry_handle(&handle, &h)) return open_foundry(pdptr, &h);
  CUresult r = fdy_drv.cuIpcOpenMemHandle_v2(pdptr, handle, flags);
  if (r == CUDA_SUCCESS && pdptr) fdy_imports_note_ipc(*pdptr, 1);
  return r;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  ENSURE_DRIVER();
  pthread_mutex_lock(&lock);
  ipc_open_t o = {0, 0, 0, 0, NULL};
  for (size_t i = 0; i < nopens; i++)
    if (opens[i].opened == dptr) {
      o = opens[i];
      opens[i] = opens[--nopens];
      break;
    }
  pthread_mutex_unlock(&lock);
  if (o.va) {
    CUresult r = undo(o.va, o.span, o.lens, o.count);
    free(o.lens);
    return r;
  }
  CUresult r = fdy_drv.cuIpcCloseMemHandle(dptr);
  if (r == CUDA_SUCCESS) fdy_imports_note_ipc(dptr, -1);
  return r;
}
