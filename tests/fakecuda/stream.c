/* fakecuda: streams, events, and submission of work (run now, or append to a capture graph).
 *
 * Work outside capture runs synchronously at submission. A capturing stream has a frontier (the
 * nodes its next work depends on, with edge data); submitted work becomes a node depending on it.
 * Events recorded in a capture carry the recording stream's frontier, which is how other streams
 * fork into the capture (cuStreamWaitEvent) and join back. */
#include "fakecuda.h"

static fc_stream legacy_stream;
static __thread fc_stream tls_ptds_stream;
static unsigned long long next_stream_id = 16;

int fc_stream_is_legacy(const fc_stream *s) { return s == &legacy_stream; }

/* ------------------------------------------------------------------ dependency sets */
void fc_deps_clear(fc_deps *d) { d->n = 0; }

int fc_deps_add(fc_deps *d, fc_node *n, const CUgraphEdgeData *data) {
  for (size_t i = 0; i < d->n; i++)
    if (d->nodes[i] == n) return 0;
  size_t cap = d->cap;
  if (!fc_grow((void **)&d->nodes, &cap, d->n + 1, sizeof(*d->nodes))) return -1;
  size_t cap2 = d->cap;
  if (!fc_grow((void **)&d->data, &cap2, d->n + 1, sizeof(*d->data))) return -1;
  d->cap = cap < cap2 ? cap : cap2;
  d->nodes[d->n] = n;
  if (data) d->data[d->n] = *data;
  else memset(&d->data[d->n], 0, sizeof(*d->data));
  d->n++;
  return 0;
}

int fc_deps_copy(fc_deps *dst, const fc_deps *src) {
  fc_deps_clear(dst);
  for (size_t i = 0; i < src->n; i++)
    if (fc_deps_add(dst, src->nodes[i], &src->data[i])) return -1;
  return 0;
}

static void deps_free(fc_deps *d) {
  free(d->nodes);
  free(d->data);
  memset(d, 0, sizeof(*d));
}

