/* Two libraries built from this file (-DWHICH=1, -DWHICH=2) that both define cuWedgeProbe, linked in that
 * order: lib 1's next_probe() asks for dlsym(RTLD_NEXT, "cuWedgeProbe") and must get lib 2's, whoever
 * interposes dlsym (inject/cdylib/tests/interpose.rs). */
#define _GNU_SOURCE
#include <dlfcn.h>
int cuWedgeProbe(void) { return WHICH; }
#if WHICH == 1
int next_probe(void) {
  int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "cuWedgeProbe");
  return next ? next() : -1;
}
#endif
