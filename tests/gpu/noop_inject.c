// Minimal CUDA injection libraries (CUDA_INJECTION64_PATH) to find which step of using CUPTI makes another
// process's nvidia-smi wait while this one runs a long UVM operation (issue 42; extends
// ../shared/gpu-probes/noop_inject.c). libcupti is opened with dlopen, so `empty` never loads it.
// NOOP_MODE: empty (InitializeInjection does nothing), load (dlopen libcupti, no CUPTI call), version
// (cuptiGetVersion only), none (cuptiSubscribe, nothing enabled), unsub (subscribe, unsubscribe, cuptiFinalize),
// domain (a no-op callback on the whole DRIVER_API domain). NOOP_CUPTI: the libcupti path.
// Build: gcc -shared -fPIC -o noop_inject.so noop_inject.c -ldl
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef int (*subscribe_fn)(void **, void (*)(void *, int, unsigned, const void *), void *);
typedef int (*enable_domain_fn)(unsigned, void *, int);
typedef int (*unsubscribe_fn)(void *);
typedef int (*finalize_fn)(void);
typedef int (*version_fn)(unsigned *);
static void cb(void *ud, int domain, unsigned id, const void *info) { (void)ud; (void)domain; (void)id; (void)info; }
int InitializeInjection(void) {
  const char *mode = getenv("NOOP_MODE"), *path = getenv("NOOP_CUPTI");
  if (!mode) mode = "domain";
  if (!strcmp(mode, "empty")) { fprintf(stderr, "noop_inject: mode empty\n"); return 1; }
  void *lib = dlopen(path ? path : "libcupti.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) { fprintf(stderr, "noop_inject: %s\n", dlerror()); return 1; }
  int rc = 0;
  if (!strcmp(mode, "version")) {
    unsigned v = 0; rc = ((version_fn)dlsym(lib, "cuptiGetVersion"))(&v);
  } else if (strcmp(mode, "load")) {
    void *sub = 0;
    rc = ((subscribe_fn)dlsym(lib, "cuptiSubscribe"))(&sub, cb, 0);
    if (!rc && !strcmp(mode, "domain")) rc = ((enable_domain_fn)dlsym(lib, "cuptiEnableDomain"))(1, sub, 1);
    if (!rc && !strcmp(mode, "unsub")) {
      rc = ((unsubscribe_fn)dlsym(lib, "cuptiUnsubscribe"))(sub);
      rc = rc * 1000 + ((finalize_fn)dlsym(lib, "cuptiFinalize"))();
    }
  }
  fprintf(stderr, "noop_inject: mode %s rc %d\n", mode, rc);
  return 1;
}
