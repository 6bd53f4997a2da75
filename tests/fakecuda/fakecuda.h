/*
 * fakecuda: a fake CUDA driver (libcuda.so.1) for GPU-less CI.
 *
 * It implements the driver entry points Foundry uses with real semantics on host memory: device
 * pointers are plain host addresses, kernels are host functions looked up by name, and all work
 * runs synchronously at submission (or at graph launch). Private header shared by the *.c files.
 *
 * Conventions:
 *   - Every exported entry point takes the global (recursive) lock and returns a CUresult; nothing
 *     aborts. Internal helpers (fc_*) are hidden and assume the lock is held.
 *   - The un-suffixed legacy names (cuMemAlloc with 32-bit sizes, 4-argument cuGetProcAddress, ...)
 *     are declared by cuda.h under __CUDA_API_VERSION_INTERNAL, which this header defines.
 */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif

#include <cuda.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FC_API __attribute__((visibility("default")))

/* ------------------------------------------------------------------ global state (core.c) */
typedef struct fc_globals {
  int initialized;
  int driver_version;
  int device_count;
  char device_name[256];
  int sm_count;
  int cc_major, cc_minor;
  unsigned long long phys_limit;
  unsigned long long total_mem;
  long long small_page_room; /* -1: linear memory counted to the byte; else the model below (memory.c) */
  int edge_data_bug;
  unsigned long long batch_copy_max; /* copies a cuMemcpyBatchAsync_v2 takes at most; 0: any number */
  char no_param_info[1024]; /* comma-separated kernel names */
} fc_globals;
extern fc_globals fc_g;

void fc_lock(void);
void fc_unlock(void);
void fc_read_env(void);
double fc_now_ms(void);
unsigned long fc_thread_id(void);

/* Runs `call` (an expression yielding CUresult) under the lock after checking cuInit. */
#define FC_GUARD(call)                                   \
  do {                                                   \
    if (!fc_g.initialized) return CUDA_ERROR_NOT_INITIALIZED; \
    fc_lock();                                           \
    CUresult r__ = (call);                               \
    fc_unlock();                                         \
    return r__;                                          \
  } while (0)

/* Growable arrays. */
int fc_grow(void **ptr, size_t *cap, size_t need, size_t elem);
#define FC_PUSH(arr, n, cap, val)                                          \
  (fc_grow((void **)&(arr), &(cap), (n) + 1, sizeof(*(arr))) ? ((arr)[(n)++] = (val), 0) : -1)

/* ------------------------------------------------------------------ handle table (core.c) */
enum {
  FC_K_NONE = 0,
  FC_K_CTX,
  FC_K_MODULE,
  FC_K_LIBRARY,
  FC_K_FUNC,
  FC_K_KERNEL,
  FC_K_STREAM,
  FC_K_EVENT,
  FC_K_GRAPH,
  FC_K_NODE,
  FC_K_EXEC,
  FC_K_PHYS,
  FC_K_POOL,
  FC_K_DEAD, /* unloaded module/function/kernel kept allocated so handles never get reused */
};
void fc_handle_add(const void *p, int kind);
void fc_handle_del(const void *p);
int fc_handle_kind(const void *p);
static inline int fc_is(const void *p, int kind) { return p && fc_handle_kind(p) == kind; }

/* ------------------------------------------------------------------ contexts (core.c) */
typedef struct fc_ctx {
  int dev;
  int retained;
  unsigned flags;
} fc_ctx;
fc_ctx *fc_current_ctx(void);
CUresult fc_need_ctx(void);

/* ------------------------------------------------------------------ memory (memory.c, vmm.c) */
enum { FC_MEM_DEVICE = 1, FC_MEM_PITCH, FC_MEM_HOST, FC_MEM_MANAGED, FC_MEM_ASYNC, FC_MEM_GRAPH, FC_MEM_V1, FC_MEM_MODULE };
/* 0 if [p, p+n) is device-accessible memory (allocations and accessible VMM mappings). */
int fc_dev_ok(CUdeviceptr p, size_t n);
/* 0 unless [p, p+n) touches a VMM reservation where it is not mapped with access (would fault). */
int fc_any_ok(const void *p, size_t n);
/* Range of the allocation or VMM mapping holding p; 0 if found. */
int fc_mem_range(CUdeviceptr p, CUdeviceptr *base, size_t *size, int *kind);
/* 0: p is inside a VMM mapping (its range, and whether it is readable/writable);
 * -1: inside a reservation but not mapped; 1: in no reservation (*base = next reservation above p
 * or UINT64_MAX). */
