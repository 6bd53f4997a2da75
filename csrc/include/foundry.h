/*
 * libfoundry: the C ABI that Python drives through ctypes.
 *
 * One shared library plays two roles. Under LD_PRELOAD it interposes the CUDA driver (dlsym and
 * cuGetProcAddress) and routes allocations and image loads through the region and the registry.
 * Loaded by Python it is the control surface for those same objects, and it holds the few hot loops
 * of SAVE and LOAD (graph extraction and graph building).
 *
 * Contract for every function here:
 *   - Returns 0 on success, or a CUresult / FDY_ERR_* code. Never aborts the process.
 *   - On failure a message naming the call, its arguments and a next step is stored for the calling
 *     thread (fdy_last_error) and in the process-wide error log (fdy_error_log_read).
 *   - Handles (CUgraph, CUfunction, ...) travel as uint64_t so that ctypes needs no CUDA types.
 */
#ifndef FOUNDRY_H
#define FOUNDRY_H

#include <stddef.h>
#include <stdint.h>

#include "format.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FDY_EXPORT __attribute__((visibility("default")))

#define FDY_ABI_VERSION 16

#define FDY_OK 0
/* Foundry's own error codes live above the CUresult range. */
enum fdy_error_code {
  FDY_ERR_NO_DRIVER = 10001,       /* libcuda.so.1 could not be loaded or lacks an entry point */
  FDY_ERR_REGION_STATE = 10002,    /* region call out of order (not set, already set, ...) */
  FDY_ERR_BASE_TAKEN = 10003,      /* the driver placed the reservation elsewhere */
  FDY_ERR_REGION_FULL = 10004,     /* an allocation would escape the region */
  FDY_ERR_UNSUPPORTED = 10005,     /* an operation Foundry cannot place or persist */
  FDY_ERR_INVALID = 10006,         /* bad argument */
  FDY_ERR_NOT_FOUND = 10007,       /* handle/name not known to the registry */
  FDY_ERR_CORRUPT = 10008,         /* malformed graph record */
  FDY_ERR_NO_PARAM_INFO = 10009,   /* kernel parameters cannot be introspected */
  FDY_ERR_TRUNCATED = 10010,       /* output buffer too small; the needed size is reported */
  FDY_ERR_PARAM_MISMATCH = 10011,  /* a kernel node's parameters are not those its kernel takes */
};

/* ---------------------------------------------------------------- library & errors */
FDY_EXPORT int fdy_abi_version(void);
/* 1 when this copy of the library interposes dlsym for the whole process (it was preloaded). */
FDY_EXPORT int fdy_interposer_active(void);
/* Message of the last failure on the calling thread ("" if none). Valid until the next call. */
FDY_EXPORT const char *fdy_last_error(void);
/* Process-wide error log: every failure from any thread, numbered from 1. Copies the newest
 * message with a sequence number > after into buf; returns that sequence number, or 0 if none. */
FDY_EXPORT uint64_t fdy_error_log_read(uint64_t after, char *buf, size_t cap);
/* Loads the real driver (idempotent). */
FDY_EXPORT int fdy_driver_open(void);
/* Raw access to a real driver entry point by name (for Python's few direct driver calls). */
FDY_EXPORT void *fdy_driver_symbol(const char *name);

/* What Python takes from cuda.h itself, named here (as format.h's lists are) and generated into
 * foundry/native/_abi.py: the driver entry points it calls through fdy_driver_symbol (their signatures
 * read from cuda.h's prototypes: DRIVER_SIGNATURES), and the driver values it passes or compares. */
#define FDY_PYTHON_DRIVER_CALLS(X)                                                                               \
  X(cuInit) X(cuDeviceGet) X(cuCtxGetDevice) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDriverGetVersion)    \
  X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuGetErrorName) X(cuMemcpyDtoH_v2)                \
  X(cuMemcpyHtoD_v2) X(cuGraphUpload) X(cuGraphExecUpdate_v2) X(cuLibraryLoadData) X(cuLibraryUnload)           \
  X(cuLibraryGetGlobal) X(cuLibraryGetManaged) X(cuModuleGetGlobal_v2) X(cuModuleLoadData) X(cuModuleGetFunction)   \
  X(cuDeviceGetPCIBusId) X(cuDeviceGetUuid_v2)