/* ------------------------------------------------------------------ streams */
CUresult fc_stream_resolve(CUstream h, int ptds, fc_stream **out) {
  if (h == NULL) {
    *out = ptds ? &tls_ptds_stream : &legacy_stream;
  } else if (h == CU_STREAM_LEGACY) {
    *out = &legacy_stream;
  } else if (h == CU_STREAM_PER_THREAD) {
    *out = &tls_ptds_stream;
  } else if (fc_is(h, FC_K_STREAM)) {
    *out = (fc_stream *)h;
  } else {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return CUDA_SUCCESS;
}

/* Work on the legacy stream waits for every blocking stream; if one of them is capturing, that
 * capture is invalidated (real driver: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT). */
static CUresult legacy_implicit_check(fc_stream *s) {
  if (s != &legacy_stream) return CUDA_SUCCESS;
  CUresult r = CUDA_SUCCESS;
  for (fc_capture *c = fc_captures; c; c = c->next) {
    if (c->status != CU_STREAM_CAPTURE_STATUS_ACTIVE) continue;
    for (size_t i = 0; i < c->nstreams; i++) {
      if (!(c->streams[i]->flags & CU_STREAM_NON_BLOCKING)) {
        c->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        break;
      }
    }
  }
  return r;
}

CUresult fc_submit(CUstream h, int ptds, fc_node *work) {
  fc_stream *s;
  CUresult r = fc_stream_resolve(h, ptds, &s);
  if (r) {
    fc_node_free(work);
    return r;
  }
  if (s->cap) {
    fc_capture *c = s->cap;
    if (c->status != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
      fc_node_free(work);
      return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    size_t n = s->deps.n;
    CUgraphEdgeData *data = n ? malloc(n * sizeof(*data)) : NULL;
    if (n && !data) {
      fc_node_free(work);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (n) memcpy(data, s->deps.data, n * sizeof(*data));
    if (work->type == CU_GRAPH_NODE_TYPE_KERNEL && work->k.pss) {
      for (size_t i = 0; i < n; i++) {
        if (s->deps.nodes[i]->type != CU_GRAPH_NODE_TYPE_KERNEL || data[i].type || data[i].from_port) continue;
        data[i].from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
        data[i].to_port = 0;
        data[i].type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
      }
    }
    r = fc_graph_insert(c->graph, work, s->deps.nodes, data, n);
    free(data);
    if (r) {
      fc_node_free(work);
      return r;
    }
    fc_deps_clear(&s->deps);
    fc_deps_add(&s->deps, work, NULL);
    return CUDA_SUCCESS;
  }
  if ((r = legacy_implicit_check(s))) {
    fc_node_free(work);
    return r;
  }
  r = fc_node_run(work);
  fc_node_free(work);
  return r;
}

static CUresult stream_create_impl(CUstream *ph, unsigned flags, int prio) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  fc_stream *s = calloc(1, sizeof(*s));
  if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
  s->flags = flags;
  s->priority = prio > 0 ? 0 : prio < -5 ? -5 : prio;
  s->id = next_stream_id++;
  fc_handle_add(s, FC_K_STREAM);
  *ph = (CUstream)s;
  return CUDA_SUCCESS;
}

FC_API CUresult cuStreamCreate(CUstream *ph, unsigned int flags) { FC_GUARD(stream_create_impl(ph, flags, 0)); }
FC_API CUresult cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int prio) {
  FC_GUARD(stream_create_impl(ph, flags, prio));
}

static void capture_remove_stream(fc_capture *c, fc_stream *s) {
  for (size_t i = 0; i < c->nstreams; i++) {
    if (c->streams[i] == s) {
      c->streams[i] = c->streams[--c->nstreams];
      break;
    }
  }
}

static CUresult stream_destroy_impl(CUstream h) {
  if (!fc_is(h, FC_K_STREAM)) return CUDA_ERROR_INVALID_HANDLE;
  fc_stream *s = (fc_stream *)h;
  if (s->cap) {
    s->cap->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    if (s->cap->origin == s) s->cap->origin = NULL;
    capture_remove_stream(s->cap, s);
  }
  deps_free(&s->deps);
  fc_handle_del(s);
  free(s);
  return CUDA_SUCCESS;
}

FC_API CUresult cuStreamDestroy_v2(CUstream h) { FC_GUARD(stream_destroy_impl(h)); }
FC_API CUresult cuStreamDestroy(CUstream h) { FC_GUARD(stream_destroy_impl(h)); }

static CUresult stream_get_impl(CUstream h, unsigned *flags, int *prio, unsigned long long *id, CUcontext *ctx) {
  fc_stream *s;
  CUresult r = fc_stream_resolve(h, 0, &s);
  if (r) return r;
  if (flags) *flags = s->flags;
  if (prio) *prio = s->priority;
  if (id) *id = s == &legacy_stream ? 1 : s == &tls_ptds_stream ? 2 : s->id;
  if (ctx) *ctx = (CUcontext)fc_current_ctx();
  return CUDA_SUCCESS;
}

FC_API CUresult cuStreamGetFlags(CUstream h, unsigned int *f) { FC_GUARD(f ? stream_get_impl(h, f, 0, 0, 0) : CUDA_ERROR_INVALID_VALUE); }
FC_API CUresult cuStreamGetPriority(CUstream h, int *p) { FC_GUARD(p ? stream_get_impl(h, 0, p, 0, 0) : CUDA_ERROR_INVALID_VALUE); }
FC_API CUresult cuStreamGetId(CUstream h, unsigned long long *id) { FC_GUARD(id ? stream_get_impl(h, 0, 0, id, 0) : CUDA_ERROR_INVALID_VALUE); }
FC_API CUresult cuStreamGetCtx(CUstream h, CUcontext *c) { FC_GUARD(c ? stream_get_impl(h, 0, 0, 0, c) : CUDA_ERROR_INVALID_VALUE); }

CUresult fc_stream_sync(CUstream h, int ptds) {
  fc_stream *s;
  CUresult r = fc_stream_resolve(h, ptds, &s);
  if (r) return r;
  if (s->cap) {
    s->cap->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return legacy_implicit_check(s);
}

CUresult fc_stream_query(CUstream h, int ptds) { return fc_stream_sync(h, ptds); }

FC_API CUresult cuStreamSynchronize(CUstream h) { FC_GUARD(fc_stream_sync(h, 0)); }
FC_API CUresult cuStreamSynchronize_ptsz(CUstream h) { FC_GUARD(fc_stream_sync(h, 1)); }
FC_API CUresult cuStreamQuery(CUstream h) { FC_GUARD(fc_stream_query(h, 0)); }
FC_API CUresult cuStreamQuery_ptsz(CUstream h) { FC_GUARD(fc_stream_query(h, 1)); }

static CUresult add_callback_impl(CUstream h, CUstreamCallback cb, void *user, unsigned flags) {
  fc_stream *s;
  if (!cb || flags) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = fc_stream_resolve(h, 0, &s);
  if (r) return r;
  if (s->cap) {
    s->cap->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if ((r = legacy_implicit_check(s))) return r;
  cb(h, CUDA_SUCCESS, user);
  return CUDA_SUCCESS;
}

FC_API CUresult cuStreamAddCallback(CUstream h, CUstreamCallback cb, void *user, unsigned int flags) {
  FC_GUARD(add_callback_impl(h, cb, user, flags));
}

/* ------------------------------------------------------------------ events */
static fc_event *ev_get(CUevent h) { return fc_is(h, FC_K_EVENT) ? (fc_event *)h : NULL; }

static CUresult event_create_impl(CUevent *ph, unsigned flags) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  unsigned all = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (!ph || (flags & ~all)) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
  fc_event *e = calloc(1, sizeof(*e));
  if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
  e->flags = flags;
  fc_handle_add(e, FC_K_EVENT);
  *ph = (CUevent)e;
  return CUDA_SUCCESS;
}

FC_API CUresult cuEventCreate(CUevent *ph, unsigned int flags) { FC_GUARD(event_create_impl(ph, flags)); }

static CUresult event_destroy_impl(CUevent h) {
  fc_event *e = ev_get(h);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  deps_free(&e->deps);
  fc_handle_del(e);
  free(e);
  return CUDA_SUCCESS;
}

FC_API CUresult cuEventDestroy_v2(CUevent h) { FC_GUARD(event_destroy_impl(h)); }
FC_API CUresult cuEventDestroy(CUevent h) { FC_GUARD(event_destroy_impl(h)); }

void fc_event_complete(fc_event *e) {
  e->recorded = 1;
  e->t_ms = fc_now_ms();
  e->cap_id = 0;
  fc_deps_clear(&e->deps);
}

CUresult fc_event_record(CUevent h, CUstream sh, int ptds, unsigned flags) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  fc_event *e = ev_get(h);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  fc_stream *s;
  if ((r = fc_stream_resolve(sh, ptds, &s))) return r;
  if (s->cap) {
    if (s->cap->status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (flags & CU_EVENT_RECORD_EXTERNAL) {
      fc_node *w = fc_node_new(CU_GRAPH_NODE_TYPE_EVENT_RECORD);
      if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
      w->event = h;
      return fc_submit(sh, ptds, w);
    }
    if (fc_deps_copy(&e->deps, &s->deps)) return CUDA_ERROR_OUT_OF_MEMORY;
    e->cap_id = s->cap->id;
    return CUDA_SUCCESS;
  }
  if ((r = legacy_implicit_check(s))) return r;
  fc_event_complete(e);
  return CUDA_SUCCESS;
}

FC_API CUresult cuEventRecord(CUevent e, CUstream s) { FC_GUARD(fc_event_record(e, s, 0, 0)); }
FC_API CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { FC_GUARD(fc_event_record(e, s, 1, 0)); }
FC_API CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int f) { FC_GUARD(fc_event_record(e, s, 0, f)); }
FC_API CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int f) { FC_GUARD(fc_event_record(e, s, 1, f)); }

