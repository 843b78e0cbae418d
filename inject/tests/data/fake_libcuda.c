/* A stand-in libcuda.so.1 for testing the driver-API interposer without a GPU (inject/cdylib/tests/interpose.rs).
 * It exports a few driver functions with the cuda.h signatures and a cuGetProcAddress that resolves names the
 * way the driver does: by version (cuMemAlloc -> cuMemAlloc_v2 from 3020), by stream flavour
 * (CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM -> the _ptsz variant), one function for several versions
 * (cuCtxSynchronize), and a function the interposer's table does not know (cuWedgeTestUnknown). Every call
 * prints its arguments, so the test sees what reached the real function. Built with -Bsymbolic, like a driver
 * whose internal references are its own. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef struct { int type; int id; } CUmemLocation;

#define SAY(...) (printf(__VA_ARGS__), printf("\n"), fflush(stdout))

CUresult cuInit(unsigned flags) { SAY("real cuInit %u", flags); return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuCtxGetCurrent(void **ctx) { *ctx = (void *)0xc7c; return 0; }
CUresult cuMemAlloc(uint32_t *dptr, unsigned bytes) { SAY("real cuMemAlloc(v1) %u", bytes); *dptr = 0xd0; return 0; }
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
  SAY("real cuMemAlloc_v2 %zu", bytes);
  *dptr = 0xd000;
  return 0;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *stream) {
  SAY("real cuMemcpyHtoDAsync_v2 %#lx %p %zu %p", (unsigned long)dst, src, n, stream);
  return 0;
}
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, void *stream) {
  SAY("real cuMemcpyHtoDAsync_v2_ptsz %#lx %p %zu %p", (unsigned long)dst, src, n, stream);
  return 0;
}
static CUresult launch(const char *which, void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
  SAY("real %s %p %u %u %u %u %u %u %u %p %p %p", which, f, gx, gy, gz, bx, by, bz, shared, stream, (void *)params,
      (void *)extra);
  return gx == 120 ? 2 : 0; /* CUDA_ERROR_OUT_OF_MEMORY for the test's failing launch */
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
  return launch("cuLaunchKernel", f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
}
CUresult cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned shared, void *stream, void **params, void **extra) {
  return launch("cuLaunchKernel_ptsz", f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
}
CUresult cuFuncGetName(const char **name, void *f) {
  if (f != (void *)0xf00) return 400; /* CUDA_ERROR_INVALID_HANDLE */
  *name = "_Z4spinPi";
  return 0;
}
CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, void *stream) {
  SAY("real cuMemPrefetchAsync_v2 %#lx %zu loc=%d/%d %u %p", (unsigned long)p, n, loc.type, loc.id, flags, stream);
  return 0;
}
CUresult cuCtxSynchronize(void) {
  SAY("real cuCtxSynchronize");
  if (getenv("FAKE_CUDA_KILL_IN_SYNC")) raise(SIGKILL); /* a call that never returns: its enter record stays in flight */
  return 0;
}
CUresult cuWedgeTestUnknown(int x) { SAY("real cuWedgeTestUnknown %d", x); return 0; }

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags, int *status) {
  int per_thread = (flags & 2) != 0;
  void *found = 0;
  if (!strcmp(symbol, "cuInit")) found = (void *)cuInit;
  else if (!strcmp(symbol, "cuDriverGetVersion")) found = (void *)cuDriverGetVersion;
  else if (!strcmp(symbol, "cuCtxGetCurrent")) found = (void *)cuCtxGetCurrent;
  else if (!strcmp(symbol, "cuMemAlloc")) found = version >= 3020 ? (void *)cuMemAlloc_v2 : (void *)cuMemAlloc;
  else if (!strcmp(symbol, "cuMemcpyHtoDAsync"))
    found = per_thread ? (void *)cuMemcpyHtoDAsync_v2_ptsz : (void *)cuMemcpyHtoDAsync_v2;
  else if (!strcmp(symbol, "cuLaunchKernel")) found = per_thread ? (void *)cuLaunchKernel_ptsz : (void *)cuLaunchKernel;
  else if (!strcmp(symbol, "cuMemPrefetchAsync")) found = (void *)cuMemPrefetchAsync_v2;
  else if (!strcmp(symbol, "cuCtxSynchronize")) found = (void *)cuCtxSynchronize; /* every version */
  else if (!strcmp(symbol, "cuFuncGetName")) found = (void *)cuFuncGetName;
  else if (!strcmp(symbol, "cuGetProcAddress")) found = (void *)cuGetProcAddress_v2;
  else if (!strcmp(symbol, "cuWedgeTestUnknown")) found = (void *)cuWedgeTestUnknown;
  *pfn = found;
  if (status) *status = found ? 0 : 1;
  return found ? 0 : 500;
}
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, 0);
}