#define FDY_CUDA_RESULTS(X) X(CUDA_, SUCCESS) X(CUDA_, ERROR_NOT_FOUND)
#define FDY_DEVICE_ATTRS(X)                                                                                        \
  X(CU_DEVICE_ATTRIBUTE_, MULTIPROCESSOR_COUNT) X(CU_DEVICE_ATTRIBUTE_, COMPUTE_CAPABILITY_MAJOR)               \
  X(CU_DEVICE_ATTRIBUTE_, COMPUTE_CAPABILITY_MINOR)
/* PyTorch instantiates with USE_NODE_PRIORITY, and kernel nodes keep their priority launch attribute, so
 * loaded graphs are instantiated the same way. DEVICE_LAUNCH: only the benchmark's probes use it. */
#define FDY_INSTANTIATE_FLAGS(X)                                                                                   \
  X(CUDA_GRAPH_INSTANTIATE_FLAG_, USE_NODE_PRIORITY) X(CUDA_GRAPH_INSTANTIATE_FLAG_, DEVICE_LAUNCH)

/* ---------------------------------------------------------------- device reads (copies.c) */
/* How fdy_device_read read the spans that fit its pinned staging buffer: one cuMemcpyBatchAsync_v2 per
 * chunk, or one cuMemcpyDtoHAsync_v2 per span (both on the library's own stream of the current context),
 * or one synchronous cuMemcpyDtoH_v2 per span (the driver has neither, or they failed). */
enum fdy_read_path { FDY_READ_NONE = 0, FDY_READ_BATCH = 1, FDY_READ_ASYNC = 2, FDY_READ_SYNC = 3 };

typedef struct {
  uint64_t failed;  /* index of the span whose copy the driver refused; the span count when none was */
  uint64_t calls;   /* driver calls made (copies, waits, synchronizations, set-up) */
  uint32_t path;    /* FDY_READ_*: the slowest way any span was read */
  int32_t cause;    /* the CUresult (or FDY_ERR_*) that sent spans to a slower way; 0 when none did */
} fdy_read_report;

/* Reads count spans of device memory into dst (dst_size bytes). Span i is spans[3i], spans[3i + 1],
 * spans[3i + 2]: device address, size, offset into dst (offset + size <= dst_size). The bytes read are
 * those of one cuMemcpyDtoH_v2 per span issued in order on this thread, and the call returns once all of
 * them are in dst (copies.c says how). A span the driver refuses to copy fails the call with its CUresult
 * and report->failed names it; the other spans' bytes in dst are then undefined. */
FDY_EXPORT int fdy_device_read(const uint64_t *spans, size_t count, void *dst, size_t dst_size,
                               fdy_read_report *report);

/* ---------------------------------------------------------------- allocation region */
typedef struct {
  uint64_t base, size;        /* reserved VA range */
  uint64_t cursor;            /* next allocation offset */
  uint64_t high_water;        /* max end offset ever handed out */
  uint64_t granularity;       /* physical mapping granularity of the device */
  uint64_t mapped_bytes;      /* physically mapped right now */
  uint64_t prealloc_offset, prealloc_size;
  int32_t device;             /* device ordinal the region belongs to */
  int32_t active;             /* allocations are being placed in the region */
  int32_t reserved;           /* a region exists (active or stopped) */
  uint32_t small_align;       /* allocations smaller than a granule share granules, each at a multiple of this */
} fdy_region_info;

/* Allocations smaller than the granularity are placed together in shared granules, each at a multiple of
 * this many bytes, as the driver's own cuMemAlloc packs them (a process would otherwise map a 2 MiB granule
 * for each 4 KiB allocation, and an engine that sizes its caches from free memory would size them
 * differently under Foundry). */
#define FDY_REGION_SMALL_ALIGN 512

enum fdy_alloc_kind {
  FDY_EV_ALLOC = 1,        /* cuMemAlloc / cuMemAllocPitch */
  FDY_EV_FREE = 2,
  FDY_EV_ASYNC_ALLOC = 3,  /* stream-ordered allocation served from the region */
  FDY_EV_ASYNC_FREE = 4,
  FDY_EV_VMM_RESERVE = 5,  /* application's own cuMemAddressReserve carved from the region */
  FDY_EV_VMM_FREE = 6,
  FDY_EV_VMM_MAP = 7,      /* application's cuMemMap inside the region */
  FDY_EV_VMM_UNMAP = 8,
  FDY_EV_PREALLOC = 9,
  FDY_EV_PREALLOC_FREE = 10,
  FDY_EV_RESTORE = 11,     /* LOAD mapped a range it did not allocate itself */
  FDY_EV_CURSOR = 12,      /* cursor moved by set_current_alloc_offset */
  FDY_EV_REFUSED = 13,     /* an allocation the region refused (escape, capture, managed) */
};

