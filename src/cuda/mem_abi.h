/*
 * The few driver API values src/cuda/mem.c needs to ask libcuda.so.1 (opened with dlopen, in
 * every build, so that no build links the driver) where a pointer lives. Copied from cuda.h,
 * which has been stable since CUDA 9.2; where CUDA is built, runtime.cu checks each of them
 * against the real header with static_assert.
 */
#ifndef RING_CUDA_MEM_ABI_H
#define RING_CUDA_MEM_ABI_H

#define RING__CUDA_SUCCESS 0
#define RING__CUDA_ERROR_NOT_INITIALIZED 3 /* cuInit was never called (or failed) in this process */
#define RING__CUDA_ERROR_DEINITIALIZED 4   /* the driver is shutting down */

#define RING__CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2    /* CUmemorytype (unsigned int) */
#define RING__CU_POINTER_ATTRIBUTE_IS_MANAGED 8     /* boolean (written as unsigned int) */
#define RING__CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9 /* int */
/* For CUDA IPC of user buffers (src/cuda/direct.c): which allocation a pointer is in. */
#define RING__CU_POINTER_ATTRIBUTE_BUFFER_ID 7                  /* unsigned long long, never reused in a process */
#define RING__CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE 10 /* boolean: cudaIpcGetMemHandle works on it */
#define RING__CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11          /* CUdeviceptr: the allocation's base */
#define RING__CU_POINTER_ATTRIBUTE_RANGE_SIZE 12                /* size_t: the allocation's size */

#define RING__CU_MEMORYTYPE_HOST 1
#define RING__CU_MEMORYTYPE_DEVICE 2

#endif
