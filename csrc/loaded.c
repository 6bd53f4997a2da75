/* The shared objects loaded into this process whose name (the path given to dlopen) starts with one of a
 * few prefixes, read from the dynamic linker's list. Python's own route to that list, dl_iterate_phdr with
 * a ctypes callback, takes the GIL back once per object: while an engine's main thread keeps the GIL busy,
 * each of those hand-overs waits out a switch interval (5 ms), and a few hundred objects took a second
 * (SGLang's scheduler serving, H200). Here the walk is one foreign call, made without the GIL. */
#include <link.h>
#include <string.h>

#include "foundry.h"

typedef struct {
  const char *prefixes; /* NUL-separated */
  size_t prefixes_size;
  char *out;
  size_t cap, need;
} walk;

static int matches(const walk *w, const char *name) {
  for (size_t at = 0; at < w->prefixes_size;) {
    const char *prefix = w->prefixes + at;
    size_t len = strnlen(prefix, w->prefixes_size - at);
    if (len && strncmp(name, prefix, len) == 0) return 1;
    at += len + 1;
  }
  return 0;
}

static int one(struct dl_phdr_info *info, size_t size, void *data) {
  walk *w = data;
  (void)size;
  const char *name = info->dlpi_name;
  if (!name || !*name || !matches(w, name)) return 0;
  size_t len = strlen(name) + 1;
  if (w->need + len <= w->cap) memcpy(w->out + w->need, name, len);
  w->need += len;
  return 0;
}

size_t fdy_loaded_objects(const char *prefixes, size_t prefixes_size, char *out, size_t cap) {
  walk w = {prefixes, prefixes_size, out, cap, 0};
  dl_iterate_phdr(one, &w);
  return w.need;
}