typedef struct {
  uint64_t seq;      /* 1-based, in call order */
  uint64_t offset;   /* from the region base */
  uint64_t size;     /* bytes the caller asked for */
  uint64_t span;     /* bytes the region set aside (granularity-rounded; FDY_REGION_SMALL_ALIGN-rounded when packed) */
  uint32_t kind;     /* FDY_EV_* */
  uint32_t tid;      /* Linux thread id of the caller */
} fdy_alloc_event;

/* How much memory of other processes is open in this one (IPC mappings, imported allocations and
 * their mappings, not yet closed, released or unmapped); 0 when none. */
FDY_EXPORT uint64_t fdy_imports_live(void);

/* Memory of other processes open in this one, by kind (csrc/imports.c). */
typedef struct {
  uint64_t ipc_open;   /* cuIpcOpenMemHandle mappings not closed */
  uint64_t mappings;   /* cuMemMap mappings of imported handles not unmapped */
  uint64_t handles;    /* cuMemImportFromShareableHandle imports not released */
  uint64_t untracked;  /* 1 once an import could not be recorded (SAVE refuses for the process's life) */
} fdy_imports_summary;

/* One live mapping of an allocation imported from a shareable handle. */
typedef struct {
  uint64_t address;      /* where it is mapped */
  uint64_t size;         /* bytes mapped */
  uint32_t handle_type;  /* the CUmemAllocationHandleType it was imported with */
  int32_t device;        /* the device holding the memory (cuMemGetAllocationPropertiesFromHandle), -1 unknown */
  uint32_t in_region;    /* 1: inside one reservation carved from the region (its address is reproducible) */
  uint32_t pad;
} fdy_import_mapping;

FDY_EXPORT int fdy_imports_summary_get(fdy_imports_summary *out);
/* Copies up to cap live mappings into out; returns how many there are. */
FDY_EXPORT size_t fdy_imports_mappings(fdy_import_mapping *out, size_t cap);
FDY_EXPORT int fdy_region_set(uint64_t base, uint64_t size);
/* Reserves the range ahead of fdy_region_set (which adopts it), before anything else can take it. */
FDY_EXPORT int fdy_region_hold(uint64_t base, uint64_t size);
FDY_EXPORT int fdy_region_stop(void);
FDY_EXPORT int fdy_region_resume(void);
/* Unmaps everything the region mapped and frees the reservation. */
FDY_EXPORT int fdy_region_release(void);
FDY_EXPORT int fdy_region_info_get(fdy_region_info *out);
FDY_EXPORT int fdy_region_set_cursor(uint64_t offset);
FDY_EXPORT int fdy_region_preallocate(uint64_t size);
/* The bytes of small allocations the driver's own cuMemAlloc would place now without taking device memory (the
 * room left in the page it packs them into), measured on the calling thread's device with allocations of
 * 4 KiB outside the region, all freed again; at most a granule. */
FDY_EXPORT int fdy_region_driver_room(uint64_t *room);
/* Opens, at the cursor, the granule the region's next small allocations share, with only its last `room`
 * bytes (rounded down to FDY_REGION_SMALL_ALIGN, at most a granule) left for them; room 0 opens nothing. */
FDY_EXPORT int fdy_region_open_pack(uint64_t room);
FDY_EXPORT int fdy_region_free_preallocated(void);
/* Maps every part of [offset, offset+size) that is not mapped yet (LOAD's restore of SAVE's live
 * memory). Granularity-aligned. Moves nothing else. */
FDY_EXPORT int fdy_region_map_range(uint64_t offset, uint64_t size);
/* Copies up to cap events starting at index first; returns the total number of events. */
FDY_EXPORT size_t fdy_region_events(size_t first, fdy_alloc_event *out, size_t cap);

/* ---------------------------------------------------------------- kernel-image registry */
enum fdy_image_kind { FDY_IMG_MODULE = 1, FDY_IMG_LIBRARY = 2 };
enum fdy_image_format {
  FDY_IMG_FORMAT_UNKNOWN = 0,
  FDY_IMG_FORMAT_FATBIN = 1,
  FDY_IMG_FORMAT_ELF = 2,
  FDY_IMG_FORMAT_PTX = 3,
};

