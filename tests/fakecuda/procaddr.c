/* fakecuda: cuGetProcAddress. A table from BASE names (no _v2/_ptsz suffix) to implementations.
 *
 * Each row says from which CUDA version (major*1000 + minor*10) that implementation is what the
 * base name means; a request picks the newest row not above the requested version, like the real
 * driver (cuMemAlloc below 3020 is the 32-bit v1 ABI, cuGetProcAddress below 12000 the 4-argument
 * one, cuGraphGetEdges from 12030 the edge-data _v2, ...). Rows marked per-thread are returned for
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM when present. Every exported function has a row
 * (tests check this against the dynamic symbol table). */
#include "fakecuda.h"

typedef struct {
  const char *name;
  int version;
  int ptds;
  void *fn;
} fc_proc;

#define E(base, ver, fn) {#base, ver, 0, (void *)&fn},
#define P(base, ver, fn) {#base, ver, 1, (void *)&fn},

static const fc_proc table[] = {
    /* init, devices, contexts, errors */
    E(cuInit, 2000, cuInit) E(cuDriverGetVersion, 2020, cuDriverGetVersion)
    E(cuGetErrorName, 6000, cuGetErrorName) E(cuGetErrorString, 6000, cuGetErrorString)
    E(cuGetProcAddress, 11030, cuGetProcAddress) E(cuGetProcAddress, 12000, cuGetProcAddress_v2)
    E(cuDeviceGet, 2000, cuDeviceGet) E(cuDeviceGetCount, 2000, cuDeviceGetCount)
    E(cuDeviceGetName, 2000, cuDeviceGetName) E(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute)
    E(cuDeviceComputeCapability, 2000, cuDeviceComputeCapability)
    E(cuDeviceTotalMem, 2000, cuDeviceTotalMem) E(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2)
    E(cuDeviceGetUuid, 9020, cuDeviceGetUuid) E(cuDeviceGetUuid, 11040, cuDeviceGetUuid_v2)
    E(cuDeviceGetPCIBusId, 4010, cuDeviceGetPCIBusId)
    E(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain)
    E(cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease)
    E(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2)
    E(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState)
    E(cuDevicePrimaryCtxSetFlags, 11000, cuDevicePrimaryCtxSetFlags_v2)
    E(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2)
    E(cuCtxSetCurrent, 4000, cuCtxSetCurrent) E(cuCtxGetCurrent, 4000, cuCtxGetCurrent)
    E(cuCtxPushCurrent, 2000, cuCtxPushCurrent) E(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2)
    E(cuCtxPopCurrent, 2000, cuCtxPopCurrent) E(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2)
    E(cuCtxGetDevice, 2000, cuCtxGetDevice) E(cuCtxGetApiVersion, 3020, cuCtxGetApiVersion)
    E(cuCtxGetFlags, 7000, cuCtxGetFlags) E(cuCtxGetStreamPriorityRange, 5050, cuCtxGetStreamPriorityRange)
    E(cuCtxSynchronize, 2000, cuCtxSynchronize)
    /* memory */
    E(cuMemAlloc, 2000, cuMemAlloc) E(cuMemAlloc, 3020, cuMemAlloc_v2)
    E(cuMemAllocPitch, 2000, cuMemAllocPitch) E(cuMemAllocPitch, 3020, cuMemAllocPitch_v2)
    E(cuMemFree, 2000, cuMemFree) E(cuMemFree, 3020, cuMemFree_v2)
    E(cuMemGetAddressRange, 2000, cuMemGetAddressRange) E(cuMemGetAddressRange, 3020, cuMemGetAddressRange_v2)
    E(cuMemGetInfo, 3020, cuMemGetInfo_v2) E(cuMemAllocManaged, 6000, cuMemAllocManaged)
    E(cuMemAllocHost, 3020, cuMemAllocHost_v2) E(cuMemHostAlloc, 2020, cuMemHostAlloc)
    E(cuMemFreeHost, 2000, cuMemFreeHost) E(cuMemHostGetDevicePointer, 3020, cuMemHostGetDevicePointer_v2)
    E(cuPointerGetAttribute, 4000, cuPointerGetAttribute)
    E(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2) P(cuMemcpyHtoD, 7000, cuMemcpyHtoD_v2_ptds)
    E(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2) P(cuMemcpyDtoH, 7000, cuMemcpyDtoH_v2_ptds)
    E(cuMemcpyDtoD, 3020, cuMemcpyDtoD_v2) P(cuMemcpyDtoD, 7000, cuMemcpyDtoD_v2_ptds)
    E(cuMemcpy, 4000, cuMemcpy) P(cuMemcpy, 7000, cuMemcpy_ptds)
    E(cuMemcpyHtoDAsync, 3020, cuMemcpyHtoDAsync_v2) P(cuMemcpyHtoDAsync, 7000, cuMemcpyHtoDAsync_v2_ptsz)
    E(cuMemcpyDtoHAsync, 3020, cuMemcpyDtoHAsync_v2) P(cuMemcpyDtoHAsync, 7000, cuMemcpyDtoHAsync_v2_ptsz)
    E(cuMemcpyDtoDAsync, 3020, cuMemcpyDtoDAsync_v2) P(cuMemcpyDtoDAsync, 7000, cuMemcpyDtoDAsync_v2_ptsz)
    E(cuMemcpyAsync, 4000, cuMemcpyAsync) P(cuMemcpyAsync, 7000, cuMemcpyAsync_ptsz)
    E(cuMemcpy2D, 3020, cuMemcpy2D_v2) E(cuMemcpy2DAsync, 3020, cuMemcpy2DAsync_v2)
    E(cuMemcpy3D, 3020, cuMemcpy3D_v2) E(cuMemcpy3DAsync, 3020, cuMemcpy3DAsync_v2)
#ifndef FAKECUDA_NO_BATCH_COPY
    E(cuMemcpyBatchAsync, 13000, cuMemcpyBatchAsync_v2)
#endif
    E(cuMemsetD8, 3020, cuMemsetD8_v2) P(cuMemsetD8, 7000, cuMemsetD8_v2_ptds)
    E(cuMemsetD16, 3020, cuMemsetD16_v2)
    E(cuMemsetD32, 3020, cuMemsetD32_v2) P(cuMemsetD32, 7000, cuMemsetD32_v2_ptds)
    E(cuMemsetD8Async, 3020, cuMemsetD8Async) P(cuMemsetD8Async, 7000, cuMemsetD8Async_ptsz)
    E(cuMemsetD16Async, 3020, cuMemsetD16Async) P(cuMemsetD16Async, 7000, cuMemsetD16Async_ptsz)
    E(cuMemsetD32Async, 3020, cuMemsetD32Async) P(cuMemsetD32Async, 7000, cuMemsetD32Async_ptsz)
    E(cuMemExportToShareableHandle, 10020, cuMemExportToShareableHandle)
    E(cuMemImportFromShareableHandle, 10020, cuMemImportFromShareableHandle)
    E(cuIpcGetMemHandle, 4010, cuIpcGetMemHandle) E(cuIpcOpenMemHandle, 11000, cuIpcOpenMemHandle_v2)
    E(cuIpcCloseMemHandle, 4010, cuIpcCloseMemHandle)
    E(cuMemAllocAsync, 11020, cuMemAllocAsync) P(cuMemAllocAsync, 11020, cuMemAllocAsync_ptsz)
    E(cuMemFreeAsync, 11020, cuMemFreeAsync) P(cuMemFreeAsync, 11020, cuMemFreeAsync_ptsz)
    E(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync)
    P(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync_ptsz)
    E(cuMemPoolCreate, 11020, cuMemPoolCreate) E(cuMemPoolDestroy, 11020, cuMemPoolDestroy)
    E(cuDeviceGetDefaultMemPool, 11020, cuDeviceGetDefaultMemPool) E(cuDeviceGetMemPool, 11020, cuDeviceGetMemPool)
    E(cuMemPoolSetAttribute, 11020, cuMemPoolSetAttribute) E(cuMemPoolGetAttribute, 11020, cuMemPoolGetAttribute)
    E(cuMemPoolTrimTo, 11020, cuMemPoolTrimTo)
    /* virtual memory management */
    E(cuMemGetAllocationGranularity, 10020, cuMemGetAllocationGranularity)
    E(cuMemAddressReserve, 10020, cuMemAddressReserve) E(cuMemAddressFree, 10020, cuMemAddressFree)
    E(cuMemCreate, 10020, cuMemCreate) E(cuMemRelease, 10020, cuMemRelease)
    E(cuMemRetainAllocationHandle, 11000, cuMemRetainAllocationHandle)
    E(cuMemGetAllocationPropertiesFromHandle, 10020, cuMemGetAllocationPropertiesFromHandle)
    E(cuMemMap, 10020, cuMemMap) E(cuMemUnmap, 10020, cuMemUnmap)
    E(cuMemSetAccess, 10020, cuMemSetAccess) E(cuMemGetAccess, 10020, cuMemGetAccess)
    /* modules, libraries, functions, kernels */
    E(cuModuleLoad, 2000, cuModuleLoad) E(cuModuleLoadData, 2000, cuModuleLoadData)
    E(cuModuleLoadDataEx, 2010, cuModuleLoadDataEx) E(cuModuleLoadFatBinary, 2000, cuModuleLoadFatBinary)
    E(cuModuleUnload, 2000, cuModuleUnload) E(cuModuleGetFunction, 2000, cuModuleGetFunction)
    E(cuModuleGetGlobal, 3020, cuModuleGetGlobal_v2) E(cuLibraryGetGlobal, 12000, cuLibraryGetGlobal)
    E(cuLibraryGetManaged, 12000, cuLibraryGetManaged)
    E(cuModuleGetFunctionCount, 12040, cuModuleGetFunctionCount)
    E(cuModuleEnumerateFunctions, 12040, cuModuleEnumerateFunctions)
    E(cuModuleGetLoadingMode, 11070, cuModuleGetLoadingMode)
    E(cuLibraryLoadData, 12000, cuLibraryLoadData) E(cuLibraryLoadFromFile, 12000, cuLibraryLoadFromFile)
    E(cuLibraryUnload, 12000, cuLibraryUnload) E(cuLibraryGetKernel, 12000, cuLibraryGetKernel)
    E(cuLibraryGetKernelCount, 12040, cuLibraryGetKernelCount)
    E(cuLibraryEnumerateKernels, 12040, cuLibraryEnumerateKernels)
    E(cuLibraryGetModule, 12000, cuLibraryGetModule) E(cuKernelGetFunction, 12000, cuKernelGetFunction)
    E(cuKernelGetName, 12030, cuKernelGetName) E(cuKernelGetLibrary, 12050, cuKernelGetLibrary)
    E(cuKernelGetAttribute, 12000, cuKernelGetAttribute) E(cuKernelSetAttribute, 12000, cuKernelSetAttribute)
    E(cuKernelGetParamInfo, 12040, cuKernelGetParamInfo)
    E(cuFuncGetAttribute, 2020, cuFuncGetAttribute) E(cuFuncSetAttribute, 9000, cuFuncSetAttribute)
    E(cuFuncGetName, 12030, cuFuncGetName) E(cuFuncGetModule, 11000, cuFuncGetModule)
    E(cuFuncGetParamInfo, 12040, cuFuncGetParamInfo) E(cuFuncLoad, 12040, cuFuncLoad)
    E(cuFuncIsLoaded, 12040, cuFuncIsLoaded) E(cuFuncSetCacheConfig, 3000, cuFuncSetCacheConfig)
    /* launches */
    E(cuLaunchKernel, 4000, cuLaunchKernel) P(cuLaunchKernel, 7000, cuLaunchKernel_ptsz)
    E(cuLaunchKernelEx, 11060, cuLaunchKernelEx) P(cuLaunchKernelEx, 11060, cuLaunchKernelEx_ptsz)
    E(cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel)
    P(cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel_ptsz)
    E(cuLaunchHostFunc, 10000, cuLaunchHostFunc) P(cuLaunchHostFunc, 10000, cuLaunchHostFunc_ptsz)
    /* streams, events, capture */
    E(cuStreamCreate, 2000, cuStreamCreate) E(cuStreamCreateWithPriority, 5050, cuStreamCreateWithPriority)
    E(cuStreamDestroy, 2000, cuStreamDestroy) E(cuStreamDestroy, 4000, cuStreamDestroy_v2)
    E(cuStreamGetFlags, 5050, cuStreamGetFlags) E(cuStreamGetPriority, 5050, cuStreamGetPriority)
    E(cuStreamGetId, 12000, cuStreamGetId) E(cuStreamGetCtx, 9020, cuStreamGetCtx)
    E(cuStreamSynchronize, 2000, cuStreamSynchronize) P(cuStreamSynchronize, 7000, cuStreamSynchronize_ptsz)
    E(cuStreamQuery, 2000, cuStreamQuery) P(cuStreamQuery, 7000, cuStreamQuery_ptsz)
    E(cuStreamAddCallback, 5000, cuStreamAddCallback)
    E(cuStreamWaitEvent, 3020, cuStreamWaitEvent) P(cuStreamWaitEvent, 7000, cuStreamWaitEvent_ptsz)
    E(cuEventCreate, 2000, cuEventCreate)
    E(cuEventDestroy, 2000, cuEventDestroy) E(cuEventDestroy, 4000, cuEventDestroy_v2)
    E(cuEventRecord, 2000, cuEventRecord) P(cuEventRecord, 7000, cuEventRecord_ptsz)
    E(cuEventRecordWithFlags, 11010, cuEventRecordWithFlags)
    P(cuEventRecordWithFlags, 11010, cuEventRecordWithFlags_ptsz)
    E(cuEventSynchronize, 2000, cuEventSynchronize) E(cuEventQuery, 2000, cuEventQuery)
    E(cuEventElapsedTime, 2000, cuEventElapsedTime) E(cuEventElapsedTime, 12080, cuEventElapsedTime_v2)
    E(cuStreamBeginCapture, 10000, cuStreamBeginCapture) P(cuStreamBeginCapture, 10000, cuStreamBeginCapture_ptsz)
    E(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2) P(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2_ptsz)
    E(cuStreamEndCapture, 10000, cuStreamEndCapture) P(cuStreamEndCapture, 10000, cuStreamEndCapture_ptsz)
    E(cuStreamIsCapturing, 10000, cuStreamIsCapturing) P(cuStreamIsCapturing, 10000, cuStreamIsCapturing_ptsz)
    E(cuStreamGetCaptureInfo, 11030, cuStreamGetCaptureInfo_v2)
    E(cuStreamGetCaptureInfo, 12030, cuStreamGetCaptureInfo_v3)
    P(cuStreamGetCaptureInfo, 12030, cuStreamGetCaptureInfo_v3_ptsz)
    E(cuStreamUpdateCaptureDependencies, 11030, cuStreamUpdateCaptureDependencies)
    E(cuStreamUpdateCaptureDependencies, 12030, cuStreamUpdateCaptureDependencies_v2)
    E(cuThreadExchangeStreamCaptureMode, 10010, cuThreadExchangeStreamCaptureMode)
    /* graphs */
    E(cuGraphCreate, 10000, cuGraphCreate) E(cuGraphDestroy, 10000, cuGraphDestroy)
    E(cuGraphClone, 10000, cuGraphClone) E(cuGraphNodeFindInClone, 10000, cuGraphNodeFindInClone)
    E(cuGraphAddKernelNode, 10000, cuGraphAddKernelNode) E(cuGraphAddKernelNode, 12000, cuGraphAddKernelNode_v2)
    E(cuGraphAddMemsetNode, 10000, cuGraphAddMemsetNode) E(cuGraphAddMemcpyNode, 10000, cuGraphAddMemcpyNode)
    E(cuGraphAddEmptyNode, 10000, cuGraphAddEmptyNode) E(cuGraphAddHostNode, 10000, cuGraphAddHostNode)
    E(cuGraphAddEventRecordNode, 11010, cuGraphAddEventRecordNode)
    E(cuGraphAddEventWaitNode, 11010, cuGraphAddEventWaitNode)
    E(cuGraphAddChildGraphNode, 10000, cuGraphAddChildGraphNode)
    E(cuGraphAddMemAllocNode, 11040, cuGraphAddMemAllocNode) E(cuGraphAddMemFreeNode, 11040, cuGraphAddMemFreeNode)
    E(cuGraphGetNodes, 10000, cuGraphGetNodes) E(cuGraphGetRootNodes, 10000, cuGraphGetRootNodes)
    E(cuGraphGetEdges, 10000, cuGraphGetEdges) E(cuGraphGetEdges, 12030, cuGraphGetEdges_v2)
    E(cuGraphNodeGetDependencies, 10000, cuGraphNodeGetDependencies)
    E(cuGraphNodeGetDependencies, 12030, cuGraphNodeGetDependencies_v2)
    E(cuGraphNodeGetDependentNodes, 10000, cuGraphNodeGetDependentNodes)
    E(cuGraphNodeGetDependentNodes, 12030, cuGraphNodeGetDependentNodes_v2)
    E(cuGraphAddDependencies, 10000, cuGraphAddDependencies) E(cuGraphAddDependencies, 12030, cuGraphAddDependencies_v2)
    E(cuGraphRemoveDependencies, 10000, cuGraphRemoveDependencies)
    E(cuGraphRemoveDependencies, 12030, cuGraphRemoveDependencies_v2)
    E(cuGraphDestroyNode, 10000, cuGraphDestroyNode) E(cuGraphNodeGetType, 10000, cuGraphNodeGetType)
    E(cuGraphKernelNodeGetParams, 10000, cuGraphKernelNodeGetParams)
    E(cuGraphKernelNodeGetParams, 12000, cuGraphKernelNodeGetParams_v2)
    E(cuGraphKernelNodeSetParams, 10000, cuGraphKernelNodeSetParams)
    E(cuGraphKernelNodeSetParams, 12000, cuGraphKernelNodeSetParams_v2)
    E(cuGraphKernelNodeGetAttribute, 11000, cuGraphKernelNodeGetAttribute)
    E(cuGraphKernelNodeSetAttribute, 11000, cuGraphKernelNodeSetAttribute)
    E(cuGraphKernelNodeCopyAttributes, 11000, cuGraphKernelNodeCopyAttributes)
    E(cuGraphMemsetNodeGetParams, 10000, cuGraphMemsetNodeGetParams)
    E(cuGraphMemsetNodeSetParams, 10000, cuGraphMemsetNodeSetParams)
    E(cuGraphMemcpyNodeGetParams, 10000, cuGraphMemcpyNodeGetParams)
    E(cuGraphMemcpyNodeSetParams, 10000, cuGraphMemcpyNodeSetParams)
    E(cuGraphHostNodeGetParams, 10000, cuGraphHostNodeGetParams)
    E(cuGraphChildGraphNodeGetGraph, 10000, cuGraphChildGraphNodeGetGraph)
    E(cuGraphEventRecordNodeGetEvent, 11010, cuGraphEventRecordNodeGetEvent)
    E(cuGraphEventRecordNodeSetEvent, 11010, cuGraphEventRecordNodeSetEvent)
    E(cuGraphEventWaitNodeGetEvent, 11010, cuGraphEventWaitNodeGetEvent)
    E(cuGraphEventWaitNodeSetEvent, 11010, cuGraphEventWaitNodeSetEvent)
    E(cuGraphMemAllocNodeGetParams, 11040, cuGraphMemAllocNodeGetParams)
    E(cuGraphMemFreeNodeGetParams, 11040, cuGraphMemFreeNodeGetParams)
    E(cuGraphInstantiate, 10000, cuGraphInstantiate) E(cuGraphInstantiate, 11000, cuGraphInstantiate_v2)
    E(cuGraphInstantiate, 12000, cuGraphInstantiateWithFlags)
    E(cuGraphInstantiateWithFlags, 11040, cuGraphInstantiateWithFlags)
    E(cuGraphInstantiateWithParams, 12000, cuGraphInstantiateWithParams)
    P(cuGraphInstantiateWithParams, 12000, cuGraphInstantiateWithParams_ptsz)
    E(cuGraphExecDestroy, 10000, cuGraphExecDestroy)
    E(cuGraphLaunch, 10000, cuGraphLaunch) P(cuGraphLaunch, 10000, cuGraphLaunch_ptsz)
    E(cuGraphUpload, 11010, cuGraphUpload) P(cuGraphUpload, 11010, cuGraphUpload_ptsz)
    E(cuGraphNodeSetEnabled, 11060, cuGraphNodeSetEnabled)
    E(cuGraphExecKernelNodeSetParams, 10010, cuGraphExecKernelNodeSetParams)
    E(cuGraphExecKernelNodeSetParams, 12000, cuGraphExecKernelNodeSetParams_v2)
    E(cuGraphExecUpdate, 10020, cuGraphExecUpdate) E(cuGraphExecUpdate, 12000, cuGraphExecUpdate_v2)
    E(cuGraphExecMemsetNodeSetParams, 10020, cuGraphExecMemsetNodeSetParams)
    E(cuGraphExecMemcpyNodeSetParams, 10020, cuGraphExecMemcpyNodeSetParams)
};

CUresult fc_get_proc(const char *symbol, void **pfn, int version, cuuint64_t flags,
                     CUdriverProcAddressQueryResult *status) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
    return CUDA_ERROR_INVALID_VALUE;
  int want_ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const fc_proc *best[2] = {NULL, NULL};
  int named = 0;
  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
    const fc_proc *e = &table[i];
    if (strcmp(e->name, symbol) != 0) continue;
    named = 1;
    if (e->version > version) continue;
    if (!best[e->ptds] || e->version >= best[e->ptds]->version) best[e->ptds] = e;
  }
  /* the per-thread row only when it is the same ABI tier as the default one */
  const fc_proc *hit = want_ptds && best[1] && (!best[0] || best[1]->version >= best[0]->version) ? best[1] : best[0];
  *pfn = NULL;
  if (!hit) {
    if (status) *status = named ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = hit->fn;
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

FC_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *symbolStatus) {
  return fc_get_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
}

FC_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
  return fc_get_proc(symbol, pfn, cudaVersion, flags, NULL);
}