int fc_vmm_range(CUdeviceptr p, CUdeviceptr *base, size_t *size, int *accessible);
CUresult fc_alloc(CUdeviceptr *out, size_t n, int kind, int low32);
CUresult fc_free(CUdeviceptr p, int kind_mask);
unsigned long long fc_mem_used(void);
CUresult fc_copy3d(const CUDA_MEMCPY3D *c);
CUresult fc_memset2d(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem, size_t width, size_t height);

/* ------------------------------------------------------------------ builtin kernels (kernels.c) */
typedef struct fc_launch {
  unsigned grid[3], block[3], smem;
  const unsigned char *args;
  size_t argsize;
  const struct fc_module *mod; /* the launched function's module (its variables) */
} fc_launch;
typedef CUresult (*fc_kernel_fn)(const fc_launch *L);
#define FC_MAX_PARAMS 8
#define FC_BI_CLUSTER2 1u /* needs cluster dimension (2,1,1) */
typedef struct fc_builtin {
  const char *name;
  fc_kernel_fn fn;
  unsigned nparams;
  unsigned off[FC_MAX_PARAMS];
  unsigned size[FC_MAX_PARAMS];
  unsigned flags;
} fc_builtin;
const fc_builtin *fc_builtin_find(const char *name);
size_t fc_builtin_argsize(const fc_builtin *b);

/* ------------------------------------------------------------------ images (images.c) */
enum { FC_IMG_FATBIN = 1, FC_IMG_ELF = 2, FC_IMG_PTX = 3 };
/* A module variable: an STT_OBJECT symbol of .nv.global, .nv.global.init or .nv.constant<N> (N >= 1). */
typedef struct fc_var {
  char *name;
  size_t size;
  unsigned sec;          /* its section (relocations name it) */
  unsigned long long at; /* its offset in that section */
  long long init;        /* offset of its initial bytes in the image data; -1: zeros (.nv.global) */
} fc_var;
/* A 64-bit relocation inside a variable: the address of variable `target` plus `addend`, or, with `target`
 * FC_RELOC_CODE, the address of code: the module's code base plus `addend` (FC_CODE_AT of the function
 * symbol, plus the relocation's own addend), as nvlink writes a table of device function pointers. */
#define FC_RELOC_CODE ((size_t)-1)
/* Where a function symbol's code lies from its module's code base: its section and its offset there. */
#define FC_CODE_AT(shndx, value) (((unsigned long long)(shndx) << 20) + (unsigned long long)(value))
/* Each load's code lies at its own base, FC_CODE_SPAN apart, above every address the fake hands out: the
 * process id picks a range (2^40 apart; so no two processes share one, as no two processes' loads do on a
 * GPU), the load's number the place in it. */
#define FC_CODE_BASE0 0x8000000000000000ull
#define FC_CODE_SPAN 0x100000000ull
typedef struct fc_reloc {
  unsigned sec;
  unsigned long long at;
  size_t target;
  long long addend;
} fc_reloc;
typedef struct fc_image {
  unsigned char *data; /* private copy */
  size_t size;
  int format;
  char **names; /* kernel names, unique, in image order */
  size_t nnames;
  fc_var *vars; /* in symbol-table order */
  size_t nvars;
  fc_reloc *relocs;
  size_t nrelocs;
} fc_image;
/* known_size 0: size unknown (in-memory image, computed from headers). Copies the bytes. */
CUresult fc_image_parse(const void *src, size_t known_size, fc_image *out);
CUresult fc_image_read_file(const char *path, fc_image *out);
void fc_image_free(fc_image *img);

/* ------------------------------------------------------------------ modules (modules.c) */
typedef struct fc_func {
  struct fc_module *mod;
  char *name;
  const fc_builtin *bi;
  struct fc_kernel *kernel; /* for functions of a library's module */
  int attr[CU_FUNC_ATTRIBUTE_MAX];
  int loaded;
} fc_func;
typedef struct fc_module {
  struct fc_library *lib; /* owning library, if any */
  fc_image img;
  fc_func **funcs;
  size_t nfuncs;
  int loaded;
  CUdeviceptr vars_base;  /* one FC_MEM_MODULE allocation holding every variable (0: none) */
  CUdeviceptr *var_addr;  /* per img.vars entry */
  unsigned long long code_base; /* where this load's code lies (each load its own: FC_CODE_BASE0 ...) */
} fc_module;
typedef struct fc_library {
  fc_module *mod;
  struct fc_kernel **kernels;
  size_t nkernels;
  int loaded;
} fc_library;
typedef struct fc_kernel {
  fc_library *lib;
  fc_func *func;
} fc_kernel;
/* Resolves a CUfunction or a CUkernel passed as CUfunction (both are accepted by launches). */
fc_func *fc_func_resolve(const void *h);
/* 0 or CUDA_ERROR_NOT_SUPPORTED (FAKECUDA_NO_PARAM_INFO) / INVALID_VALUE (index out of range). */
CUresult fc_param_info(const fc_func *f, size_t index, size_t *off, size_t *size);