typedef struct {
  uint64_t handle;        /* CUmodule or CUlibrary */
  uint64_t data;          /* address of the image bytes */
  uint64_t size;          /* image size in bytes */
  uint32_t kind;          /* FDY_IMG_MODULE / FDY_IMG_LIBRARY */
  uint32_t format;        /* FDY_IMG_FORMAT_* */
  uint32_t owned;         /* 1: a private copy (JIT buffers, files); 0: points into a loaded object */
  uint32_t loaded;        /* 0 once unloaded */
  uint32_t restored;      /* 1: loaded by LOAD from an archive */
  uint32_t pad;
  char hash[68];          /* content hash when known (restored images), else "" */
} fdy_image_info;

FDY_EXPORT size_t fdy_registry_count(void);
FDY_EXPORT int fdy_registry_get(size_t index, fdy_image_info *out);
/* Writes the NUL-separated entry names of an image into buf; *needed gets the byte count. */
FDY_EXPORT int fdy_registry_entries(size_t index, char *buf, size_t cap, size_t *needed);
/* LOAD: loads an image (kept alive by the caller) as a CUlibrary and registers it. */
FDY_EXPORT int fdy_image_load(const void *data, uint64_t size, const char *hash, size_t *image_index);
FDY_EXPORT int fdy_image_function(size_t image_index, const char *name, uint64_t *function);
/* fdy_image_load for count images in one call (datas[i], sizes[i], hashes[i] -> indices[i]), in order, stopping
 * at the first that fails (its error is the call's); *done: how many were loaded. One call, so that a caller
 * holding an interpreter lock lets it go once for them all, not once per image. */
FDY_EXPORT int fdy_image_load_many(size_t count, const uint64_t *datas, const uint64_t *sizes,
                                   const char *const *hashes, size_t *indices, size_t *done);
/* fdy_image_function for count kernels (image_indices[i], names[i] -> functions[i]), likewise. */
FDY_EXPORT int fdy_image_functions(size_t count, const size_t *image_indices, const char *const *names,
                                   uint64_t *functions, size_t *done);
/* SAVE's module-variable lookups (globals.c): for each of count names, its device address and size in the
 * CUmodule, or CUlibrary (library != 0), handle; both 0 where the driver knows no such variable
 * (CUDA_ERROR_NOT_FOUND: the code it loaded for this device does not define it). managed[i] != 0: a
 * library's variable not found by cuLibraryGetGlobal is asked of cuLibraryGetManaged. Stops at the first
 * other failure (its error is the call's); *done: how many were looked up. */
FDY_EXPORT int fdy_module_globals(uint64_t handle, int library, size_t count, const char *const *names,
                                  const uint8_t *managed, uint64_t *addresses, uint64_t *sizes, size_t *done);
/* Records every CUfunction launched eagerly while on (cuLaunchKernel, cuLaunchKernelEx, ...). */
FDY_EXPORT void fdy_launch_trace(int on);
FDY_EXPORT size_t fdy_launch_trace_read(uint64_t *out, size_t cap);
/* The names of the shared objects loaded into this process (as given to dlopen, from the dynamic linker's
 * list) that start with one of the NUL-separated prefixes (prefixes_size bytes in all), in load order, each
 * NUL-terminated into out while cap allows; returns the bytes all of them need (more than cap: call again). */
FDY_EXPORT size_t fdy_loaded_objects(const char *prefixes, size_t prefixes_size, char *out, size_t cap);

/* Function attributes that the driver keeps per function and graphs do not carry: FDY_FUNC_ATTR_COUNT
 * values, of the ids FDY_FUNC_ATTRS (format.h), FDY_FUNC_ATTR_UNKNOWN where the driver would not
 * report one. */
FDY_EXPORT int fdy_func_get_attrs(uint64_t function, int32_t *values);
/* SAVE's kernels in one call: for each of count CUfunctions, its image's registry index, its
 * FDY_FUNC_ATTR_COUNT attributes (as fdy_func_get_attrs) and its mangled name, the names NUL-terminated
 * one after another into names (*needed: the bytes they take; FDY_ERR_TRUNCATED when more than cap, all
 * else filled). Stops at the first function not in the registry (its error is the call's); *done: how
 * many were described. */
