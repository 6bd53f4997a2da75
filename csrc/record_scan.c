/* SAVE's reading of the graph records it has just extracted, without building a node object per node:
 * fdy_record_scan checks a record by exactly the rules of the Python reader (foundry/records/parse.py,
 * parse_record: the same records accepted, the same byte and field named first) and hands back what SAVE
 * derives from it; fdy_record_compare compares two records' top-level nodes for template grouping. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "record.h"

typedef unsigned long long ull; /* for %llu */
#define OOM(what, n) fdy_fail(FDY_ERR_INVALID, "out of host memory for %zu %s", (size_t)(n), what)
#define KNOWN_TYPE(prefix, name) case prefix##name:

/* 1 for a value of FDY_NODE_TYPES: a node type a reader can name, though most cannot be persisted. */
static int known_type(uint8_t type) {
  switch (type) {
    FDY_NODE_TYPES(KNOWN_TYPE)
    return 1;
    default: return 0;
  }
}

typedef struct {
  const uint8_t *p;
  uint32_t functions, events; /* the top-level tables' sizes, which bound every node's indices */
  fdy_record_scan_info *info;
  uint64_t *spans;            /* (start, end) of each top-level node record */
  uint32_t *kernels;          /* function index of each kernel node in tree order; NULL: not asked for */
  size_t nkernels;
  uint32_t path[FDY_MAX_DEPTH + 1]; /* path[d]: index of the child-graph node that holds depth d + 1 */
} scan_t;

/* Fails the scan with parse.py's message: "graph record, byte N, ", the path of child-graph nodes down to
 * `depth` ("node 4 > node 0 > "), then the field and the problem. */
__attribute__((format(printf, 4, 5))) static int fail(const scan_t *s, int depth, uint64_t at, const char *fmt, ...) {
  char where[512] = "", detail[512];
  size_t n = 0;
  for (int d = 0; d < depth && n < sizeof(where); d++)
    n += (size_t)snprintf(where + n, sizeof(where) - n, "node %u > ", s->path[d]);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof(detail), fmt, ap);
  va_end(ap);
  return fdy_fail(FDY_ERR_CORRUPT, "graph record, byte %llu, %s%s", (ull)at, where, detail);
}

static int scan_graph(scan_t *s, uint64_t start, uint64_t limit, int depth, uint64_t *total);

/* A failure of node i (its type's name in `name`) of a record at depth `depth`. */
#define NFAIL(at, fmt, ...) fail(s, depth, at, "node %u (%s) " fmt, i, name, ##__VA_ARGS__)

/* Kernel node i, whose record (a multiple of 8 bytes, at least a rec_kernel, inside its record) is at off. */
static int scan_kernel(scan_t *s, uint64_t off, uint32_t i, int depth) {
  const char *name = "kernel";
  rec_kernel k;
  memcpy(&k, s->p + off, sizeof(k));
#define KAT(field) (off + offsetof(rec_kernel, field))
  if (k.function >= s->functions)
    return NFAIL(KAT(function), "function index: %u is not below the function count %u", k.function, s->functions);
  if (k.arg_mode > FDY_ARG_EXTRA)
    return NFAIL(KAT(arg_mode), "argument mode: %u, must be 0 (kernelParams) or 1 (extra)", k.arg_mode);
  if (k.reserved0 || k.reserved1 || k.reserved2)
    return NFAIL(k.reserved0 ? KAT(reserved0) : k.reserved1 ? KAT(reserved1) : KAT(reserved2),
                 "reserved: must be zero");
  if (k.arg_mode == FDY_ARG_EXTRA && k.param_count)
    return NFAIL(KAT(param_count), "parameter count: %u, must be 0 with an extra buffer", k.param_count);
  uint64_t params_at = off + sizeof(rec_kernel), attrs_at = params_at + (uint64_t)k.param_count * sizeof(rec_param);
  uint64_t args_at = attrs_at + (uint64_t)k.attr_count * sizeof(rec_attr), pad_at = args_at + k.arg_bytes;
  uint64_t need = (pad_at - off + 7) & ~(uint64_t)7;
  if (need != k.h.bytes)
    return NFAIL(KAT(h.bytes), "record size: %u, but %u parameters, %u launch attributes and a %u-byte argument "
                 "buffer need %llu", k.h.bytes, k.param_count, k.attr_count, k.arg_bytes, (ull)need);
#undef KAT
  /* The record's size is what its tables and arguments need, and it lies in the data: so do they. */
  for (uint32_t n = 0; n < k.param_count; n++) {
    rec_param pr;
    memcpy(&pr, s->p + params_at + n * sizeof(pr), sizeof(pr));
    if ((uint64_t)pr.offset + pr.size > k.arg_bytes)
      return NFAIL(params_at + n * sizeof(pr), "parameter %u: bytes %u..%llu lie outside the %u-byte argument buffer",
                   n, pr.offset, (ull)pr.offset + pr.size, k.arg_bytes);
  }
  for (uint32_t n = 0; n < k.attr_count; n++) {
    uint64_t at = attrs_at + n * sizeof(rec_attr) + offsetof(rec_attr, reserved);
    uint32_t reserved;
    memcpy(&reserved, s->p + at, sizeof(reserved));
    if (reserved) return NFAIL(at, "launch attribute %u reserved: must be zero", n);
  }
  for (uint64_t at = pad_at; at < off + k.h.bytes; at++)
    if (s->p[at]) return NFAIL(pad_at, "padding: must be zero");
  if (s->kernels) s->kernels[s->nkernels] = k.function;
  s->nkernels++;
  return 0;
}

