// Launch-heavy loop for the per-call overhead of the breadcrumb paths (issue 42, BENCHMARKS.md "Driver-API
// interposition"). `launchloop rt N`: N empty kernels through the runtime (<<<>>>: cuLaunchKernel reached through
// cuGetProcAddress); `launchloop drv N`: N cuLaunchKernel calls straight from this program (linked with -lcuda).
// `launchloop qrt N` / `qdrv N`: N cudaStreamQuery / cuStreamQuery of an idle stream (a recorded driver call that
// does not queue GPU work: the per-call cost alone). Prints one JSON line with the mean wall time per call. Build: nvcc -O2 -o launchloop launchloop.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
__global__ void empty_kernel() {}
static double now() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "rt";
  long n = argc > 2 ? atol(argv[2]) : 200000;
  cudaFree(0);
  CUfunction f;
  if (cudaGetFuncBySymbol(&f, (const void *)empty_kernel) != cudaSuccess) { printf("no function\n"); return 1; }
  int drv = !strcmp(mode, "drv");
  if (mode[0] == 'q') {
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    int query_drv = !strcmp(mode, "qdrv");
    double t = now();
    for (long i = 0; i < n; i++) {
      if (query_drv) cuStreamQuery((CUstream)stream);
      else cudaStreamQuery(stream);
    }
    double dq = now() - t;
    printf("{\"mode\": \"%s\", \"n\": %ld, \"ns_per_launch\": %.1f, \"error\": \"%s\"}\n", mode, n, dq / n * 1e9,
           cudaGetErrorName(cudaGetLastError()));
    return 0;
  }
  for (int i = 0; i < 2000; i++) empty_kernel<<<1, 1>>>();
  cudaDeviceSynchronize();
  double t0 = now();
  if (drv) {
    for (long i = 0; i < n; i++) cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);
    cuCtxSynchronize();
  } else {
    for (long i = 0; i < n; i++) empty_kernel<<<1, 1>>>();
    cudaDeviceSynchronize();
  }
  double dt = now() - t0;
  printf("{\"mode\": \"%s\", \"n\": %ld, \"ns_per_launch\": %.1f, \"error\": \"%s\"}\n", mode, n, dt / n * 1e9,
         cudaGetErrorName(cudaGetLastError()));
  return 0;
}