FDY_EXPORT int fdy_functions_describe(size_t count, const uint64_t *functions, size_t *image_indices,
                                      int32_t *attrs, char *names, size_t cap, size_t *needed, size_t *done);
/* Sets the attributes SAVE recorded (FDY_FUNC_ATTR_UNKNOWN: left alone) where they differ, except that the
 * dynamic shared-memory limit is only raised, never lowered. */
FDY_EXPORT int fdy_func_set_attrs(uint64_t function, const int32_t *values);

/* ---------------------------------------------------------------- graph records, checked (record_scan.c) */
/* What fdy_record_scan finds in a graph record it accepts. */
typedef struct {
  uint32_t node_count, edge_count, function_count, event_count; /* the top-level header's */
  uint64_t nodes, edges; /* the whole tree's (child graphs included; a child-graph node counts itself) */
  /* the whole tree's nodes of each persisted type */
  uint64_t kernel, memcpy, memset, child_graph, empty, event_wait, event_record;
  uint32_t children; /* 1 when the record holds a child-graph node */
  uint32_t pad;
} fdy_record_scan_info;

/* Checks a top-level graph record by the rules of foundry/records/parse.py's parse_record, accepting exactly
 * the records it accepts; a refused one fails with FDY_ERR_CORRUPT and a message naming the byte and the
 * field ("graph record, byte N, <field>: <problem>"). On success, *out is filled, and each output asked for
 * (a NULL pointer asks for none; each is NULL when empty, else released with fdy_free):
 *   *spans: 2 * node_count values, (start, end) byte offsets of each top-level node record;
 *   *kernel_functions: the function index of every kernel node of the tree, nodes depth first with parents
 *     before children (foundry/records/walk.py's iter_nodes); out->kernel values;
 *   *topology, *topology_size: the topology key's material after FDY_TOPOLOGY_KEY_VERSION (format.h), for a
 *     record without child graphs; NULL and 0 with them (a child's part is its digest, hashed by the caller). */
FDY_EXPORT int fdy_record_scan(const void *record, size_t size, fdy_record_scan_info *out, uint64_t **spans,
                               uint32_t **kernel_functions, uint8_t **topology, size_t *topology_size);
/* Compares the top-level nodes of two records of equal node counts, each accepted by fdy_record_scan (any
 * other bytes fail with FDY_ERR_CORRUPT; unequal node counts with FDY_ERR_INVALID), never reading outside
 * either. a_ids[f] (b_ids[f]) is the caller's identity number of record a's (b's) function f. Two nodes
 * are the same when their records' bytes are, except that kernels (child graphs' included) must name
 * functions of equal identity instead of equal index. Of the top-level nodes that are not the same, the
 * first that an exec cannot switch (another node type, a type other than kernel, memset and memcpy, or
 * kernels of other launch attributes) sets *blocked and ends the list (*differing NULL, *count 0); else
 * *blocked is -1 and *differing (fdy_free) holds the *count indices in order. *edges_equal: the top-level
 * edge tables are byte for byte the same. */
FDY_EXPORT int fdy_record_compare(const void *a, size_t a_size, const uint32_t *a_ids, size_t a_functions,
                                  const void *b, size_t b_size, const uint32_t *b_ids, size_t b_functions,
                                  uint32_t **differing, size_t *count, int64_t *blocked, int *edges_equal);

/* ---------------------------------------------------------------- graph codec */
/* Serialises a CUgraph into a graph record (docs/FORMAT.md). *blob and *functions are malloc'd and
 * released with fdy_free. functions[i] is the CUfunction that kernel nodes name by index i. */
FDY_EXPORT int fdy_graph_extract(uint64_t graph, void **blob, size_t *blob_size, uint64_t **functions,
                                 size_t *function_count);
/* Rebuilds a CUgraph from a record; functions[i] replaces index i. nodes (may be NULL) receives the
 * CUgraphNode of each top-level node, in record order, for later overrides. Each kernel node's parameter
 * table is proven, before the driver sees the node, to be the list its function takes as the driver reports
 * it (count, offsets, sizes; an `extra` buffer at least as long as the parameters span): FDY_ERR_PARAM_MISMATCH
 * otherwise, naming the node and the kernel; FDY_ERR_NO_PARAM_INFO where the driver cannot describe a kernel
 * whose node passes kernelParams. */
FDY_EXPORT int fdy_graph_build(const void *blob, size_t blob_size, const uint64_t *functions,
                               size_t function_count, uint64_t *graph, uint64_t *nodes, size_t node_cap);