/* Node i of a record at depth `depth`, at off in a record that ends at end; *size gets its record's size. */
static int scan_node(scan_t *s, uint64_t off, uint64_t end, uint32_t i, int depth, uint32_t *size) {
  if (end - off < sizeof(rec_node))
    return fail(s, depth, off, "node %u header: needs 8 bytes, only %llu remain before byte %llu", i, (ull)(end - off),
                (ull)end);
  rec_node h;
  memcpy(&h, s->p + off, sizeof(h));
  const char *name = fdy_node_type_name(h.type);
  uint64_t at_size = off + offsetof(rec_node, bytes);
  if (h.reserved0 || h.reserved1)
    return NFAIL(off + (h.reserved0 ? offsetof(rec_node, reserved0) : offsetof(rec_node, reserved1)),
                 "reserved: must be zero");
  if (h.bytes < sizeof(rec_node) || h.bytes % 8)
    return NFAIL(at_size, "record size: %u is not a positive multiple of 8", h.bytes);
  if (h.bytes > end - off)
    return NFAIL(at_size, "record size: %u runs past the record's end at byte %llu", h.bytes, (ull)end);
  *size = h.bytes;
  fdy_record_scan_info *info = s->info;
  uint32_t expect = 0;
  switch (h.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      if (h.bytes < sizeof(rec_kernel))
        return NFAIL(at_size, "record size: %u, a kernel node needs at least %zu", h.bytes, sizeof(rec_kernel));
      info->kernel++;
      return scan_kernel(s, off, i, depth);
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      if (h.bytes < sizeof(rec_node) + sizeof(rec_header))
        return NFAIL(at_size, "record size: %u is too small to hold a child record", h.bytes);
      info->child_graph++;
      info->children = 1;
      s->path[depth] = i;
      uint64_t total;
      int rc = scan_graph(s, off + sizeof(rec_node), off + h.bytes, depth + 1, &total);
      if (!rc && total + sizeof(rec_node) != h.bytes)
        return NFAIL(at_size, "record size: %u, but the child record is %llu bytes", h.bytes, (ull)total);
      return rc;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: expect = sizeof(rec_memset); info->memset++; break;
    case CU_GRAPH_NODE_TYPE_MEMCPY: expect = sizeof(rec_memcpy); info->memcpy++; break;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: expect = sizeof(rec_event); info->event_wait++; break;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: expect = sizeof(rec_event); info->event_record++; break;
    case CU_GRAPH_NODE_TYPE_EMPTY: expect = sizeof(rec_node); info->empty++; break;
    default:
      if (known_type(h.type)) return NFAIL(off, "type: %s nodes cannot appear in a format-1 record", name);
      return NFAIL(off, "type: unknown node type %u", h.type);
  }
  if (h.bytes != expect) return NFAIL(at_size, "record size: %u, must be %u", h.bytes, expect);
  if (h.type == CU_GRAPH_NODE_TYPE_MEMSET) {
    rec_memset m;
    memcpy(&m, s->p + off, sizeof(m));
    if (m.element_size != 1 && m.element_size != 2 && m.element_size != 4)
      return NFAIL(off + offsetof(rec_memset, element_size), "element size: %u, must be 1, 2 or 4", m.element_size);
  } else if (h.type == CU_GRAPH_NODE_TYPE_WAIT_EVENT || h.type == CU_GRAPH_NODE_TYPE_EVENT_RECORD) {
    rec_event e;
    memcpy(&e, s->p + off, sizeof(e));
    if (e.event >= s->events)
      return NFAIL(off + offsetof(rec_event, event), "event index: %u is not below the event count %u", e.event,
                   s->events);
    if (e.reserved) return NFAIL(off + offsetof(rec_event, reserved), "reserved: must be zero");
  }
  return 0;
}

