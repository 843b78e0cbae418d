// Copied from ../shared/gpu-probes/uvmlock.c (issue 42 adds `populate`: only the first prefetch of GIB managed
// memory to the host, the 8-12 s UVM_MIGRATE that issue 42's nvidia-smi table was measured in, then free).
// Session 4 probe: does one big, legitimate UVM operation in thread A keep other threads of the same process in D
// for seconds inside nvidia-uvm (va_space / va_block locks) or behind the mmap_lock that A's munmap holds?
//   uvmlock free GIB NT      A: cuMemAllocManaged GIB, prefetch to the GPU, then cuMemFree (munmap of the range)
//   uvmlock migrate GIB NT   A: populate GIB managed on the CPU, prefetch to the GPU and back, twice
//   uvmlock migratemm GIB NT as migrate, but the NT threads only map and unmap 2 MiB of anonymous memory (raw mmap,
//                            which takes the mmap_lock for writing: a kernel wait behind A's UVM_MIGRATE, never
//                            behind a lock inside libcuda)
//   uvmlock exitmanaged GIB NT / exitpin GIB NT: A exits (_exit) holding GIB managed on the GPU / GIB pinned host memory:
//                            the exit path tears it down inside the driver (fd release)
// NT threads meanwhile loop small managed-memory work (GPU prefetch, CPU touch = fault, managed alloc/free, cuMemAlloc).
// Every call is timed (CLOCK_MONOTONIC); calls over 0.1 s are printed as SLOW. No GPU state is ever at risk.
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static CUcontext ctx; static CUdevice dev; static volatile int stop; static int raw_mmap_only;
enum { PFGPU, TOUCH, MALLOCM, MFREE, DALLOC, DFREE, RAWMM, NCALL };
static const char *nm[NCALL] = {"prefetch64MiB->gpu", "cpu-touch64MiB(fault)", "cuMemAllocManaged(2MiB)", "cuMemFree(managed)",
  "cuMemAlloc(32MiB)", "cuMemFree", "mmap+munmap(2MiB)"};
static CUresult prefetch(CUdeviceptr p, size_t n, int to_gpu, CUstream s) {
#if CUDA_VERSION >= 13000
  CUmemLocation l; memset(&l, 0, sizeof l);
  l.type = to_gpu ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST; l.id = to_gpu ? (int)dev : 0;
  return cuMemPrefetchAsync(p, n, l, 0, s);
#else
  return cuMemPrefetchAsync(p, n, to_gpu ? dev : CU_DEVICE_CPU, s);
#endif
}
#define T(i, e) do { double a_ = now(); CUresult r_ = (e); double d_ = now() - a_; n[i]++; if (d_ > mx[i]) mx[i] = d_; \
  if (d_ > 0.1) fprintf(stderr, "SLOW tid %ld %s %.3f s start %.3f end %.3f rc %d\n", tid, nm[i], d_, a_, a_ + d_, r_); } while (0)
