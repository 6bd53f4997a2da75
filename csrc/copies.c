/* Many small spans of device memory read into host memory with a handful of driver calls: SAVE reads the
 * module variables of every load a graph uses (foundry/save/varread.py), about a thousand spans a graph,
 * of a few bytes each, so a driver round trip per span is what such a read costs.
 *
 * The contract is that of one cuMemcpyDtoH_v2 per span, issued in order on the calling thread:
 *  - What it reads. cuMemcpyDtoH_v2 is work on the legacy default stream: it starts once all work issued
 *    before it to the legacy stream is done and, since the legacy stream synchronizes with every blocking
 *    stream of the context (per-thread default streams included), all work issued before it to those; it
 *    is not ordered with non-blocking streams (driver API, "Stream synchronization behavior"). While a
 *    blocking stream captures, the driver refuses it (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT).
 *  - When it returns. A copy from device to host memory returns once the copy is complete (driver API,
 *    "API synchronization behavior").
 * The fast ways keep both. Their copies go to a non-blocking stream of the library's own, one per context,
 * which first waits for an event recorded on the legacy stream (CU_STREAM_LEGACY) just before: recording
 * it is work on the legacy stream, so the event completes when a copy issued there would have started, and
 * the driver refuses it while a blocking stream captures, as it would refuse that copy. The call returns
 * after cuStreamSynchronize of that stream. The stream never joins a capture: all it ever waits for is
 * that event, which no capture records. (cuMemcpyBatchAsync refuses the legacy stream, and copies issued
 * there one by one are each a round trip: the stream is needed, not just convenient.) One difference is
 * deliberate: a legacy copy also holds back later work of the blocking streams until it is done; these
 * copies hold back nothing, and work that another thread issues while SAVE reads was never ordered with
 * the reads.
 *
 * The fast ways copy into pinned staging memory (an asynchronous copy to pageable memory is staged by the
 * driver, copy by copy), at most STAGING_MAX bytes at a time, then into dst; a span larger than that is
 * copied synchronously straight into dst. In order of preference:
 *  - FDY_READ_BATCH: cuMemcpyBatchAsync_v2 (CUDA 13.0 drivers), one call for each STAGING_MAX bytes;
 *  - FDY_READ_ASYNC: one cuMemcpyDtoHAsync_v2 per span (no batch entry point, or the batch failed);
 *  - FDY_READ_SYNC: one synchronous cuMemcpyDtoH_v2 per span, which is the contract itself. It reads what
 *    a fast way left unread (no context, stream or pinned memory to be had, or a copy failed there), and
 *    so names the span whose copy the driver refuses.
 * The stream, its event and the staging memory are made on first use and kept for the process (contexts
 * are assumed to outlive it, as the primary contexts PyTorch uses do); one read at a time uses them. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define STAGING_MIN ((size_t)64 << 10)
#define STAGING_MAX ((size_t)32 << 20) /* pinned bytes at most: a larger read goes in parts */
#define MAX_LANES 16                   /* contexts with a stream of their own; reads in others are synchronous */

typedef struct {
  CUcontext ctx;
  CUstream stream; /* non-blocking: no implicit synchronization with the legacy stream */
  CUevent legacy;  /* recorded on the legacy stream before each read, waited for by the stream */
} lane_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* guards everything below */
static lane_t lanes[MAX_LANES];
static size_t lane_count;
static uint8_t *staging;
static size_t staging_size;

typedef struct {
  const uint64_t *spans; /* (device address, size, offset into dst) per span */
  size_t count;
  uint8_t *dst;
  fdy_read_report *report;
  CUdeviceptr *dsts, *srcs; /* the batch's arrays (count each), NULL when they could not be had */
  size_t *sizes;
} job_t;

#define CALL(job, fn, ...) ((job)->report->calls++, fdy_drv.fn(__VA_ARGS__))

static CUdeviceptr src_of(const job_t *j, size_t i) { return (CUdeviceptr)j->spans[3 * i]; }
static size_t size_of(const job_t *j, size_t i) { return (size_t)j->spans[3 * i + 1]; }
static uint8_t *dst_of(const job_t *j, size_t i) { return j->dst + j->spans[3 * i + 2]; }

static void took(job_t *j, uint32_t path) {
  if (path > j->report->path) j->report->path = path;
}

/* One synchronous copy per span, from span `first` on. */
static int read_sync(job_t *j, size_t first) {
  for (size_t i = first; i < j->count; i++) {
    if (!size_of(j, i)) continue;
    took(j, FDY_READ_SYNC);
    CUresult r = CALL(j, cuMemcpyDtoH_v2, dst_of(j, i), src_of(j, i), size_of(j, i));
    if (r == CUDA_SUCCESS) continue;
    j->report->failed = i;
    return fdy_fail_cu(r, "cuMemcpyDtoH_v2", "span %zu of %zu: %zu bytes at device address %#llx", i, j->count,
                       size_of(j, i), (unsigned long long)src_of(j, i));
  }
  return 0;
}