/* The record at start, which must end at or before limit (exactly at it at depth 0); *total gets its size. */
static int scan_graph(scan_t *s, uint64_t start, uint64_t limit, int depth, uint64_t *total) {
  const char *what = depth ? "child graph header" : "record header";
  if (depth > FDY_MAX_DEPTH)
    return fail(s, depth, start, "%s: child graphs are nested more than %d deep", what, FDY_MAX_DEPTH);
  if (limit - start < sizeof(rec_header))
    return fail(s, depth, start, "%s: needs 32 bytes, only %llu remain in the enclosing record", what,
                (ull)(limit - start));
  rec_header h;
  memcpy(&h, s->p + start, sizeof(h));
  ull bytes = h.total_bytes;
#define HFAIL(field, fmt, ...) fail(s, depth, start + offsetof(rec_header, field), "%s " fmt, what, __VA_ARGS__)
  if (memcmp(h.magic, FDY_RECORD_MAGIC, 4))
    return HFAIL(magic, "magic: %02x %02x %02x %02x, expected \"%s\"", (uint8_t)h.magic[0], (uint8_t)h.magic[1],
                 (uint8_t)h.magic[2], (uint8_t)h.magic[3], FDY_RECORD_MAGIC);
  if (h.version != FDY_RECORD_VERSION)
    return HFAIL(version, "version: %u, the enclosing record is version %d", h.version, FDY_RECORD_VERSION);
  if (h.header_bytes != sizeof(rec_header))
    return HFAIL(header_bytes, "size: %u, expected %zu", h.header_bytes, sizeof(rec_header));
  if (bytes % 8 || bytes < sizeof(rec_header))
    return HFAIL(total_bytes, "total bytes: %llu is not a multiple of 8 of at least 32", bytes);
  if (!depth && bytes != limit)
    return HFAIL(total_bytes, "total bytes: %llu, but the data is %llu bytes long", bytes, (ull)limit);
  if (depth && bytes > limit - start)
    return HFAIL(total_bytes, "total bytes: %llu runs past the node record's end", bytes);
  if (depth && h.function_count)
    return HFAIL(function_count, "function count: %u, child graphs must have 0", h.function_count);
  if (depth && h.event_count) return HFAIL(event_count, "event count: %u, child graphs must have 0", h.event_count);
  if (!depth) {
    s->functions = h.function_count;
    s->events = h.event_count;
  }
  /* Every count is checked against the bytes present before anything is sized by it. */
  uint64_t room = bytes - sizeof(rec_header), end = start + bytes;
  if ((uint64_t)h.node_count * sizeof(rec_node) + (uint64_t)h.edge_count * sizeof(rec_edge) > room)
    return HFAIL(node_count, "node/edge count: %u nodes and %u edges cannot fit in a %llu-byte record", h.node_count,
                 h.edge_count, bytes);
  if ((uint64_t)h.event_count * sizeof(rec_event) > room) /* each event is used by at least one event node */
    return HFAIL(event_count, "event count: %u events cannot be used by the nodes of %llu bytes", h.event_count, bytes);
#undef HFAIL
  if (!depth && !(s->spans = malloc((h.node_count ? h.node_count : 1) * 2 * sizeof(uint64_t))))
    return OOM("node spans", h.node_count);
  s->info->nodes += h.node_count;
  s->info->edges += h.edge_count;
  uint64_t off = start + sizeof(rec_header);
  for (uint32_t i = 0; i < h.node_count; i++) {
    uint32_t size = 0;
    int rc = scan_node(s, off, end, i, depth, &size);
    if (rc) return rc;
    if (!depth) {
      s->spans[2 * i] = off;
      s->spans[2 * i + 1] = off + size;
    }
    off += size;
  }
  if (end - off != (uint64_t)h.edge_count * sizeof(rec_edge))
    return fail(s, depth, off, "edge table: %u edges need %llu bytes, %llu remain before byte %llu", h.edge_count,
                (ull)h.edge_count * sizeof(rec_edge), (ull)(end - off), (ull)end);
  static const uint8_t zero[sizeof(((rec_edge *)0)->reserved)];
  for (uint32_t j = 0; j < h.edge_count; j++) {
    uint64_t at = off + (uint64_t)j * sizeof(rec_edge);
    rec_edge e;
    memcpy(&e, s->p + at, sizeof(e));
    if (e.from >= h.node_count)
      return fail(s, depth, at, "edge %u from: node %u does not exist (%u nodes)", j, e.from, h.node_count);
    if (e.to >= h.node_count)
      return fail(s, depth, at + offsetof(rec_edge, to), "edge %u to: node %u does not exist (%u nodes)", j, e.to,
                  h.node_count);
    if (memcmp(e.reserved, zero, sizeof(zero)))
      return fail(s, depth, at + offsetof(rec_edge, reserved), "edge %u reserved: must be zero", j);
  }
  *total = bytes;
  return 0;
}

