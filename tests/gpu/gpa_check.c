// Which function does cuGetProcAddress return, per version and flags, and is it an exported libcuda symbol?
// (issue 42: the interposer maps returned addresses to wrappers). Prints one line per query with the symbol
// dladdr names at that exact address. Build: gcc -O1 -o gpa_check gpa_check.c -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
typedef int (*gpa_fn)(const char *, void **, int, uint64_t, int *);
int main(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  gpa_fn gpa = lib ? (gpa_fn)dlsym(lib, "cuGetProcAddress_v2") : 0;
  if (!gpa) { printf("no libcuda/cuGetProcAddress_v2\n"); return 1; }
  const char *names[] = {"cuInit", "cuMemAlloc", "cuMemcpyHtoDAsync", "cuLaunchKernel", "cuCtxSynchronize",
                         "cuStreamSynchronize", "cuMemPrefetchAsync", "cuGetProcAddress", "cuLibraryLoadData",
                         "cuLaunchKernelEx", "cuMemcpyAsync"};
  int versions[] = {3020, 12000, 13000};
  for (unsigned i = 0; i < sizeof names / sizeof *names; i++)
    for (unsigned v = 0; v < 3; v++)
      for (uint64_t flags = 0; flags < 3; flags++) {
        void *p = 0; int status = -1;
        int rc = gpa(names[i], &p, versions[v], flags, &status);
        Dl_info info = {0};
        int ok = p && dladdr(p, &info);
        printf("%s v%d flags%lu rc%d -> %p %s%s (%s)\n", names[i], versions[v], (unsigned long)flags, rc, p,
               ok && info.dli_sname ? info.dli_sname : "?", ok && info.dli_saddr == p ? "" : " [not an exported address]",
               ok && info.dli_fname ? info.dli_fname : "?");
      }
  return 0;
}
