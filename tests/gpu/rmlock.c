// Session 3 probe, run 2: does a large pin in one process (A) hold NVIDIA RM locks so that another process's (B)
// RM-heavy driver calls sit in D inside NVIDIA ioctls?  Legitimate calls only: no harm to the GPU.
//   rmA register GIB    cuMemHostRegister of GIB GiB of untouched anonymous memory (pins, then RM os descriptor)
//   rmA hostalloc GIB   cuMemHostAlloc of GIB GiB (RM allocates and maps the pages itself)
//   rmB hammer N STOPFILE MAXSEC   N threads loop RM-heavy calls until STOPFILE exists; every call is timed
// Times are CLOCK_MONOTONIC seconds (the clock of capture's monotonic_ns), so the logs line up with the samples.
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
static CUcontext ctx; static const char *stopfile; static double deadline;
enum { ALLOC, FREE, HALLOC, HFREE, HREG, HUNREG, GETINFO, SCREATE, SDESTROY, SYNC, NCALL };
static const char *nm[NCALL] = {"cuMemAlloc(32MiB)", "cuMemFree", "cuMemHostAlloc(1MiB)", "cuMemFreeHost",
  "cuMemHostRegister(1MiB)", "cuMemHostUnregister", "cuMemGetInfo", "cuStreamCreate", "cuStreamDestroy",
  "cuCtxSynchronize"};
#define T(i, e) do { double a_ = now(); CUresult r_ = (e); double d_ = now() - a_; n[i]++; \
  if (d_ > mx[i]) { mx[i] = d_; at[i] = a_; } \
  if (d_ > 0.1) fprintf(stderr, "SLOW tid %ld %s %.3f s start %.3f end %.3f rc %d\n", tid, nm[i], d_, a_, a_ + d_, r_); \
  } while (0)