/* ------------------------------------------------------------------ graphs (graph.c) */
typedef struct fc_kparams {
  fc_func *func;
  unsigned grid[3], block[3], smem;
  int mode; /* 0: kernelParams, 1: extra buffer */
  unsigned char *argbuf;
  size_t argsize;
  void **paramptrs; /* mode 0: pointers into argbuf, one per parameter */
  size_t nparams;
  void *extra[5]; /* mode 1: {BUFFER_POINTER, argbuf, BUFFER_SIZE, &extra_size, END} */
  size_t extra_size;
  CUlaunchAttribute *attrs;
  size_t nattrs;
  int pss; /* launched with PROGRAMMATIC_STREAM_SERIALIZATION (submission only, not copied) */
} fc_kparams;

typedef struct fc_node {
  struct fc_graph *graph;
  CUgraphNodeType type;
  size_t index;         /* creation order within its graph */
  struct fc_node *orig; /* in clones and exec snapshots: the node this was copied from */
  CUcontext ctx;
  fc_kparams k;
  CUDA_MEMCPY3D copy;
  CUDA_MEMSET_NODE_PARAMS memset;
  CUDA_HOST_NODE_PARAMS host;
  struct fc_graph *child;
  int child_borrowed; /* detached graph-launch work: child is the exec's graph, not owned */
  CUevent event;
  CUDA_MEM_ALLOC_NODE_PARAMS alloc;
  CUdeviceptr free_ptr;
  int disabled; /* exec nodes only: cuGraphNodeSetEnabled(exec, node, 0) */
} fc_node;

typedef struct fc_edge {
  fc_node *from, *to;
  CUgraphEdgeData data;
} fc_edge;

typedef struct fc_graph {
  fc_node **nodes;
  size_t nnodes, capnodes;
  fc_edge *edges;
  size_t nedges, capedges;
  int is_child; /* owned by a child-graph node or an exec */
} fc_graph;

typedef struct fc_exec {
  fc_graph *g; /* snapshot; its nodes' orig point at the source graph's nodes */
  unsigned long long flags;
  unsigned uploads, launches; /* cuGraphUpload calls and launches (fakecuda_exec_counts) */
} fc_exec;

static inline fc_graph *fc_graph_get(CUgraph h) { return fc_is(h, FC_K_GRAPH) ? (fc_graph *)h : NULL; }
static inline fc_node *fc_node_get(CUgraphNode h) { return fc_is(h, FC_K_NODE) ? (fc_node *)h : NULL; }
/* Valid edge annotation for from -> to (NULL: the default edge). */
int fc_edge_data_ok(const fc_node *from, const fc_node *to, const CUgraphEdgeData *d);
fc_graph *fc_graph_new(void);
void fc_graph_free(fc_graph *g);
/* Deep copy. Each copied node's orig = the source node (or source->orig if keep_orig). */
fc_graph *fc_graph_clone(const fc_graph *g, int keep_orig);
fc_node *fc_node_new(CUgraphNodeType type);
void fc_node_free(fc_node *n);
CUresult fc_node_copy_params(fc_node *dst, const fc_node *src);
/* Appends n (taking ownership on success) with edges from deps. */
CUresult fc_graph_insert(fc_graph *g, fc_node *n, fc_node *const *deps, const CUgraphEdgeData *data,
                         size_t ndeps);
CUresult fc_graph_run(fc_graph *g);
CUresult fc_graph_validate(fc_graph *g);
CUresult fc_node_run(fc_node *n);

/* kernel parameter handling (launch.c) */
CUresult fc_kparams_set(fc_kparams *k, fc_func *f, const unsigned grid[3], const unsigned block[3],
                        unsigned smem, void **kernelParams, void **extra);