/* Applies a delta's node records (docs/FORMAT.md "Delta") to a graph built from its template
 * (to_exec = 0: cuGraph*NodeSetParams, launch attributes included) or to an exec instantiated from it
 * (to_exec = 1: cuGraphExec*NodeSetParams). nodes are the template's top-level node handles. Every override is
 * decoded and checked (as fdy_delta_check) before the first is applied, so a refused delta leaves the target
 * as it was. */
FDY_EXPORT int fdy_overrides_apply(uint64_t target, int to_exec, const uint64_t *nodes, size_t node_count,
                                   const void *delta, size_t delta_size, const uint64_t *functions,
                                   size_t function_count);
/* Checks a delta against a template of node_count top-level nodes and the member's function table, without a
 * driver call beyond the kernels' parameter lists: its layout, and each kernel override's parameters as
 * fdy_graph_build checks a node's (FDY_ERR_PARAM_MISMATCH, FDY_ERR_NO_PARAM_INFO). */
FDY_EXPORT int fdy_delta_check(const void *delta, size_t delta_size, size_t node_count, const uint64_t *functions,
                               size_t function_count);
/* The template node index of each override of a delta (checked against node_count); with out NULL
 * or cap too small, only *count is set. */
FDY_EXPORT int fdy_delta_indices(const void *delta, size_t delta_size, size_t node_count, uint32_t *out, size_t cap,
                                 size_t *count);
/* A delta holding the record's own nodes at the given indices, its header written whole: template_sha256
 * (32 bytes) is the SHA-256 of the template's graph record the delta applies to. */
FDY_EXPORT int fdy_delta_from_record(const void *record, size_t record_size, const uint32_t *indices, size_t count,
                                     const uint8_t *template_sha256, void **delta, size_t *delta_size);
/* SAVE's probe for graph-safe random numbers (codec_probe.c). Switches the kernel, memcpy and memset nodes
 * of `exec` (instantiated from `graph`) off or on, their types read from the graph's record (the one
 * fdy_graph_extract made of it), one driver call per switched node and none per node to ask its type. */
FDY_EXPORT int fdy_graph_work_enable(uint64_t graph, uint64_t exec, const void *record, size_t record_size,
                                     int enabled);
/* Every 8-byte word of the record's kernel argument buffers (from each buffer's start) that lies, with its
 * 8 bytes, in one of the live ranges (range_count sorted, disjoint (start, end) pairs of device addresses),
 * read from the device, nearby words of one range in one copy: *pairs (released with fdy_free) holds *count
 * (address, value) pairs sorted by address, each address once; a word the driver cannot read is left out. */
FDY_EXPORT int fdy_record_pointed_words(const void *record, size_t record_size, const uint64_t *ranges,
                                        size_t range_count, uint64_t **pairs, size_t *count);

FDY_EXPORT int fdy_graph_instantiate(uint64_t graph, uint64_t flags, uint64_t *exec);
/* Uploads an exec to the device and waits for the upload (on a stream of its own), so that its first launch
 * does no upload work. */
FDY_EXPORT int fdy_graph_upload_wait(uint64_t exec);
FDY_EXPORT int fdy_graph_launch(uint64_t exec, uint64_t stream);
/* Until called again with 0, this thread's launches of `exec` through the interposed cuGraphLaunch (the
 * runtime's, dlsym's) return success and do nothing; Foundry's own launches are not affected. Returns how
 * many launches were dropped since this thread last armed (hooks_graph.c). */
FDY_EXPORT uint32_t fdy_graph_launch_drop(uint64_t exec);
/* 1 once any caller got the interposer's hook for `symbol` (by dlsym or cuGetProcAddress), else 0. */
FDY_EXPORT int fdy_hook_handed_out(const char *symbol);
FDY_EXPORT int fdy_graph_destroy(uint64_t graph);
FDY_EXPORT int fdy_graph_exec_destroy(uint64_t exec);
FDY_EXPORT void fdy_free(void *p);
/* Grows the calling thread's malloc arena by about `bytes`, pre-faulted, kept until
 * fdy_heap_release(returned); NULL when there was nothing to do (heap_warm.c). */
FDY_EXPORT void *fdy_heap_warm(size_t bytes);
FDY_EXPORT void fdy_heap_release(void *keep);

#ifdef __cplusplus
}
#endif
#endif