static int edge_order(const void *x, const void *y) {
  topo_edge a, b;
  memcpy(&a, x, sizeof(a));
  memcpy(&b, y, sizeof(b));
  uint64_t ka = (uint64_t)a.from << 32 | a.to, kb = (uint64_t)b.from << 32 | b.to;
  uint32_t pa = (uint32_t)a.from_port << 16 | (uint32_t)a.to_port << 8 | a.type;
  uint32_t pb = (uint32_t)b.from_port << 16 | (uint32_t)b.to_port << 8 | b.type;
  return ka != kb ? (ka < kb ? -1 : 1) : (pa > pb) - (pa < pb);
}

/* The topology key's material (format.h, topo_*) of a checked record without child graphs. */
static int topology(const scan_t *s, const uint8_t *rec, size_t size, uint8_t **out, size_t *out_size) {
  const fdy_record_scan_info *info = s->info;
  size_t n = sizeof(topo_header) + info->kernel * sizeof(topo_kernel) + (info->node_count - info->kernel) +
             (size_t)info->edge_count * sizeof(topo_edge);
  uint8_t *buf = malloc(n);
  if (!buf) return OOM("topology bytes", n);
  topo_header th = {info->node_count, info->edge_count};
  memcpy(buf, &th, sizeof(th));
  size_t at = sizeof(th);
  for (uint32_t i = 0; i < info->node_count; i++) {
    const uint8_t *node = rec + s->spans[2 * i];
    if (node[0] != CU_GRAPH_NODE_TYPE_KERNEL) {
      buf[at++] = node[0];
      continue;
    }
    rec_kernel k;
    memcpy(&k, node, sizeof(k));
    topo_kernel tk = {CU_GRAPH_NODE_TYPE_KERNEL, 0, {0, 0, 0}};
    const uint8_t *attrs = node + sizeof(k) + (size_t)k.param_count * sizeof(rec_param);
    for (uint32_t a = 0; a < k.attr_count; a++) { /* the last of a repeated attribute wins */
      rec_attr attr;
      memcpy(&attr, attrs + a * sizeof(rec_attr), sizeof(attr));
      if (attr.id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE) {
        uint32_t on;
        memcpy(&on, attr.value, sizeof(on));
        tk.cooperative = on != 0;
      } else if (attr.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
        memcpy(tk.cluster, attr.value, sizeof(tk.cluster));
      }
    }
    memcpy(buf + at, &tk, sizeof(tk));
    at += sizeof(tk);
  }
  const uint8_t *edges = rec + size - (size_t)info->edge_count * sizeof(rec_edge);
  for (uint32_t j = 0; j < info->edge_count; j++) {
    rec_edge e;
    memcpy(&e, edges + (size_t)j * sizeof(e), sizeof(e));
    topo_edge te = {e.from, e.to, e.from_port, e.to_port, e.type};
    memcpy(buf + at + (size_t)j * sizeof(te), &te, sizeof(te));
  }
  qsort(buf + at, info->edge_count, sizeof(topo_edge), edge_order);
  *out = buf;
  *out_size = n;
  return 0;
}