CUresult fc_stream_wait_event(CUstream sh, int ptds, CUevent h, unsigned flags) {
  CUresult r = fc_need_ctx();
  if (r) return r;
  fc_event *e = ev_get(h);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  fc_stream *s;
  if ((r = fc_stream_resolve(sh, ptds, &s))) return r;
  if (flags & CU_EVENT_WAIT_EXTERNAL) {
    if (!s->cap) return CUDA_SUCCESS;
    fc_node *w = fc_node_new(CU_GRAPH_NODE_TYPE_WAIT_EVENT);
    if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
    w->event = h;
    return fc_submit(sh, ptds, w);
  }
  fc_capture *c = e->cap_id ? fc_capture_by_id(e->cap_id) : NULL;
  if (!c) {
    if (s->cap && s->cap->status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return CUDA_SUCCESS; /* completed (or never recorded) work: nothing to wait for */
  }
  if (c->status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (!s->cap) { /* fork: the stream joins the capture */
    if (s == &legacy_stream) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    if (!fc_grow((void **)&c->streams, &c->capstreams, c->nstreams + 1, sizeof(*c->streams)))
      return CUDA_ERROR_OUT_OF_MEMORY;
    if (fc_deps_copy(&s->deps, &e->deps)) return CUDA_ERROR_OUT_OF_MEMORY;
    c->streams[c->nstreams++] = s;
    s->cap = c;
    return CUDA_SUCCESS;
  }
  if (s->cap != c) return CUDA_ERROR_STREAM_CAPTURE_MERGE;
  for (size_t i = 0; i < e->deps.n; i++)
    if (fc_deps_add(&s->deps, e->deps.nodes[i], &e->deps.data[i])) return CUDA_ERROR_OUT_OF_MEMORY;
  return CUDA_SUCCESS;
}

FC_API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int f) { FC_GUARD(fc_stream_wait_event(s, 0, e, f)); }
FC_API CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int f) { FC_GUARD(fc_stream_wait_event(s, 1, e, f)); }

