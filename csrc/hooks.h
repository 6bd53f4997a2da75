/* The one list of driver entry points Foundry interposes.
 *
 * X(base, symbol, min_version, per_thread)
 *   base         the name cuGetProcAddress is asked for
 *   symbol       the exported symbol with the ABI our hook implements (also our hook's name)
 *   min_version  the lowest cudaVersion at which cuGetProcAddress(base) has that ABI
 *   per_thread   1 for the per-thread-default-stream (_ptsz) variant
 *
 * A hook is only handed out when the driver's answer for (base, version, flags) is the very pointer
 * that `symbol` resolves to, or when version is within [min_version, CUDA_VERSION of our headers];
 * any other answer is passed through unchanged, so an ABI we do not know is never hooked. */
#ifndef FOUNDRY_HOOKS_H
#define FOUNDRY_HOOKS_H

#define FDY_HOOKS(X)                                                        \
  /* memory: every allocation path lands in the region while it is active */ \
  X(cuMemAlloc, cuMemAlloc_v2, 3020, 0)                                     \
  X(cuMemAllocPitch, cuMemAllocPitch_v2, 3020, 0)                           \
  X(cuMemFree, cuMemFree_v2, 3020, 0)                                       \
  X(cuMemGetAddressRange, cuMemGetAddressRange_v2, 3020, 0)                 \
  X(cuPointerGetAttribute, cuPointerGetAttribute, 4000, 0)                  \
  X(cuMemAllocManaged, cuMemAllocManaged, 6000, 0)                          \
  X(cuMemAllocAsync, cuMemAllocAsync, 11020, 0)                             \
  X(cuMemAllocAsync, cuMemAllocAsync_ptsz, 11020, 1)                        \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0)             \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz, 11020, 1)        \
  X(cuMemFreeAsync, cuMemFreeAsync, 11020, 0)                               \
  X(cuMemFreeAsync, cuMemFreeAsync_ptsz, 11020, 1)                          \
  X(cuMemAddressReserve, cuMemAddressReserve, 10020, 0)                     \
  X(cuMemAddressFree, cuMemAddressFree, 10020, 0)                           \
  X(cuMemMap, cuMemMap, 10020, 0)                                           \
  X(cuMemUnmap, cuMemUnmap, 10020, 0)                                       \
  X(cuMemRelease, cuMemRelease, 10020, 0)                                   \
  X(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle, 10020, 0) \
  X(cuIpcGetMemHandle, cuIpcGetMemHandle, 4010, 0)                          \
  X(cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2, 11000, 0)                    \
  X(cuIpcCloseMemHandle, cuIpcCloseMemHandle, 4010, 0)                      \
  /* images: every module and library load is recorded */                  \
  X(cuModuleLoad, cuModuleLoad, 2000, 0)                                    \
  X(cuModuleLoadData, cuModuleLoadData, 2000, 0)                            \
  X(cuModuleLoadDataEx, cuModuleLoadDataEx, 2010, 0)                        \
  X(cuModuleLoadFatBinary, cuModuleLoadFatBinary, 2000, 0)                  \
  X(cuModuleUnload, cuModuleUnload, 2000, 0)                                \
  X(cuLibraryLoadData, cuLibraryLoadData, 12000, 0)                         \
  X(cuLibraryLoadFromFile, cuLibraryLoadFromFile, 12000, 0)                 \
  X(cuLibraryUnload, cuLibraryUnload, 12000, 0)                             \
  X(cuLibraryGetKernel, cuLibraryGetKernel, 12000, 0)                       \
  /* launches: traced on request, to prove the registry sees every kernel */ \
  X(cuLaunchKernel, cuLaunchKernel, 4000, 0)                                \
  X(cuLaunchKernel, cuLaunchKernel_ptsz, 7000, 1)                           \
  X(cuLaunchKernelEx, cuLaunchKernelEx, 11060, 0)                           \
  X(cuLaunchKernelEx, cuLaunchKernelEx_ptsz, 11060, 1)                      \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000, 0)          \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz, 9000, 1)     \
  /* graph launches: SAVE's generator probe drops its own replays' launches (hooks_graph.c) */ \
  X(cuGraphLaunch, cuGraphLaunch, 10000, 0)                                 \
  X(cuGraphLaunch, cuGraphLaunch_ptsz, 10000, 1)                            \
  /* the lookup itself, so that the runtime's lookups come back to us */     \
  X(cuGetProcAddress, cuGetProcAddress, 11030, 0)                           \
  X(cuGetProcAddress, cuGetProcAddress_v2, 12000, 0)

#endif
