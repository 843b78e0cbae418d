/* A CUDA program in miniature for the driver-API interposer's tests (inject/cdylib/tests/interpose.rs), run
 * with LD_PRELOAD=libwedge_inject.so against fake_libcuda.c. Without -DLINKED it reaches the driver as the CUDA
 * runtime and cudarc do: dlopen("libcuda.so.1"), dlsym of cuGetProcAddress_v2 and of cuMemAlloc_v2, then
 * cuGetProcAddress with versions and flags. With -DLINKED it calls the functions it was linked against
 * (-lcuda). Prints what it checks; exits non-zero when a check fails. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef struct { int type; int id; } CUmemLocation;
typedef CUresult (*gpa_fn)(const char *, void **, int, uint64_t, int *);
typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*copy_fn)(CUdeviceptr, const void *, size_t, void *);
typedef CUresult (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                              void **, void **);
typedef CUresult (*prefetch_fn)(CUdeviceptr, size_t, CUmemLocation, unsigned, void *);
typedef CUresult (*sync_fn)(void);
typedef CUresult (*ctx_fn)(void **);
typedef CUresult (*unknown_fn)(int);

int next_probe(void);
static int failed;
#define CHECK(cond, ...) do { if (!(cond)) { failed = 1; printf("CHECK FAILED: " __VA_ARGS__); printf("\n"); } } while (0)

#ifdef LINKED
CUresult cuInit(unsigned);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
                        void **);
int main(void) {
  CUdeviceptr d = 0;
  CHECK(cuInit(0) == 0, "cuInit");
  CHECK(cuMemAlloc_v2(&d, 4096) == 0 && d == 0xd000, "linked cuMemAlloc_v2 wrote %#lx", (unsigned long)d);
  CHECK(cuLaunchKernel((void *)0xf00, 7, 8, 9, 32, 2, 1, 64, (void *)0x52, (void **)0x1111, (void **)0x2222) == 0,
        "linked launch");
  printf("linked done\n");
  return failed;
}
#else
int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "runtime";
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) { printf("dlopen: %s\n", dlerror()); return 2; }
  dlerror();
  gpa_fn gpa = (gpa_fn)dlsym(lib, "cuGetProcAddress_v2");
  CHECK(gpa && dlerror() == NULL, "dlsym(cuGetProcAddress_v2) found, dlerror clean");
  CHECK(dlsym(lib, "cuNoSuchFunction") == NULL && dlerror() != NULL, "a missing symbol is NULL with an error");
  CHECK(next_probe() == 2, "RTLD_NEXT from lib 1 finds lib 2's cuWedgeProbe (got %d)", next_probe());

  void *p = 0;
  int status = 0;
  CHECK(gpa("cuInit", &p, 13000, 0, &status) == 0 && p, "gpa cuInit");
  CHECK(((init_fn)p)(0) == 0, "cuInit");
  /* cudarc's way: the versioned name straight from the handle. */
  alloc_fn alloc = (alloc_fn)dlsym(lib, "cuMemAlloc_v2");
  CUdeviceptr d = 0;
  CHECK(alloc && alloc(&d, 3ull << 30) == 0 && d == 0xd000, "dlsym'd cuMemAlloc_v2 wrote %#lx", (unsigned long)d);
  /* The runtime's way: by base name, version and stream flavour. */
  CHECK(gpa("cuMemcpyHtoDAsync", &p, 13000, 2 /* PER_THREAD_DEFAULT_STREAM */, &status) == 0, "gpa copy ptsz");
  CHECK(((copy_fn)p)(0x7f0000000000ull, (void *)0x55550000, 1 << 20, (void *)0x51) == 0, "copy");
  CHECK(gpa("cuMemcpyHtoDAsync", &p, 13000, 1 /* LEGACY_STREAM */, &status) == 0, "gpa copy legacy");
  CHECK(((copy_fn)p)(0x7f0000001000ull, (void *)0x55551000, 4096, (void *)0) == 0, "legacy copy");
  CHECK(gpa("cuLaunchKernel", &p, 13000, 2, &status) == 0, "gpa launch");
  /* Eleven arguments: five of them on the stack (x86_64). The fake fails a grid of 120 with 2. */
  CHECK(((launch_fn)p)((void *)0xf00, 120, 1, 1, 256, 1, 1, 0, (void *)0x51, (void **)0x3333, (void **)0x4444) == 2,
        "launch result 2");
  CHECK(gpa("cuMemPrefetchAsync", &p, 13000, 0, &status) == 0, "gpa prefetch");
  CUmemLocation loc = {1, 7};
  CHECK(((prefetch_fn)p)(0x7f0000000000ull, 1 << 21, loc, 0, (void *)0x51) == 0, "prefetch (struct by value)");
  CHECK(gpa("cuCtxGetCurrent", &p, 13000, 0, &status) == 0, "gpa getter");
  void *ctx = 0;
  CHECK(((ctx_fn)p)(&ctx) == 0 && ctx == (void *)0xc7c, "quiet getter");
  void *sync_old = 0, *sync_new = 0;
  CHECK(gpa("cuCtxSynchronize", &sync_old, 2000, 0, &status) == 0, "gpa sync v2000");
  CHECK(gpa("cuCtxSynchronize", &sync_new, 12000, 0, &status) == 0, "gpa sync v12000");
  CHECK(sync_old == sync_new, "one function for two versions: one wrapper");
  CHECK(gpa("cuWedgeTestUnknown", &p, 13000, 0, &status) == 0, "gpa unknown");
  CHECK(((unknown_fn)p)(42) == 0, "unknown passes through");
  CHECK(gpa("cuGetProcAddress", &p, 13000, 0, &status) == 0 && p == (void *)gpa,
        "cuGetProcAddress of itself is the same wrapper");
  fflush(stdout);
  if (!strcmp(mode, "kill")) ((sync_fn)sync_new)(); /* never returns */
  CHECK(((sync_fn)sync_new)() == 0, "sync");
  printf("runtime done\n");
  return failed;
}
#endif