FDY_EXPORT int fdy_record_scan(const void *record, size_t size, fdy_record_scan_info *out, uint64_t **spans,
                               uint32_t **kernel_functions, uint8_t **topology_out, size_t *topology_size) {
  if ((!record && size) || !out || (topology_out && !topology_size))
    return fdy_fail(FDY_ERR_INVALID, "fdy_record_scan: null argument");
  if (spans) *spans = NULL;
  if (kernel_functions) *kernel_functions = NULL;
  if (topology_out) {
    *topology_out = NULL;
    *topology_size = 0;
  }
  memset(out, 0, sizeof(*out));
  const uint8_t *p = record;
  if (size && memcmp(p, FDY_RECORD_MAGIC, size < 4 ? size : 4))
    return fdy_fail(FDY_ERR_CORRUPT, "graph record, byte 0, magic: not a Foundry graph record (expected \"%s\")",
                    FDY_RECORD_MAGIC);
  if (size < sizeof(rec_header))
    return fdy_fail(FDY_ERR_CORRUPT, "graph record, byte %zu, header: truncated: the data is %zu bytes long, a record "
                    "header needs 32", size, size);
  scan_t s = {.p = p, .info = out};
  int rc = 0;
  if (kernel_functions && !(s.kernels = malloc((size / sizeof(rec_kernel) + 1) * sizeof(uint32_t))))
    rc = OOM("kernel function indices", size / sizeof(rec_kernel));
  uint64_t total;
  if (!rc) rc = scan_graph(&s, 0, size, 0, &total);
  if (!rc) {
    rec_header h;
    memcpy(&h, p, sizeof(h));
    out->node_count = h.node_count;
    out->edge_count = h.edge_count;
    out->function_count = h.function_count;
    out->event_count = h.event_count;
    if (topology_out && !out->children) rc = topology(&s, p, size, topology_out, topology_size);
  }
  if (rc) {
    free(s.spans);
    free(s.kernels);
    memset(out, 0, sizeof(*out));
    return rc;
  }
  if (spans && out->node_count) *spans = s.spans;
  else free(s.spans);
  if (kernel_functions && s.nkernels) *kernel_functions = s.kernels;
  else free(s.kernels);
  return 0;
}

/* ------------------------------------------------------------------ comparing two records' nodes */
typedef struct {
  const uint8_t *p;
  const uint32_t *ids; /* the identity of each function index */
  size_t nids;
  char name;
} side_t;

typedef struct {
  side_t a, b;
  uint32_t *differing; /* room for every top-level node */
  size_t count;
  int64_t blocked;
} compare_t;

#define DAMAGED(side, at, what) \
  fdy_fail(FDY_ERR_CORRUPT, "fdy_record_compare: record %c, byte %llu: %s", (side)->name, (ull)(at), what)

/* The size of the node record at `at`, checked to lie inside [at, end). */
static int node_bytes(const side_t *s, uint64_t at, uint64_t end, uint32_t *bytes) {
  if (at > end || end - at < sizeof(rec_node)) return DAMAGED(s, at, "a node record runs past its record's end");
  memcpy(bytes, s->p + at + offsetof(rec_node, bytes), sizeof(*bytes));
  if (*bytes < sizeof(rec_node) || *bytes % 8 || *bytes > end - at) return DAMAGED(s, at, "bad node record size");
  return 0;
}

