/* Small containers: a 64-bit hash map and a growable byte buffer. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static size_t slot_of(uint64_t key, size_t cap) {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  return (size_t)key & (cap - 1);
}

static int grow(fdy_map *m) {
  size_t cap = m->cap ? m->cap * 2 : 64;
  uint64_t *keys = calloc(cap, sizeof(uint64_t)), *vals = calloc(cap, sizeof(uint64_t));
  if (!keys || !vals) {
    free(keys);
    free(vals);
    return -1;
  }
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->keys[i]) continue;
    size_t s = slot_of(m->keys[i], cap);
    while (keys[s]) s = (s + 1) & (cap - 1);
    keys[s] = m->keys[i];
    vals[s] = m->vals[i];
  }
  free(m->keys);
  free(m->vals);
  m->keys = keys;
  m->vals = vals;
  m->cap = cap;
  return 0;
}

int fdy_map_put(fdy_map *m, uint64_t key, uint64_t val) {
  if (!key) return -1;
  if ((m->len + 1) * 2 > m->cap && grow(m) != 0) return -1;
  size_t s = slot_of(key, m->cap);
  while (m->keys[s] && m->keys[s] != key) s = (s + 1) & (m->cap - 1);
  if (!m->keys[s]) m->len++;
  m->keys[s] = key;
  m->vals[s] = val;
  return 0;
}

int fdy_map_get(const fdy_map *m, uint64_t key, uint64_t *val) {
  if (!m->cap || !key) return 0;
  size_t s = slot_of(key, m->cap);
  while (m->keys[s]) {
    if (m->keys[s] == key) {
      if (val) *val = m->vals[s];
      return 1;
    }
    s = (s + 1) & (m->cap - 1);
  }
  return 0;
}

void fdy_map_del(fdy_map *m, uint64_t key) {
  if (!m->cap || !key) return;
  size_t s = slot_of(key, m->cap);
  while (m->keys[s] && m->keys[s] != key) s = (s + 1) & (m->cap - 1);
  if (!m->keys[s]) return;
  m->keys[s] = 0;
  m->len--;
  /* Re-insert the rest of the cluster so that lookups never stop at the hole. */
  for (size_t t = (s + 1) & (m->cap - 1); m->keys[t]; t = (t + 1) & (m->cap - 1)) {
    uint64_t k = m->keys[t], v = m->vals[t];
    m->keys[t] = 0;
    m->len--;
    fdy_map_put(m, k, v);
  }
}

void fdy_map_free(fdy_map *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof(*m));
}

size_t fdy_buf_reserve(fdy_buf *b, size_t n) {
  if (b->oom) return 0;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n) cap *= 2;
    uint8_t *data = realloc(b->data, cap);
    if (!data) {
      b->oom = 1;
      return 0;
    }
    b->data = data;
    b->cap = cap;
  }
  size_t at = b->len;
  memset(b->data + at, 0, n);
  b->len += n;
  return at;
}

void fdy_buf_put(fdy_buf *b, const void *src, size_t n) {
  size_t at = fdy_buf_reserve(b, n);
  if (!b->oom && n) memcpy(b->data + at, src, n);
}

void fdy_buf_align8(fdy_buf *b) {
  size_t pad = (8 - (b->len & 7)) & 7;
  if (pad) fdy_buf_reserve(b, pad);
}