CUresult fc_kparams_copy(fc_kparams *dst, const fc_kparams *src);
void fc_kparams_clear(fc_kparams *k);
CUresult fc_kparams_set_attr(fc_kparams *k, const CUlaunchAttribute *a);
const CUlaunchAttribute *fc_kparams_get_attr(const fc_kparams *k, CUlaunchAttributeID id);
CUresult fc_kparams_validate(const fc_kparams *k);
CUresult fc_check_smem(const fc_func *f, unsigned smem);
CUresult fc_kparams_run(const fc_kparams *k);

/* ------------------------------------------------------------------ streams & capture (stream.c) */
typedef struct fc_deps {
  fc_node **nodes;
  CUgraphEdgeData *data;
  size_t n, cap;
} fc_deps;
void fc_deps_clear(fc_deps *d);
int fc_deps_add(fc_deps *d, fc_node *n, const CUgraphEdgeData *data);
int fc_deps_copy(fc_deps *dst, const fc_deps *src);

typedef struct fc_capture fc_capture;
typedef struct fc_stream {
  unsigned flags;
  int priority;
  unsigned long long id;
  fc_capture *cap;
  fc_deps deps;
} fc_stream;

struct fc_capture {
  unsigned long long id;
  fc_graph *graph;
  CUstreamCaptureMode mode;
  CUstreamCaptureStatus status;
  fc_stream *origin;
  fc_stream **streams;
  size_t nstreams, capstreams;
  unsigned long thread;
  fc_capture *next;
};

typedef struct fc_event {
  unsigned flags;
  int recorded;
  double t_ms;
  unsigned long long cap_id; /* recorded inside this capture (0: not) */
  fc_deps deps;
} fc_event;

extern fc_capture *fc_captures;
fc_capture *fc_capture_by_id(unsigned long long id);
int fc_stream_is_legacy(const fc_stream *s);
CUresult fc_stream_resolve(CUstream h, int ptds, fc_stream **out);
/* Submits work (a detached node; ownership taken) to a stream: executes it now, or appends it to
 * the stream's capture graph. */
CUresult fc_submit(CUstream h, int ptds, fc_node *work);
/* For calls that are illegal while a capture is in progress in this thread (cuMemAlloc, ...):
 * invalidates the offending captures and returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED. */
CUresult fc_capture_unsafe_call(void);
void fc_event_complete(fc_event *e);

/* ------------------------------------------------------------------ launch API impls (launch.c) */
CUresult fc_launch_kernel(CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned smem,
                          CUstream s, int ptds, void **params, void **extra, const CUlaunchAttribute *attrs,
                          unsigned nattrs);
CUresult fc_launch_host(CUstream s, int ptds, CUhostFn fn, void *user);
/* memory.c stream-ordered helpers */
CUresult fc_memcpy_submit(CUstream s, int ptds, void *dst, CUmemorytype dt, const void *src, CUmemorytype st,
                          size_t n);
CUresult fc_memset_submit(CUstream s, int ptds, CUdeviceptr dst, unsigned value, unsigned elem, size_t n);
CUresult fc_alloc_async(CUdeviceptr *dptr, size_t n, CUstream s, int ptds);
CUresult fc_free_async(CUdeviceptr p, CUstream s, int ptds);
/* stream.c */
CUresult fc_event_record(CUevent e, CUstream s, int ptds, unsigned flags);
CUresult fc_stream_wait_event(CUstream s, int ptds, CUevent e, unsigned flags);
CUresult fc_stream_sync(CUstream s, int ptds);
CUresult fc_stream_query(CUstream s, int ptds);
CUresult fc_begin_capture(CUstream s, int ptds, CUstreamCaptureMode mode);
CUresult fc_end_capture(CUstream s, int ptds, CUgraph *g);
CUresult fc_is_capturing(CUstream s, int ptds, CUstreamCaptureStatus *st);
CUresult fc_capture_info(CUstream s, int ptds, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                         const CUgraphNode **deps, const CUgraphEdgeData **edata, size_t *n);
/* exec.c */
CUresult fc_graph_launch(CUgraphExec e, CUstream s, int ptds);
CUresult fc_graph_upload(CUgraphExec e, CUstream s, int ptds);

/* ------------------------------------------------------------------ cuGetProcAddress (procaddr.c) */
CUresult fc_get_proc(const char *symbol, void **pfn, int version, cuuint64_t flags,
                     CUdriverProcAddressQueryResult *status);

#endif