static int kernel_head(const side_t *s, uint64_t at, uint32_t bytes, rec_kernel *k) {
  if (bytes < sizeof(*k)) return DAMAGED(s, at, "a kernel node record shorter than its fixed part");
  memcpy(k, s->p + at, sizeof(*k));
  if (k->function >= s->nids)
    return fdy_fail(FDY_ERR_INVALID, "fdy_record_compare: record %c names function %u, but %zu function identities "
                    "were given", s->name, k->function, s->nids);
  return 0;
}

static int same_node(compare_t *c, uint64_t xa, uint32_t na, uint64_t xb, uint32_t nb, int depth, int *same);

/* *blocks: an exec cannot switch node record xa (of a) to xb (of b), which differ (foundry/records/delta.py,
 * override_problem): their types differ, the type is not kernel, memset or memcpy, or the kernels' launch
 * attribute tables differ. */
static int blocks(const compare_t *c, uint64_t xa, uint32_t na, uint64_t xb, uint32_t nb, int *out) {
  const uint8_t *x = c->a.p + xa, *y = c->b.p + xb;
  *out = x[0] != y[0] || (x[0] != CU_GRAPH_NODE_TYPE_KERNEL && x[0] != CU_GRAPH_NODE_TYPE_MEMSET &&
                          x[0] != CU_GRAPH_NODE_TYPE_MEMCPY);
  if (*out || x[0] != CU_GRAPH_NODE_TYPE_KERNEL) return 0;
  rec_kernel ka = {0}, kb = {0};
  int rc = kernel_head(&c->a, xa, na, &ka);
  if (rc || (rc = kernel_head(&c->b, xb, nb, &kb))) return rc;
  uint64_t at_a = sizeof(ka) + (uint64_t)ka.param_count * sizeof(rec_param);
  uint64_t at_b = sizeof(kb) + (uint64_t)kb.param_count * sizeof(rec_param), len = ka.attr_count * sizeof(rec_attr);
  if (ka.attr_count != kb.attr_count) return *out = 1, 0;
  if (at_a + len > na || at_b + len > nb) return DAMAGED(&c->a, xa, "a kernel's launch attributes run past its record");
  *out = memcmp(x + at_a, y + at_b, len) != 0;
  return 0;
}

/* Compares n node records of a (from *xa, inside its record ending at ea) with n of b, moving *xa and *xb past
 * them. At depth 0 every node that is not the same is classified into c (blocked, or one more differing);
 * deeper, the first one ends the walk with *same 0. */
static int same_nodes(compare_t *c, uint64_t *xa, uint64_t ea, uint64_t *xb, uint64_t eb, uint32_t n, int depth,
                      int *same) {
  *same = 1;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t na = 0, nb = 0;
    int one = 0, stop = 0;
    int rc = node_bytes(&c->a, *xa, ea, &na);
    if (rc || (rc = node_bytes(&c->b, *xb, eb, &nb)) || (rc = same_node(c, *xa, na, *xb, nb, depth, &one))) return rc;
    if (!one) {
      *same = 0;
      if (depth) return 0;
      if ((rc = blocks(c, *xa, na, *xb, nb, &stop))) return rc;
      if (stop) {
        c->blocked = i;
        c->count = 0;
        return 0;
      }
      c->differing[c->count++] = i;
    }
    *xa += na;
    *xb += nb;
  }
  return 0;
}

/* *same: the child records at xa (ending at or before ea) and xb are equal: their header bytes, every node
 * (same_node), then the bytes that follow the nodes up to each record's total (its edge table). */