static void *hammer(void *arg) {
  (void)arg; long tid = syscall(SYS_gettid); double mx[NCALL] = {0}, at[NCALL] = {0}; long n[NCALL] = {0};
  cuCtxSetCurrent(ctx);
  void *hb = aligned_alloc(4096, 1 << 20); memset(hb, 0, 1 << 20);
  while (now() < deadline && access(stopfile, F_OK) != 0) {
    CUdeviceptr d = 0; void *h = NULL; CUstream s = NULL; size_t fr, tot;
    T(ALLOC, cuMemAlloc(&d, 32 << 20)); if (d) T(FREE, cuMemFree(d));
    T(HALLOC, cuMemHostAlloc(&h, 1 << 20, 0)); if (h) T(HFREE, cuMemFreeHost(h));
    T(HREG, cuMemHostRegister(hb, 1 << 20, 0)); T(HUNREG, cuMemHostUnregister(hb));
    T(GETINFO, cuMemGetInfo(&fr, &tot));
    T(SCREATE, cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)); if (s) T(SDESTROY, cuStreamDestroy(s));
    T(SYNC, cuCtxSynchronize());
  }
  flockfile(stderr); fprintf(stderr, "THREAD %ld", tid);
  for (int i = 0; i < NCALL; i++) fprintf(stderr, " | %s n=%ld max=%.3fs@%.3f", nm[i], n[i], mx[i], at[i]);
  fprintf(stderr, "\n"); funlockfile(stderr);
  return NULL;
}
static void *reg_one(void *arg) {
  size_t len = *(size_t *)arg; long tid = syscall(SYS_gettid); cuCtxSetCurrent(ctx);
  char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (buf == MAP_FAILED) { perror("mmap"); return NULL; }
  double a = now(); CUresult r = cuMemHostRegister(buf, len, 0); double b = now();
  fprintf(stderr, "A tid %ld cuMemHostRegister %zu GiB -> %d start %.3f end %.3f (%.3f s)\n", tid, len >> 30, r, a, b, b - a);
  a = now(); r = cuMemHostUnregister(buf); b = now();
  fprintf(stderr, "A tid %ld cuMemHostUnregister -> %d start %.3f end %.3f (%.3f s)\n", tid, r, a, b, b - a);
  munmap(buf, len); return NULL;
}
static void *ctx_loop(void *arg) {
  CUdevice dev = *(CUdevice *)arg; long tid = syscall(SYS_gettid); double mx = 0; long n = 0;
  while (now() < deadline) {
    CUcontext c; double a = now(); CUresult r =
#if CUDA_VERSION >= 13000
      cuCtxCreate(&c, NULL, 0, dev);
#else
      cuCtxCreate(&c, 0, dev);
#endif
    double d = now() - a;
    if (r == CUDA_SUCCESS) cuCtxDestroy(c);
    n++; if (d > mx) mx = d;
  }
  fprintf(stderr, "A tid %ld cuCtxCreate n=%ld max %.3f s\n", tid, n, mx);
  return NULL;
}
int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: register|hostalloc GIB | hammer N STOPFILE MAXSEC\n"); return 2; }
  CUdevice dev;
  double t = now();
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev)) { fprintf(stderr, "cuda init failed\n"); return 1; }
  cuCtxSetCurrent(ctx);
  fprintf(stderr, "%s pid %d: context in %.3f s (now %.3f)\n", argv[1], getpid(), now() - t, now());
  if (!strcmp(argv[1], "both")) {
    /* both GIB N STOPFILE: N hammer threads and, 3 s later, this thread pins GIB GiB (one process) */
    size_t blen = (size_t)atoi(argv[2]) << 30; int nt = atoi(argv[3]); stopfile = argv[4]; deadline = now() + 120;
    pthread_t th[64]; if (nt > 64) nt = 64;
    for (int i = 0; i < nt; i++) pthread_create(&th[i], NULL, hammer, NULL);
    sleep(3);
    char *buf = mmap(NULL, blen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    double a = now(); CUresult r = cuMemHostRegister(buf, blen, 0); double b = now();
    fprintf(stderr, "A tid %ld cuMemHostRegister %s GiB -> %d start %.3f end %.3f (%.3f s)\n", (long)syscall(SYS_gettid), argv[2], r, a, b, b - a);
    a = now(); r = cuMemHostUnregister(buf); b = now();
    fprintf(stderr, "A cuMemHostUnregister -> %d (%.3f s)\n", r, b - a);
    munmap(buf, blen); sleep(1);
    FILE *f = fopen(stopfile, "w"); if (f) fclose(f);
    for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
    return 0;
  }
  if (!strcmp(argv[1], "hammer")) {
    int nt = atoi(argv[2]); stopfile = argv[3]; deadline = now() + (argc > 4 ? atof(argv[4]) : 60);
    pthread_t th[64]; if (nt > 64) nt = 64;
    for (int i = 0; i < nt; i++) pthread_create(&th[i], NULL, hammer, NULL);
    for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
    fprintf(stderr, "hammer done at %.3f\n", now()); return 0;
  }
  size_t len = (size_t)atoi(argv[2]) << 30; CUresult r; double a, b;
  if (!strcmp(argv[1], "register")) {
    char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (buf == MAP_FAILED) { perror("mmap"); return 1; }
    a = now(); fprintf(stderr, "A cuMemHostRegister %s GiB start %.3f\n", argv[2], a);
    r = cuMemHostRegister(buf, len, 0); b = now();
    fprintf(stderr, "A cuMemHostRegister -> %d end %.3f (%.3f s)\n", r, b, b - a);
    sleep(1); a = now(); r = cuMemHostUnregister(buf); b = now();
    fprintf(stderr, "A cuMemHostUnregister -> %d start %.3f end %.3f (%.3f s)\n", r, a, b, b - a);
    a = now(); munmap(buf, len); fprintf(stderr, "A munmap %.3f s\n", now() - a);
  } else if (!strcmp(argv[1], "hostalloc")) {
    void *p = NULL;
    a = now(); fprintf(stderr, "A cuMemHostAlloc %s GiB start %.3f\n", argv[2], a);
    r = cuMemHostAlloc(&p, len, 0); b = now();
    fprintf(stderr, "A cuMemHostAlloc -> %d end %.3f (%.3f s)\n", r, b, b - a);
    sleep(1);
    if (p) { a = now(); r = cuMemFreeHost(p); b = now(); fprintf(stderr, "A cuMemFreeHost -> %d start %.3f end %.3f (%.3f s)\n", r, a, b, b - a); }
  } else if (!strcmp(argv[1], "devalloc")) {
    CUdeviceptr d = 0;
    a = now(); r = cuMemAlloc(&d, len); b = now();
    fprintf(stderr, "A cuMemAlloc %s GiB -> %d start %.3f end %.3f (%.3f s)\n", argv[2], r, a, b, b - a);
    if (d) {
      a = now(); r = cuMemsetD8(d, 0, len); b = now();
      fprintf(stderr, "A cuMemsetD8 -> %d start %.3f end %.3f (%.3f s)\n", r, a, b, b - a);
      a = now(); r = cuMemFree(d); b = now();
      fprintf(stderr, "A cuMemFree -> %d start %.3f end %.3f (%.3f s)\n", r, a, b, b - a);
    }
  } else if (!strcmp(argv[1], "multireg")) {
    /* argv[2] GiB per thread, argv[3] threads: parallel pins of untouched memory */
    int k = argc > 3 ? atoi(argv[3]) : 4; if (k > 16) k = 16;
    pthread_t th[16]; static size_t each; each = len;
    for (int i = 0; i < k; i++) pthread_create(&th[i], NULL, reg_one, &each);
    for (int i = 0; i < k; i++) pthread_join(th[i], NULL);
  } else if (!strcmp(argv[1], "ctxstorm")) {
    /* argv[2] threads, each creating and destroying contexts for argv[3] seconds */
    int k = atoi(argv[2]); if (k > 32) k = 32; deadline = now() + (argc > 3 ? atof(argv[3]) : 10);
    pthread_t th[32];
    for (int i = 0; i < k; i++) pthread_create(&th[i], NULL, ctx_loop, &dev);
    for (int i = 0; i < k; i++) pthread_join(th[i], NULL);
  } else { fprintf(stderr, "unknown mode\n"); return 2; }
  return 0;
}
