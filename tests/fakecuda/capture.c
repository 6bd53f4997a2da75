/* fakecuda: stream capture (begin/end, fork/join check, capture info, capture modes). */
#include "fakecuda.h"

fc_capture *fc_captures; /* every capture begun and not yet ended */
static unsigned long long next_capture_id = 1;
static __thread CUstreamCaptureMode tls_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

fc_capture *fc_capture_by_id(unsigned long long id) {
  for (fc_capture *c = fc_captures; c; c = c->next)
    if (c->id == id) return c;
  return NULL;
}

CUresult fc_capture_unsafe_call(void) {
  unsigned long me = fc_thread_id();
  CUresult r = CUDA_SUCCESS;
  if (tls_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return r;
  for (fc_capture *c = fc_captures; c; c = c->next) {
    if (c->status != CU_STREAM_CAPTURE_STATUS_ACTIVE) continue;
    int bad = (c->thread == me && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
              (tls_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->thread != me &&
               c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
    if (bad) {
      c->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
      r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
  }
  return r;
}

/* ------------------------------------------------------------------ capture */
CUresult fc_begin_capture(CUstream h, int ptds, CUstreamCaptureMode mode) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  fc_stream *s;
  if ((r = fc_stream_resolve(h, ptds, &s))) return r;
  if (fc_stream_is_legacy(s)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  if (s->cap) return CUDA_ERROR_ILLEGAL_STATE;
  fc_capture *c = calloc(1, sizeof(*c));
  if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
  c->graph = fc_graph_new();
  if (!c->graph || !fc_grow((void **)&c->streams, &c->capstreams, 1, sizeof(*c->streams))) {
    if (c->graph) fc_graph_free(c->graph);
    free(c);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  c->graph->is_child = 1; /* not destroyable by the application while capturing */
  c->id = next_capture_id++;
  c->mode = mode;
  c->status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  c->origin = s;
  c->streams[c->nstreams++] = s;
  c->thread = fc_thread_id();
  c->next = fc_captures;
  fc_captures = c;
  s->cap = c;
  fc_deps_clear(&s->deps);
  return CUDA_SUCCESS;
}

FC_API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m) { FC_GUARD(fc_begin_capture(s, 0, m)); }
FC_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode m) { FC_GUARD(fc_begin_capture(s, 1, m)); }
FC_API CUresult cuStreamBeginCapture(CUstream s) { FC_GUARD(fc_begin_capture(s, 0, CU_STREAM_CAPTURE_MODE_GLOBAL)); }
FC_API CUresult cuStreamBeginCapture_ptsz(CUstream s) { FC_GUARD(fc_begin_capture(s, 1, CU_STREAM_CAPTURE_MODE_GLOBAL)); }

/* 1 if every frontier node of every forked stream is an ancestor of (or in) the origin's frontier. */
static int capture_joined(fc_capture *c) {
  fc_graph *g = c->graph;
  size_t n = g->nnodes;
  if (!n) return 1;
  unsigned char *mark = calloc(n, 1);
  size_t *start = calloc(n + 1, sizeof(size_t)), *in = malloc((g->nedges + 1) * sizeof(size_t));
  size_t *stack = malloc((n + 1) * sizeof(size_t)), sp = 0;
  int ok = 1;
  if (!mark || !start || !in || !stack) {
    ok = 1; /* out of memory: do not fail the capture for it */
    goto out;
  }
  for (size_t i = 0; i < g->nedges; i++) start[g->edges[i].to->index + 1]++;
  for (size_t i = 0; i < n; i++) start[i + 1] += start[i];
  {
    size_t *fill = calloc(n, sizeof(size_t));
    if (!fill) goto out;
    for (size_t i = 0; i < g->nedges; i++) {
      size_t t = g->edges[i].to->index;
      in[start[t] + fill[t]++] = g->edges[i].from->index;
    }
    free(fill);
  }
  if (c->origin)
    for (size_t i = 0; i < c->origin->deps.n; i++) {
      size_t k = c->origin->deps.nodes[i]->index;
      if (!mark[k]) {
        mark[k] = 1;
        stack[sp++] = k;
      }
    }
  while (sp) {
    size_t k = stack[--sp];
    for (size_t j = start[k]; j < start[k + 1]; j++)
      if (!mark[in[j]]) {
        mark[in[j]] = 1;
        stack[sp++] = in[j];
      }
  }
  for (size_t i = 0; i < c->nstreams && ok; i++)
    for (size_t j = 0; j < c->streams[i]->deps.n; j++)
      if (!mark[c->streams[i]->deps.nodes[j]->index]) ok = 0;
out:
  free(mark);
  free(start);
  free(in);
  free(stack);
  return ok;
}

static void capture_finish(fc_capture *c) {
  for (size_t i = 0; i < c->nstreams; i++) {
    c->streams[i]->cap = NULL;
    fc_deps_clear(&c->streams[i]->deps);
  }
  for (fc_capture **pp = &fc_captures; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  free(c->streams);
  free(c);
}

CUresult fc_end_capture(CUstream h, int ptds, CUgraph *pg) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  if (!pg) return CUDA_ERROR_INVALID_VALUE;
  fc_stream *s;
  if ((r = fc_stream_resolve(h, ptds, &s))) return r;
  fc_capture *c = s->cap;
  if (!c) return CUDA_ERROR_ILLEGAL_STATE;
  if (c->origin != s) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  if (c->mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL && c->thread != fc_thread_id())
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  fc_graph *g = c->graph;
  *pg = NULL;
  if (c->status != CU_STREAM_CAPTURE_STATUS_ACTIVE) r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  else if (!capture_joined(c)) r = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
  capture_finish(c);
  if (r) {
    fc_graph_free(g);
    return r;
  }
  g->is_child = 0;
  *pg = (CUgraph)g;
  return CUDA_SUCCESS;
}

FC_API CUresult cuStreamEndCapture(CUstream s, CUgraph *g) { FC_GUARD(fc_end_capture(s, 0, g)); }
FC_API CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g) { FC_GUARD(fc_end_capture(s, 1, g)); }

CUresult fc_is_capturing(CUstream h, int ptds, CUstreamCaptureStatus *st) {
  fc_stream *s;
  if (!st) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = fc_stream_resolve(h, ptds, &s);
  if (r) return r;
  *st = s->cap ? s->cap->status : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

FC_API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st) { FC_GUARD(fc_is_capturing(s, 0, st)); }
FC_API CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *st) { FC_GUARD(fc_is_capturing(s, 1, st)); }

CUresult fc_capture_info(CUstream h, int ptds, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                         const CUgraphNode **deps, const CUgraphEdgeData **edata, size_t *n) {
  fc_stream *s;
  if (!st) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = fc_stream_resolve(h, ptds, &s);
  if (r) return r;
  if (!s->cap) {
    *st = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  }
  *st = s->cap->status;
  if (id) *id = s->cap->id;
  if (g) *g = (CUgraph)s->cap->graph;
  if (deps) *deps = (const CUgraphNode *)s->deps.nodes;
  if (edata) *edata = s->deps.data;
  if (n) *n = s->deps.n;
  return CUDA_SUCCESS;
}

FC_API CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                                          const CUgraphNode **d, const CUgraphEdgeData **e, size_t *n) {
  FC_GUARD(fc_capture_info(s, 0, st, id, g, d, e, n));
}
FC_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                                               const CUgraphNode **d, const CUgraphEdgeData **e, size_t *n) {
  FC_GUARD(fc_capture_info(s, 1, st, id, g, d, e, n));
}
FC_API CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                                          const CUgraphNode **d, size_t *n) {
  FC_GUARD(fc_capture_info(s, 0, st, id, g, d, NULL, n));
}