static int same_graph(compare_t *c, uint64_t xa, uint64_t ea, uint64_t xb, uint64_t eb, int depth, int *same) {
  rec_header ha, hb;
  *same = 0;
  if (depth > FDY_MAX_DEPTH) return DAMAGED(&c->a, xa, "child graphs nested too deep");
  int rc = fdy_record_header(c->a.p + xa, ea - xa, &ha);
  if (rc || (rc = fdy_record_header(c->b.p + xb, eb - xb, &hb))) return rc;
  if (memcmp(&ha, &hb, sizeof(ha))) return 0;
  ea = xa + ha.total_bytes;
  eb = xb + hb.total_bytes;
  xa += sizeof(ha);
  xb += sizeof(hb);
  if ((rc = same_nodes(c, &xa, ea, &xb, eb, ha.node_count, depth, same)) || !*same) return rc;
  *same = ea - xa == eb - xb && !memcmp(c->a.p + xa, c->b.p + xb, ea - xa);
  return 0;
}

/* *same: node records xa (na bytes) and xb (nb) are equal byte for byte, except that kernels name functions
 * of equal identity; child graphs compared the same way, node by node. */
static int same_node(compare_t *c, uint64_t xa, uint32_t na, uint64_t xb, uint32_t nb, int depth, int *same) {
  const uint8_t *x = c->a.p + xa, *y = c->b.p + xb;
  *same = 0;
  if (na != nb || x[0] != y[0]) return 0;
  if (x[0] == CU_GRAPH_NODE_TYPE_GRAPH)
    return same_graph(c, xa + sizeof(rec_node), xa + na, xb + sizeof(rec_node), xb + nb, depth + 1, same);
  if (x[0] != CU_GRAPH_NODE_TYPE_KERNEL) {
    *same = !memcmp(x, y, na);
    return 0;
  }
  rec_kernel ka = {0}, kb = {0};
  int rc = kernel_head(&c->a, xa, na, &ka);
  if (rc || (rc = kernel_head(&c->b, xb, nb, &kb))) return rc;
  size_t fn = offsetof(rec_kernel, function), past = fn + sizeof(ka.function);
  *same = c->a.ids[ka.function] == c->b.ids[kb.function] && !memcmp(x, y, fn) && !memcmp(x + past, y + past, na - past);
  return 0;
}

FDY_EXPORT int fdy_record_compare(const void *a, size_t a_size, const uint32_t *a_ids, size_t a_functions,
                                  const void *b, size_t b_size, const uint32_t *b_ids, size_t b_functions,
                                  uint32_t **differing, size_t *count, int64_t *blocked, int *edges_equal) {
  if (!a || !b || (a_functions && !a_ids) || (b_functions && !b_ids) || !differing || !count || !blocked ||
      !edges_equal)
    return fdy_fail(FDY_ERR_INVALID, "fdy_record_compare: null argument");
  *differing = NULL;
  *count = 0;
  *blocked = -1;
  *edges_equal = 0;
  compare_t c = {{a, a_ids, a_functions, 'a'}, {b, b_ids, b_functions, 'b'}, NULL, 0, -1};
  rec_header ha, hb;
  int rc = fdy_record_header(a, a_size, &ha);
  if (rc || (rc = fdy_record_header(b, b_size, &hb))) return rc;
  if (ha.node_count != hb.node_count)
    return fdy_fail(FDY_ERR_INVALID, "fdy_record_compare: records of %u and %u nodes; only records of one node count "
                    "are compared", ha.node_count, hb.node_count);
  if (!(c.differing = malloc((ha.node_count ? ha.node_count : 1) * sizeof(uint32_t))))
    return OOM("node indices", ha.node_count);
  uint64_t xa = sizeof(ha), xb = sizeof(hb);
  int same;
  if ((rc = same_nodes(&c, &xa, ha.total_bytes, &xb, hb.total_bytes, ha.node_count, 0, &same)) || !c.count)
    free(c.differing);
  if (rc) return rc;
  /* A checked record's edge table is its last bytes (fdy_record_header: they lie inside it). */
  uint64_t ta = ha.total_bytes - (uint64_t)ha.edge_count * sizeof(rec_edge);
  uint64_t tb = hb.total_bytes - (uint64_t)hb.edge_count * sizeof(rec_edge);
  *edges_equal = ha.edge_count == hb.edge_count && !memcmp(c.a.p + ta, c.b.p + tb, ha.edge_count * sizeof(rec_edge));
  *differing = c.count ? c.differing : NULL;
  *count = c.count;
  *blocked = c.blocked;
  return 0;
}
