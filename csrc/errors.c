/* Error messages: one per thread for the caller, and a process-wide log for failures that happen on
 * threads Python does not own (an allocation refused inside PyTorch's allocator, say). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define FDY_MSG_CAP 1024
#define FDY_LOG_SLOTS 32

static __thread char tls_message[FDY_MSG_CAP];

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[FDY_LOG_SLOTS][FDY_MSG_CAP];
static uint64_t log_seq; /* sequence number of the newest entry */

static void record(const char *msg) {
  snprintf(tls_message, sizeof(tls_message), "%s", msg);
  pthread_mutex_lock(&log_lock);
  log_seq++;
  snprintf(log_text[log_seq % FDY_LOG_SLOTS], FDY_MSG_CAP, "%s", msg);
  pthread_mutex_unlock(&log_lock);
}

int fdy_fail(int code, const char *fmt, ...) {
  char msg[FDY_MSG_CAP];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  record(msg);
  return code;
}

const char *fdy_cu_name(CUresult r) {
  const char *name = NULL;
  if (fdy_drv.cuGetErrorName && fdy_drv.cuGetErrorName(r, &name) == CUDA_SUCCESS && name) return name;
  return "CUDA_ERROR_UNKNOWN_CODE";
}

int fdy_fail_cu(CUresult r, const char *call, const char *fmt, ...) {
  char detail[FDY_MSG_CAP - 128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof(detail), fmt, ap);
  va_end(ap);
  char msg[FDY_MSG_CAP];
  snprintf(msg, sizeof(msg), "%s failed with %s (%d): %s", call, fdy_cu_name(r), (int)r, detail);
  record(msg);
  return (int)r;
}

FDY_EXPORT const char *fdy_last_error(void) { return tls_message; }

FDY_EXPORT uint64_t fdy_error_log_read(uint64_t after, char *buf, size_t cap) {
  uint64_t seq = 0;
  pthread_mutex_lock(&log_lock);
  if (log_seq > after) {
    seq = log_seq;
    if (buf && cap) snprintf(buf, cap, "%s", log_text[seq % FDY_LOG_SLOTS]);
  }
  pthread_mutex_unlock(&log_lock);
  return seq;
}