static CUresult event_wait_impl(CUevent h) {
  fc_event *e = ev_get(h);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (e->cap_id && fc_capture_by_id(e->cap_id)) return CUDA_ERROR_CAPTURED_EVENT;
  return CUDA_SUCCESS;
}

FC_API CUresult cuEventSynchronize(CUevent h) { FC_GUARD(event_wait_impl(h)); }
FC_API CUresult cuEventQuery(CUevent h) { FC_GUARD(event_wait_impl(h)); }

static CUresult elapsed_impl(float *ms, CUevent a, CUevent b) {
  fc_event *s = ev_get(a), *e = ev_get(b);
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  if (!s || !e || (s->flags & CU_EVENT_DISABLE_TIMING) || (e->flags & CU_EVENT_DISABLE_TIMING))
    return CUDA_ERROR_INVALID_HANDLE;
  if ((s->cap_id && fc_capture_by_id(s->cap_id)) || (e->cap_id && fc_capture_by_id(e->cap_id)))
    return CUDA_ERROR_CAPTURED_EVENT;
  if (!s->recorded || !e->recorded) return CUDA_ERROR_INVALID_HANDLE;
  *ms = (float)(e->t_ms - s->t_ms);
  return CUDA_SUCCESS;
}

FC_API CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) { FC_GUARD(elapsed_impl(ms, a, b)); }
FC_API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) { FC_GUARD(elapsed_impl(ms, a, b)); }
