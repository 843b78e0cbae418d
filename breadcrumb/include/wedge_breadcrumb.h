/*
 * wedge_breadcrumb.h — write wedge-capture breadcrumbs from C (or Go through cgo).
 *
 * Before every CUDA driver call, record an "enter" with the call id, its arguments and a short
 * label; after it returns, record the "exit" with its result. If the call never returns (the
 * thread is stuck in the driver, state D), `wedge-capture ring dump` and the agent name it, with
 * its arguments, from outside the process. Format: docs/breadcrumb-ring.md.
 *
 * Link: -lwedge_breadcrumb (libwedge_breadcrumb.so or libwedge_breadcrumb.a; the static library
 * also needs -lpthread -ldl -lm). Record functions are lock-free, allocation-free and make no
 * system call; they are safe to call from any number of threads (each thread writes a lane of the
 * ring of its own, with no locked instruction; its records are stamped with the CPU counter where
 * the kernel's clocksource is that counter). Nothing here aborts or unwinds: failures are return
 * values.
 */
#ifndef WEDGE_BREADCRUMB_H
#define WEDGE_BREADCRUMB_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Returned by wedge_breadcrumb_enter when nothing was recorded; wedge_breadcrumb_exit ignores it. */
#define WB_TOKEN_NONE UINT64_MAX

/* Label bytes kept per record (longer labels are cut at a UTF-8 character boundary). */
#define WB_LABEL_CAPACITY 40

/* Stable call ids (the file format's table; never renumbered). */
enum wb_call {
    WB_CALL_CUSTOM = 0,
    WB_CALL_cuInit = 1,
    WB_CALL_cuCtxCreate_v2 = 2,
    WB_CALL_cuCtxDestroy_v2 = 3,
    WB_CALL_cuCtxSynchronize = 4,
    WB_CALL_cuCtxSetCurrent = 5,
    WB_CALL_cuDevicePrimaryCtxRetain = 6,
    WB_CALL_cuDeviceGet = 7,
    WB_CALL_cuDeviceGetAttribute = 8,
    WB_CALL_cuMemGetInfo_v2 = 9,
    WB_CALL_cuMemAlloc_v2 = 10,
    WB_CALL_cuMemFree_v2 = 11,
    WB_CALL_cuMemAllocManaged = 12,
    WB_CALL_cuMemHostAlloc = 13,
    WB_CALL_cuMemFreeHost = 14,
    WB_CALL_cuMemHostRegister_v2 = 15,
    WB_CALL_cuMemHostUnregister = 16,
    WB_CALL_cuMemcpyHtoD_v2 = 17,
    WB_CALL_cuMemcpyDtoH_v2 = 18,
    WB_CALL_cuMemcpyDtoD_v2 = 19,
    WB_CALL_cuMemcpyHtoDAsync_v2 = 20,
    WB_CALL_cuMemcpyDtoHAsync_v2 = 21,
    WB_CALL_cuMemsetD8_v2 = 22,
    WB_CALL_cuMemsetD32_v2 = 23,
    WB_CALL_cuMemPrefetchAsync = 24,
    WB_CALL_cuMemAdvise = 25,
    WB_CALL_cuStreamCreate = 26,
    WB_CALL_cuStreamDestroy_v2 = 27,
    WB_CALL_cuStreamSynchronize = 28,
    WB_CALL_cuStreamQuery = 29,
    WB_CALL_cuEventCreate = 30,
    WB_CALL_cuEventRecord = 31,
    WB_CALL_cuEventSynchronize = 32,
    WB_CALL_cuEventQuery = 33,
    WB_CALL_cuEventDestroy_v2 = 34,
    WB_CALL_cuLaunchKernel = 35,
    WB_CALL_cuModuleLoadData = 36,
    WB_CALL_cuModuleGetFunction = 37,
    WB_CALL_cuModuleUnload = 38,
    WB_CALL_cuMemAllocHost_v2 = 39,
    WB_CALL_cuMemAllocAsync = 40,
    WB_CALL_cuMemFreeAsync = 41,
    WB_CALL_cuStreamWaitEvent = 42,
    WB_CALL_cuCtxPushCurrent_v2 = 43,
    WB_CALL_cuCtxPopCurrent_v2 = 44,
    WB_CALL_cuMemcpy = 45,
    WB_CALL_cuMemcpyAsync = 46,
    WB_CALL_cuMemsetD8Async = 47,
    WB_CALL_cuDevicePrimaryCtxRelease_v2 = 48,
    WB_CALL_cuLaunchCooperativeKernel = 49,
    WB_CALL_cuGraphLaunch = 50,
    WB_CALL_cuMemHostGetDevicePointer_v2 = 51,
    WB_CALL_cuPointerGetAttribute = 52,
    WB_CALL_cuDeviceTotalMem_v2 = 53,
    WB_CALL_cuMemPoolCreate = 54,
    WB_CALL_cuMemPoolDestroy = 55,
    WB_CALL_cuMemPoolSetAttribute = 56,
    WB_CALL_cuMemAllocFromPoolAsync = 57,
};

/* Arguments of a call; unused fields 0. Same layout as the Rust `Args` (48 bytes). */
typedef struct wb_args {
    uint64_t bytes;        /* size in bytes */
    uint64_t ptr;          /* first pointer (destination / device pointer) */
    uint64_t ptr2;         /* second pointer (source of a copy) */
    uint64_t stream;       /* CUstream handle, 0 = default stream */
    uint32_t chunk;        /* chunk index in a chunked transfer */
    uint32_t chunk_count;  /* number of chunks */
    uint32_t tensor_first; /* first tensor of the range */
    uint32_t tensor_count; /* number of tensors */
} wb_args;

/* Open the process-global ring at `path` (created, or replaced atomically; mode 0600).
 * Returns 0 on success, 1 if a ring is already open (unchanged), -1 on error. */
int wedge_breadcrumb_open(const char *path);

/* Open the ring named by WEDGE_CAPTURE_RING (a file) or WEDGE_CAPTURE_RING_DIR (a directory:
 * file <pid>-<starttime>.ring); WEDGE_CAPTURE_RING_SLOTS sets the slot count (power of two),
 * WEDGE_CAPTURE_RING_LANES the lane count, WEDGE_CAPTURE_RING_CLOCK counter|monotonic|coarse.
 * Returns 0 on success, 1 if already open, 2 if neither variable is set, -1 on error. */
int wedge_breadcrumb_open_from_env(void);

/* 1 if the process-global ring is open, else 0. */
int wedge_breadcrumb_is_open(void);

/* Record that `call` is about to be made. `args` and `label` may be NULL.
 * Returns a token for wedge_breadcrumb_exit, or WB_TOKEN_NONE if no ring is open. */
uint64_t wedge_breadcrumb_enter(uint16_t call, const wb_args *args, const char *label);

/* Record that the call of `token` returned `result` (e.g. the CUresult). */
void wedge_breadcrumb_exit(uint64_t token, int64_t result);

/* Leave a fail-soft status in the ring header (e.g. why instrumentation is degraded); NULL
 * clears it. At most 248 bytes are kept. Returns 0, or -1 if no ring is open. Takes a lock: not
 * for the record path. */
int wedge_breadcrumb_set_status(const char *message);
int wedge_breadcrumb_set_status_code(int32_t code, const char *message);

#ifdef __cplusplus
}
#endif

#endif /* WEDGE_BREADCRUMB_H */
