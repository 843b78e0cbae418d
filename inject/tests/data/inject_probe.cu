// inject_probe: a small CUDA program for checking the injection library on a GPU machine
// (docs/inject.md, "GPU verification"). It knows nothing about wedge-capture: run it with
// CUDA_INJECTION64_PATH set and read the ring afterwards.
//
//   inject_probe basic            cudaMalloc 64 MiB, 1 MiB host->device and device->host copies,
//                                 a 1024x256 kernel launch, a memset, a stream synchronize
//   inject_probe spin SECONDS     launch a kernel that spins SECONDS, then cudaDeviceSynchronize
//                                 (kill it meanwhile: the ring shows the synchronize in flight)
//   inject_probe bench N          time N calls each of cuCtxGetCurrent, cuEventQuery and
//                                 cuMemsetD8Async through the driver API; prints ns per call
//
// Build: nvcc -O2 -o inject_probe inject_probe.cu -lcuda

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK_RT(call)                                                              \
  do {                                                                              \
    cudaError_t err_ = (call);                                                      \
    if (err_ != cudaSuccess) {                                                      \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call,                  \
              cudaGetErrorString(err_));                                            \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

#define CHECK_DRV(call)                                                             \
  do {                                                                              \
    CUresult err_ = (call);                                                         \
    if (err_ != CUDA_SUCCESS) {                                                     \
      fprintf(stderr, "%s:%d %s: CUresult %d\n", __FILE__, __LINE__, #call,         \
              (int)err_);                                                           \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

__global__ void scale_kernel(float *data, size_t n, float factor) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}

__global__ void spin_kernel(unsigned long long nanoseconds, int *done) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < nanoseconds);
  *done = 1;
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int basic(void) {
  const size_t alloc_bytes = 64u << 20;
  const size_t copy_bytes = 1u << 20;
  float *device = NULL;
  CHECK_RT(cudaMalloc((void **)&device, alloc_bytes));
  float *host = (float *)malloc(copy_bytes);
  for (size_t i = 0; i < copy_bytes / sizeof(float); i++) host[i] = (float)i;
  CHECK_RT(cudaMemcpy(device, host, copy_bytes, cudaMemcpyHostToDevice));
  scale_kernel<<<1024, 256>>>(device, copy_bytes / sizeof(float), 2.0f);
  CHECK_RT(cudaGetLastError());
  CHECK_RT(cudaMemset(device, 0, 4096));
  cudaStream_t stream;
  CHECK_RT(cudaStreamCreate(&stream));
  CHECK_RT(cudaMemcpyAsync(host, device, copy_bytes, cudaMemcpyDeviceToHost, stream));
  CHECK_RT(cudaStreamSynchronize(stream));
  CHECK_RT(cudaStreamDestroy(stream));
  CHECK_RT(cudaFree(device));
  free(host);
  printf("basic: ok (alloc %zu, copies %zu, launch 1024x256)\n", alloc_bytes, copy_bytes);
  return 0;
}

static int spin(double seconds) {
  int *done = NULL;
  CHECK_RT(cudaMalloc((void **)&done, sizeof(int)));
  spin_kernel<<<1, 1>>>((unsigned long long)(seconds * 1e9), done);
  CHECK_RT(cudaGetLastError());
  printf("spin: kernel launched for %.1f s, synchronizing\n", seconds);
  fflush(stdout);
  CHECK_RT(cudaDeviceSynchronize());
  printf("spin: done\n");
  return 0;
}

static int bench(long n) {
  CHECK_DRV(cuInit(0));
  CUdevice dev;
  CHECK_DRV(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK_DRV(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_DRV(cuCtxSetCurrent(ctx));
  CUstream stream;
  CHECK_DRV(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUevent event;
  CHECK_DRV(cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  CHECK_DRV(cuEventRecord(event, stream));
  CHECK_DRV(cuStreamSynchronize(stream));
  CUdeviceptr buffer;
  CHECK_DRV(cuMemAlloc(&buffer, 4096));

  for (int round = 0; round < 2; round++) {  // round 0 warms up
    double t0 = now_ns();
    CUcontext current;
    for (long i = 0; i < n; i++) CHECK_DRV(cuCtxGetCurrent(&current));
    double t1 = now_ns();
    for (long i = 0; i < n; i++) {
      CUresult r = cuEventQuery(event);
      if (r != CUDA_SUCCESS) { fprintf(stderr, "cuEventQuery %d\n", (int)r); return 1; }
    }
    double t2 = now_ns();
    // Memsets are enqueued in batches and drained, so the queue never throttles the loop.
    long batch = 1000, memsets = n / 4;
    double enqueue = 0;
    for (long done = 0; done < memsets; done += batch) {
      double s = now_ns();
      for (long i = 0; i < batch; i++) CHECK_DRV(cuMemsetD8Async(buffer, (unsigned char)i, 64, stream));
      enqueue += now_ns() - s;
      CHECK_DRV(cuStreamSynchronize(stream));
    }
    if (round == 1) {
      printf("bench cuCtxGetCurrent %.1f ns/call (%ld calls)\n", (t1 - t0) / n, n);
      printf("bench cuEventQuery %.1f ns/call (%ld calls)\n", (t2 - t1) / n, n);
      printf("bench cuMemsetD8Async %.1f ns/call (%ld calls)\n", enqueue / memsets, memsets);
    }
  }
  CHECK_DRV(cuMemFree(buffer));
  CHECK_DRV(cuEventDestroy(event));
  CHECK_DRV(cuStreamDestroy(stream));
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "basic") == 0) return basic();
  if (argc >= 3 && strcmp(argv[1], "spin") == 0) return spin(atof(argv[2]));
  if (argc >= 3 && strcmp(argv[1], "bench") == 0) return bench(atol(argv[2]));
  fprintf(stderr, "usage: %s basic | spin SECONDS | bench N\n", argv[0]);
  return 2;
}