static CUresult update_deps_impl(CUstream h, CUgraphNode *deps, const CUgraphEdgeData *data, size_t n, unsigned flags) {
  fc_stream *s;
  CUresult r = fc_stream_resolve(h, 0, &s);
  if (r) return r;
  if (!s->cap) return CUDA_ERROR_ILLEGAL_STATE;
  if (flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES && flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES)
    return CUDA_ERROR_INVALID_VALUE;
  if (n && !deps) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; i++)
    if (!fc_is(deps[i], FC_K_NODE) || ((fc_node *)deps[i])->graph != s->cap->graph) return CUDA_ERROR_INVALID_VALUE;
  if (flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES) fc_deps_clear(&s->deps);
  for (size_t i = 0; i < n; i++)
    if (fc_deps_add(&s->deps, (fc_node *)deps[i], data ? &data[i] : NULL)) return CUDA_ERROR_OUT_OF_MEMORY;
  return CUDA_SUCCESS;
}

FC_API CUresult cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode *d, const CUgraphEdgeData *e, size_t n,
                                                     unsigned int flags) {
  FC_GUARD(update_deps_impl(s, d, e, n, flags));
}
FC_API CUresult cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode *d, size_t n, unsigned int flags) {
  FC_GUARD(update_deps_impl(s, d, NULL, n, flags));
}

FC_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  CUstreamCaptureMode m = *mode;
  if (m != CU_STREAM_CAPTURE_MODE_GLOBAL && m != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      m != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  *mode = tls_capture_mode;
  tls_capture_mode = m;
  return CUDA_SUCCESS;
}
