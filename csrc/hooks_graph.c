/* Graph launch hooks: pass through, except the launches a thread asked to drop.
 *
 * SAVE's generator probe replays a captured graph through PyTorch, for PyTorch's host side of a replay
 * (advance the generator, refill its seed and offset buffers), and must not run the graph: the program's
 * memory would change. PyTorch launches its exec through the runtime, which reaches the driver through
 * cuGetProcAddress, so the launch comes here, and the probe drops it (fdy_graph_launch_drop). The other
 * way, switching the exec's work nodes off and on again (fdy_graph_work_enable), leaves the exec slower
 * for good (13-22% on an H200; docs/DESIGN.md), and the program goes on replaying that exec. */
#include "internal.h"

/* How many threads have a drop armed: the one load every launch pays while none has. */
static int armed_threads;
static __thread uint64_t drop_exec; /* the exec this thread's launches of are dropped; 0: none */
static __thread uint32_t dropped;   /* launches dropped since this thread armed */

static int drop(CUgraphExec e) {
  if (!__atomic_load_n(&armed_threads, __ATOMIC_RELAXED) || !drop_exec || (uint64_t)(uintptr_t)e != drop_exec)
    return 0;
  dropped++;
  return 1;
}

CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
  ENSURE_DRIVER();
  if (drop(e)) return CUDA_SUCCESS;
  return fdy_drv.cuGraphLaunch(e, s);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s) {
  ENSURE_DRIVER();
  if (drop(e)) return CUDA_SUCCESS;
  return fdy_drv.cuGraphLaunch_ptsz(e, s);
}

FDY_EXPORT uint32_t fdy_graph_launch_drop(uint64_t exec) {
  uint32_t n = dropped;
  if (exec && !drop_exec) __atomic_add_fetch(&armed_threads, 1, __ATOMIC_RELAXED);
  if (!exec && drop_exec) __atomic_sub_fetch(&armed_threads, 1, __ATOMIC_RELAXED);
  drop_exec = exec;
  dropped = 0;
  return n;
}