static CUresult touch(char *p, size_t n) { for (size_t o = 0; o < n; o += 4096) p[o]++; return CUDA_SUCCESS; }
static CUresult map_unmap(void) {
  void *m = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  munmap(m, 2 << 20); return CUDA_SUCCESS;
}
static void *worker(void *arg) {
  (void)arg; long tid = syscall(SYS_gettid); double mx[NCALL] = {0}; long n[NCALL] = {0};
  cuCtxSetCurrent(ctx); CUstream s; cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  CUdeviceptr mb; size_t len = 64 << 20;
  if (cuMemAllocManaged(&mb, len, CU_MEM_ATTACH_GLOBAL)) { fprintf(stderr, "worker alloc failed\n"); return NULL; }
  while (!stop && raw_mmap_only) { T(RAWMM, map_unmap()); usleep(1000); }
  while (!stop) {
    T(PFGPU, (prefetch(mb, len, 1, s), cuStreamSynchronize(s)));
    T(TOUCH, touch((char *)mb, len));
    CUdeviceptr x = 0; T(MALLOCM, cuMemAllocManaged(&x, 2 << 20, CU_MEM_ATTACH_GLOBAL)); if (x) T(MFREE, cuMemFree(x));
    CUdeviceptr d = 0; T(DALLOC, cuMemAlloc(&d, 32 << 20)); if (d) T(DFREE, cuMemFree(d));
  }
  flockfile(stderr); fprintf(stderr, "THREAD %ld", tid);
  for (int i = 0; i < NCALL; i++) fprintf(stderr, " | %s n=%ld max=%.3fs", nm[i], n[i], mx[i]);
  fprintf(stderr, "\n"); funlockfile(stderr);
  cuMemFree(mb); return NULL;
}
#define A(what, e) do { double a_ = now(); CUresult r_ = (e); double b_ = now(); \
  fprintf(stderr, "A tid %ld %s -> %d start %.3f end %.3f (%.3f s)\n", (long)syscall(SYS_gettid), what, r_, a_, b_, b_ - a_); } while (0)
int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: uvmlock free|migrate GIB NT\n"); return 2; }
  size_t big = (size_t)atoi(argv[2]) << 30; int nt = atoi(argv[3]); if (nt > 32) nt = 32;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev)) { fprintf(stderr, "cuda init failed\n"); return 1; }
  cuCtxSetCurrent(ctx); CUstream s; cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  fprintf(stderr, "uvmlock %s pid %d ready %.3f\n", argv[1], getpid(), now());
  raw_mmap_only = !strcmp(argv[1], "migratemm");
  pthread_t th[32];
  for (int i = 0; i < nt; i++) pthread_create(&th[i], NULL, worker, NULL);
  sleep(3);
  CUdeviceptr p = 0;
  A("cuMemAllocManaged(big)", cuMemAllocManaged(&p, big, CU_MEM_ATTACH_GLOBAL));
  if (!strcmp(argv[1], "free")) {
    A("prefetch big->gpu", (prefetch(p, big, 1, s), cuStreamSynchronize(s)));
    sleep(2);
    A("cuMemFree(big, resident on gpu)", cuMemFree(p));
  } else if (!strcmp(argv[1], "migrate") || !strcmp(argv[1], "migratemm")) {
    A("prefetch big->cpu (populate)", (prefetch(p, big, 0, s), cuStreamSynchronize(s)));
    for (int round = 0; round < 2; round++) {
      A("prefetch big->gpu", (prefetch(p, big, 1, s), cuStreamSynchronize(s)));
      A("prefetch big->cpu", (prefetch(p, big, 0, s), cuStreamSynchronize(s)));
    }
    A("cuMemFree(big)", cuMemFree(p));
  } else if (!strcmp(argv[1], "populate")) {
    A("prefetch big->cpu (populate)", (prefetch(p, big, 0, s), cuStreamSynchronize(s)));
    A("cuMemFree(big)", cuMemFree(p));
  } else if (!strcmp(argv[1], "exitmanaged")) {
    A("prefetch big->gpu", (prefetch(p, big, 1, s), cuStreamSynchronize(s)));
    fprintf(stderr, "A exiting with %zu GiB managed resident on the GPU at %.3f\n", big >> 30, now());
    _exit(0);
  } else if (!strcmp(argv[1], "exitpin")) {
    cuMemFree(p);
    char *h = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (h == MAP_FAILED) { perror("mmap"); return 1; }
    A("cuMemHostRegister(big, populated)", cuMemHostRegister(h, big, 0));
    fprintf(stderr, "A exiting with %zu GiB pinned at %.3f\n", big >> 30, now());
    _exit(0);
  }
  if (strcmp(argv[1], "populate")) sleep(2);
  stop = 1;
  for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
  fprintf(stderr, "uvmlock done %.3f\n", now()); return 0;
}
