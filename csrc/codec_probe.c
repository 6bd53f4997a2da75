/* SAVE's probe for graph-safe random numbers, one call per step (foundry/save/rngprobe.py): a graph's
 * work switched off or on in an exec, and the argument words that point at live memory read back. Both
 * walk the graph's own record rather than asking the driver per node. */
#include <stdlib.h>
#include <string.h>

#include "record.h"

#define CORRUPT(...) fdy_fail(FDY_ERR_CORRUPT, "damaged graph record: " __VA_ARGS__)
#define SPAN_GAP 4096 /* words of one live range less than a page apart are read in one copy */

static int is_work(uint8_t type) {
  return type == CU_GRAPH_NODE_TYPE_KERNEL || type == CU_GRAPH_NODE_TYPE_MEMCPY || type == CU_GRAPH_NODE_TYPE_MEMSET;
}

/* The record was extracted from this very graph (fdy_graph_extract), which writes node i of the record
 * for node i of cuGraphGetNodes: so the record's types are the nodes' types, and no per-node driver
 * query is needed. A record of another graph is refused when its node count differs; a work node of
 * the record that the graph holds as another type makes cuGraphNodeSetEnabled fail, which is reported. */
FDY_EXPORT int fdy_graph_work_enable(uint64_t graph, uint64_t exec, const void *record, size_t record_size,
                                     int enabled) {
  int rc = fdy_driver_ensure(), switch_rc = 0;
  if (rc) return rc;
  if (!record) return fdy_fail(FDY_ERR_INVALID, "fdy_graph_work_enable: null record");
  size_t count = 0;
  if ((rc = fdy_record_node_offsets(record, record_size, NULL, 0, &count))) return rc;
  size_t *offsets = malloc((count ? count : 1) * sizeof(size_t));
  CUgraphNode *nodes = malloc((count ? count : 1) * sizeof(CUgraphNode));
  if (!offsets || !nodes) {
    free(offsets);
    free(nodes);
    return fdy_fail(FDY_ERR_INVALID, "out of host memory for %zu nodes", count);
  }
  rc = fdy_record_node_offsets(record, record_size, offsets, count, &count);
  CUgraph g = (CUgraph)(uintptr_t)graph;
  size_t n = 0;
  CUresult r = rc ? CUDA_SUCCESS : fdy_drv.cuGraphGetNodes(g, NULL, &n);
  if (!rc && r != CUDA_SUCCESS) rc = fdy_fail_cu(r, "cuGraphGetNodes", "graph %p", (void *)g);
  if (!rc && n != count)
    rc = fdy_fail(FDY_ERR_INVALID, "graph %p has %zu nodes, its record %zu: the record is another graph's", (void *)g,
                  n, count);
  if (!rc && n && (r = fdy_drv.cuGraphGetNodes(g, nodes, &n)) != CUDA_SUCCESS)
    rc = fdy_fail_cu(r, "cuGraphGetNodes", "graph %p", (void *)g);
  /* Switching off stops at the first failure (the caller switches everything on again); switching on goes
   * on past one, so that as much as possible runs again, and reports the first. */
  for (size_t i = 0; rc == 0 && i < count; i++) {
    uint8_t type = ((const uint8_t *)record)[offsets[i] + offsetof(rec_node, type)];
    if (!is_work(type)) continue;
    r = fdy_drv.cuGraphNodeSetEnabled((CUgraphExec)(uintptr_t)exec, nodes[i], enabled ? 1 : 0);
    if (r == CUDA_SUCCESS) continue;
    int failed = fdy_fail_cu(r, "cuGraphNodeSetEnabled", "node %zu (%s) of graph %p, %s", i, fdy_node_type_name(type),
                             (void *)g, enabled ? "switching it back on" : "switching it off");
    if (!enabled) rc = failed;
    else if (!switch_rc) switch_rc = failed;
  }
  if (!rc) rc = switch_rc;
  free(offsets);
  free(nodes);
  return rc;
}

typedef struct {
  uint64_t *words;
  size_t count, cap;
  const uint64_t *ranges; /* (start, end) pairs, sorted, disjoint */
  size_t nranges;
} collect_t;

/* The index of the live range holding [p, p + 8), or nranges. */
static size_t range_of(const collect_t *c, uint64_t p) {
  size_t lo = 0, hi = c->nranges;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c->ranges[2 * mid + 1] <= p) lo = mid + 1;
    else hi = mid;
  }
  return lo < c->nranges && c->ranges[2 * lo] <= p && p <= c->ranges[2 * lo + 1] - 8 ? lo : c->nranges;
}

static int add_word(collect_t *c, uint64_t w) {
  if (range_of(c, w) == c->nranges) return 0;
  if (c->count == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 256;
    uint64_t *grown = realloc(c->words, cap * sizeof(uint64_t));
    if (!grown) return fdy_fail(FDY_ERR_INVALID, "out of host memory for %zu pointer words", cap);
    c->words = grown;
    c->cap = cap;
  }
  c->words[c->count++] = w;
  return 0;
}