static int fast_ways_exist(void) {
  return fdy_drv.cuCtxGetCurrent && fdy_drv.cuStreamCreate && fdy_drv.cuEventCreate && fdy_drv.cuEventRecord &&
         fdy_drv.cuStreamWaitEvent && fdy_drv.cuStreamSynchronize && fdy_drv.cuMemHostAlloc &&
         fdy_drv.cuMemFreeHost && fdy_drv.cuThreadExchangeStreamCaptureMode && fdy_drv.cuMemcpyDtoHAsync_v2;
}

static CUresult grow_staging(job_t *j, size_t need) {
  size_t size = STAGING_MIN;
  while (size < need && size < STAGING_MAX) size *= 2;
  if (staging) {
    CUresult r = CALL(j, cuMemFreeHost, staging);
    if (r != CUDA_SUCCESS) return r;
    staging = NULL;
    staging_size = 0;
  }
  void *p = NULL;
  CUresult r = CALL(j, cuMemHostAlloc, &p, size, CU_MEMHOSTALLOC_PORTABLE);
  if (r != CUDA_SUCCESS) return r;
  staging = p;
  staging_size = size;
  return CUDA_SUCCESS;
}

/* The current context's lane, its stream and event made and `need` bytes of staging memory at hand.
 * While a global-mode capture runs, the driver forbids every thread calls that the capture cannot see,
 * pinned allocations among them; these serve no capture, so they are made in relaxed mode, which no
 * capture minds. */
static int set_up(job_t *j, size_t need, lane_t **out) {
  CUcontext ctx = NULL;
  CUresult r = CALL(j, cuCtxGetCurrent, &ctx);
  if (r != CUDA_SUCCESS) return r;
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  lane_t *l = NULL;
  for (size_t i = 0; i < lane_count && !l; i++)
    if (lanes[i].ctx == ctx) l = &lanes[i];
  if (!l && lane_count == MAX_LANES) return FDY_ERR_UNSUPPORTED;
  if (!l) {
    l = &lanes[lane_count++];
    l->ctx = ctx;
  }
  *out = l;
  if (l->stream && l->legacy && staging_size >= need) return CUDA_SUCCESS;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if ((r = CALL(j, cuThreadExchangeStreamCaptureMode, &mode)) != CUDA_SUCCESS) return r;
  CUstream stream = NULL;
  CUevent event = NULL;
  if (!l->stream && (r = CALL(j, cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING)) == CUDA_SUCCESS) l->stream = stream;
  if (!r && !l->legacy && (r = CALL(j, cuEventCreate, &event, CU_EVENT_DISABLE_TIMING)) == CUDA_SUCCESS)
    l->legacy = event;
  if (!r && staging_size < need) r = grow_staging(j, need);
  CUresult back = CALL(j, cuThreadExchangeStreamCaptureMode, &mode); /* the caller's mode again */
  return r != CUDA_SUCCESS ? r : back;
}

/* Spans [first, last) copied into staging, packed in order, with one batch call. */
static CUresult issue_batch(job_t *j, const lane_t *l, size_t first, size_t last) {
  size_t n = 0, at = 0;
  for (size_t i = first; i < last; i++) {
    if (!size_of(j, i)) continue;
    j->dsts[n] = (CUdeviceptr)(uintptr_t)(staging + at);
    j->srcs[n] = src_of(j, i);
    j->sizes[n] = size_of(j, i);
    at += j->sizes[n++];
  }
  if (!n) return CUDA_SUCCESS;
  CUmemcpyAttributes attr;
  memset(&attr, 0, sizeof(attr));
  attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM; /* after the stream's wait for the legacy stream */
  size_t applies_from = 0;
  return CALL(j, cuMemcpyBatchAsync_v2, j->dsts, j->srcs, j->sizes, n, &attr, &applies_from, 1, l->stream);
}

/* Spans [first, last) copied into staging, packed in order, one call each. */
static CUresult issue_each(job_t *j, const lane_t *l, size_t first, size_t last) {
  size_t at = 0;
  for (size_t i = first; i < last; i++) {
    if (!size_of(j, i)) continue;
    CUresult r = CALL(j, cuMemcpyDtoHAsync_v2, staging + at, src_of(j, i), size_of(j, i), l->stream);
    if (r != CUDA_SUCCESS) return r;
    at += size_of(j, i);
  }
  return CUDA_SUCCESS;
}