/* Every 8-byte word of every kernel node's argument buffer (child graphs' included), from its start. */
static int collect(collect_t *c, const uint8_t *rec, size_t size, int depth) {
  if (depth > FDY_MAX_DEPTH) return CORRUPT("child graphs nested more than %d deep", FDY_MAX_DEPTH);
  size_t count = 0;
  int rc = fdy_record_node_offsets(rec, size, NULL, 0, &count);
  if (rc) return rc;
  size_t *offsets = malloc((count ? count : 1) * sizeof(size_t));
  if (!offsets) return fdy_fail(FDY_ERR_INVALID, "out of host memory for %zu nodes", count);
  rc = fdy_record_node_offsets(rec, size, offsets, count, &count); /* node sizes checked: each lies in the record */
  for (size_t i = 0; rc == 0 && i < count; i++) {
    const uint8_t *at = rec + offsets[i];
    rec_node head;
    memcpy(&head, at, sizeof(head));
    if (head.type == CU_GRAPH_NODE_TYPE_KERNEL) {
      rec_kernel k;
      if (head.bytes < sizeof(k)) {
        rc = CORRUPT("kernel node %zu of %u bytes", i, head.bytes);
        break;
      }
      memcpy(&k, at, sizeof(k));
      uint64_t args = sizeof(k) + (uint64_t)k.param_count * sizeof(rec_param) + (uint64_t)k.attr_count * sizeof(rec_attr);
      if (args + k.arg_bytes > head.bytes) {
        rc = CORRUPT("kernel node %zu: its arguments overrun it", i);
        break;
      }
      for (uint64_t w = 0; rc == 0 && w + 8 <= k.arg_bytes; w += 8) {
        uint64_t word;
        memcpy(&word, at + args + w, 8);
        rc = add_word(c, word);
      }
    } else if (head.type == CU_GRAPH_NODE_TYPE_GRAPH) {
      rc = collect(c, at + sizeof(head), head.bytes - sizeof(head), depth + 1);
    }
  }
  free(offsets);
  return rc;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Reads words[first, last) (sorted, all in one live range) in one copy, or word by word when the driver
 * refuses the span; writes (address, value) pairs to out and returns how many. */
static size_t read_span(const uint64_t *words, size_t first, size_t last, uint64_t *out) {
  uint64_t start = words[first], end = words[last - 1] + 8;
  size_t n = 0;
  uint8_t *buf = malloc(end - start);
  if (buf && fdy_drv.cuMemcpyDtoH_v2(buf, (CUdeviceptr)start, end - start) == CUDA_SUCCESS) {
    for (size_t i = first; i < last; i++, n++) {
      out[2 * n] = words[i];
      memcpy(&out[2 * n + 1], buf + (words[i] - start), 8);
    }
  } else {
    for (size_t i = first; i < last; i++) {
      uint64_t v;
      if (fdy_drv.cuMemcpyDtoH_v2(&v, (CUdeviceptr)words[i], 8) != CUDA_SUCCESS) continue; /* unreadable: left out */
      out[2 * n] = words[i];
      out[2 * n + 1] = v;
      n++;
    }
  }
  free(buf);
  return n;
}

FDY_EXPORT int fdy_record_pointed_words(const void *record, size_t record_size, const uint64_t *ranges,
                                        size_t range_count, uint64_t **pairs, size_t *count) {
  int rc = fdy_driver_ensure();
  if (rc) return rc;
  if (!record || !pairs || !count || (range_count && !ranges))
    return fdy_fail(FDY_ERR_INVALID, "fdy_record_pointed_words: null argument");
  *pairs = NULL;
  *count = 0;
  for (size_t i = 0; i < range_count; i++)
    if (ranges[2 * i + 1] < ranges[2 * i] + 8 || (i && ranges[2 * i] < ranges[2 * i - 1]))
      return fdy_fail(FDY_ERR_INVALID, "live range %zu is empty, shorter than a word or out of order", i);
  collect_t c = {NULL, 0, 0, ranges, range_count};
  if ((rc = collect(&c, record, record_size, 0))) {
    free(c.words);
    return rc;
  }
  qsort(c.words, c.count, sizeof(uint64_t), cmp_u64);
  size_t unique = 0;
  for (size_t i = 0; i < c.count; i++)
    if (!unique || c.words[unique - 1] != c.words[i]) c.words[unique++] = c.words[i];
  uint64_t *out = malloc((unique ? unique : 1) * 2 * sizeof(uint64_t));
  if (!out) {
    free(c.words);
    return fdy_fail(FDY_ERR_INVALID, "out of host memory for %zu pointer words", unique);
  }
  size_t n = 0;
  for (size_t first = 0; first < unique;) {
    size_t range = range_of(&c, c.words[first]), last = first + 1;
    while (last < unique && c.words[last] - c.words[last - 1] < SPAN_GAP && range_of(&c, c.words[last]) == range) last++;
    n += read_span(c.words, first, last, out + 2 * n);
    first = last;
  }
  free(c.words);
  *pairs = out;
  *count = n;
  return 0;
}