/* Spans [first, last) (at most STAGING_MAX bytes) read on the lane's stream into dst. */
static CUresult read_part(job_t *j, const lane_t *l, size_t first, size_t last) {
  CUresult r = CUDA_SUCCESS;
  int batched = 0;
  if (j->dsts && fdy_drv.cuMemcpyBatchAsync_v2) {
    if ((r = issue_batch(j, l, first, last)) == CUDA_SUCCESS) batched = 1;
    else j->report->cause = (int32_t)r;
  }
  /* Whatever part of a refused batch the driver queued writes what these copies write, where they write
   * it, before them: nothing to wait for. */
  if (!batched) r = issue_each(j, l, first, last);
  CUresult done = CALL(j, cuStreamSynchronize, l->stream); /* also after a failed copy: staging stays ours */
  if (r == CUDA_SUCCESS) r = done;
  if (r != CUDA_SUCCESS) return r;
  took(j, batched ? FDY_READ_BATCH : FDY_READ_ASYNC);
  size_t at = 0;
  for (size_t i = first; i < last; i++) {
    memcpy(dst_of(j, i), staging + at, size_of(j, i));
    at += size_of(j, i);
  }
  return CUDA_SUCCESS;
}

/* Reads the spans on the lane's stream; *done gets how many leading spans are in dst. */
static CUresult read_fast(job_t *j, const lane_t *l, size_t *done) {
  CUresult r = CALL(j, cuEventRecord, l->legacy, CU_STREAM_LEGACY);
  if (r == CUDA_SUCCESS) r = CALL(j, cuStreamWaitEvent, l->stream, l->legacy, CU_EVENT_WAIT_DEFAULT);
  size_t first = 0;
  while (r == CUDA_SUCCESS && first < j->count) {
    if (size_of(j, first) > STAGING_MAX) { /* too large to stage: the legacy stream's copy, straight into dst */
      took(j, FDY_READ_SYNC);
      r = CALL(j, cuMemcpyDtoH_v2, dst_of(j, first), src_of(j, first), size_of(j, first));
      if (r == CUDA_SUCCESS) first++;
      continue;
    }
    size_t last = first, bytes = 0;
    while (last < j->count && size_of(j, last) <= STAGING_MAX - bytes) bytes += size_of(j, last++);
    if ((r = read_part(j, l, first, last)) == CUDA_SUCCESS) first = last;
  }
  *done = first;
  return r;
}

FDY_EXPORT int fdy_device_read(const uint64_t *spans, size_t count, void *dst, size_t dst_size,
                               fdy_read_report *report) {
  if (!report) return fdy_fail(FDY_ERR_INVALID, "fdy_device_read: null report");
  memset(report, 0, sizeof(*report));
  report->failed = count;
  if (count && (!spans || !dst)) return fdy_fail(FDY_ERR_INVALID, "fdy_device_read: null spans or destination");
  size_t stage = 0; /* staging bytes the read needs */
  for (size_t i = 0; i < count; i++) {
    uint64_t size = spans[3 * i + 1], offset = spans[3 * i + 2];
    if (offset > dst_size || size > dst_size - offset)
      return fdy_fail(FDY_ERR_INVALID, "span %zu (%llu bytes at offset %llu) lies outside the %zu-byte destination",
                      i, (unsigned long long)size, (unsigned long long)offset, dst_size);
    if (size <= STAGING_MAX) stage = stage + size < STAGING_MAX ? stage + size : STAGING_MAX;
  }
  int rc = fdy_driver_ensure();
  if (rc) return rc;
  if (!fdy_drv.cuMemcpyDtoH_v2) return fdy_fail(FDY_ERR_NO_DRIVER, "the CUDA driver has no cuMemcpyDtoH_v2");
  job_t j = {spans, count, dst, report, NULL, NULL, NULL};
  size_t done = 0;
  if (stage && fast_ways_exist()) {
    j.dsts = malloc(count * sizeof(CUdeviceptr));
    j.srcs = malloc(count * sizeof(CUdeviceptr));
    j.sizes = malloc(count * sizeof(size_t));
    if (!j.dsts || !j.srcs || !j.sizes) { /* the batch needs them; one copy a span does not */
      free(j.dsts);
      j.dsts = NULL;
    }
    lane_t *l = NULL;
    pthread_mutex_lock(&lock);
    int r = set_up(&j, stage, &l);
    if (r == CUDA_SUCCESS) r = read_fast(&j, l, &done);
    pthread_mutex_unlock(&lock);
    if (r != CUDA_SUCCESS) report->cause = r;
    free(j.dsts);
    free(j.srcs);
    free(j.sizes);
  }
  return read_sync(&j, done);
}
