// Diagnostic for the pinned strategy (BENCHMARKS.md, runs 12-14): where does a pinned 4 GiB
// upload lose against one pinned copy? The same pipeline shape as uploader::pinned, in C++
// against the driver API, so each factor can be switched on and off: the copy chain alone,
// copies while other threads pack, packing alone, packer counts, fresh vs reused vs pooled
// device memory, and cuMemHostRegister of untouched vs touched pages.
//
// Build and run on the GPU machine (CUDA toolkit needed; not part of the cargo build):
//   nvcc -O2 -std=c++17 -o /tmp/pinned_probe uploader/diag/pinned_probe.cu -lcuda -lpthread
//   /tmp/pinned_probe 9                                        # everything, median of 9
//   PROBE_VARIANTS=1 PROBE_ONLY_VARIANTS=1 /tmp/pinned_probe 9  # device-memory variants only
#include <cuda.h>
#include <sys/mman.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <atomic>
#include <thread>
#include <vector>
#include <algorithm>
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *s_; cuGetErrorName(r_, &s_); fprintf(stderr, "%s:%d %s -> %s\n", __FILE__, __LINE__, #x, s_); exit(1); } } while (0)
#define MiB (1ul << 20)
static double now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static const size_t TOTAL = 4096 * MiB, TSIZE = 256 << 10, NT = TOTAL / TSIZE;
static char **tensors;
static CUdeviceptr dev;
static double ceiling_s;
static int yield_idle;

static char *map_huge(size_t n) {
  char *p = (char *)mmap(0, n + 2 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  p = (char *)(((unsigned long)p + 2 * MiB - 1) & ~(2 * MiB - 1));
  madvise(p, n, MADV_HUGEPAGE);
  return p;
}
static double median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
static void report(const char *name, std::vector<double> v) {
  double m = median(v);
  printf("%-60s %8.2f ms %6.2f GB/s %6.1f%% (min %.2f)\n", name, m * 1e3, TOTAL / m / 1e9,
         ceiling_s > 0 ? 100 * ceiling_s / m : 100.0, *std::min_element(v.begin(), v.end()) * 1e3);
  fflush(stdout);
}

// Hammer threads: pack-like memcpy from the source tensors into a private 4 MiB buffer.
static std::atomic<bool> hammer_stop;
static void hammer(int id) {
  char *d = (char *)malloc(4 * MiB);
  size_t i = id * 997;
  while (!hammer_stop.load(std::memory_order_relaxed)) {
    for (int k = 0; k < 16; k++) memcpy(d + k * TSIZE, tensors[(i++) % NT], TSIZE);
  }
  free(d);
}

struct Ring { char *base; size_t slice; int n; bool reg; };
static Ring make_ring(size_t slice, int n, bool reg) {
  Ring r{nullptr, slice, n, reg};
  if (reg) {
    r.base = map_huge(slice * n);
    memset(r.base, 1, slice * n);
    CK(cuMemHostRegister(r.base, slice * n, 0));
  } else {
    CK(cuMemHostAlloc((void **)&r.base, slice * n, 0));
    memset(r.base, 1, slice * n);
  }
  return r;
}
static void free_ring(Ring r) {
  if (r.reg) { CK(cuMemHostUnregister(r.base)); munmap(r.base, r.slice * r.n); } else CK(cuMemFreeHost(r.base));
}

// Copy chain only: slices through the ring, event per buffer, nstreams streams alternating.
static double chain(Ring &r, int nstreams, CUevent *ev, CUstream *st) {
  size_t slices = TOTAL / r.slice;
  double t0 = now();
  for (size_t s = 0; s < slices; s++) {
    int b = s % r.n;
    if (s >= (size_t)r.n) CK(cuEventSynchronize(ev[b]));
    CUstream x = st[s % nstreams];
    CK(cuMemcpyHtoDAsync(dev + s * r.slice, r.base + b * r.slice, r.slice, x));
    CK(cuEventRecord(ev[b], x));
  }
  for (int i = 0; i < nstreams; i++) CK(cuStreamSynchronize(st[i]));
  return now() - t0;
}

// Full pipeline like the Rust one (simplified): packers claim 256 KiB pieces, submitter copies.
struct Pipe {
  Ring *r; size_t slices, pps; std::atomic<size_t> next, released; std::vector<std::atomic<unsigned>> filled;
  int prefetch;
  Pipe(Ring *r_) : r(r_), slices(TOTAL / r_->slice), pps(r_->slice / TSIZE), next(0), released(0), filled(TOTAL / r_->slice) {}
};
static void packer(Pipe *p, int cpu) {
  if (cpu >= 0) { cpu_set_t set; CPU_ZERO(&set); CPU_SET(cpu, &set); sched_setaffinity(0, sizeof set, &set); }
  size_t total = p->slices * p->pps;
  for (;;) {
    size_t k = p->next.fetch_add(1, std::memory_order_relaxed);
    if (k >= total) return;
    size_t s = k / p->pps;
    { unsigned spins = 0; while (s >= p->released.load(std::memory_order_acquire) + p->r->n) { if (yield_idle && ++spins > 4096) sched_yield(); else __builtin_ia32_pause(); } }
    char *d = p->r->base + (s % p->r->n) * p->r->slice + (k % p->pps) * TSIZE;
    const char *src = tensors[k];
    if (p->prefetch) {
      for (size_t o = 0; o < TSIZE; o += 4096) {
        for (size_t l = 0; l < 4096 && o + 4096 + l < TSIZE; l += 64 * 8) __builtin_prefetch(src + o + 4096 + l);
        memcpy(d + o, src + o, 4096);
      }
    } else memcpy(d, src, TSIZE);
    p->filled[s].fetch_add(1, std::memory_order_release);
  }
}

// fresh: 0 reuse dev, 1 cuMemAlloc+cuMemFree timed, 2 cuMemAlloc untimed, 3 pool alloc async timed
static double pipeline(Ring &r, int threads, int prefetch, bool pin, CUevent *ev, CUstream st, int fresh = 0) {
  Pipe p(&r);
  CUdeviceptr keep = dev;
  p.prefetch = prefetch;
  for (auto &f : p.filled) f.store(0);
  if (fresh == 2) CK(cuMemAlloc(&dev, TOTAL));
  double t0 = now();
  if (fresh == 1) CK(cuMemAlloc(&dev, TOTAL));
  if (fresh == 3) CK(cuMemAllocAsync(&dev, TOTAL, st));
  std::vector<std::thread> ws;
  for (int i = 0; i < threads; i++) ws.emplace_back(packer, &p, pin ? i + 1 : -1);
  std::vector<size_t> inflight;
  size_t head = 0;
  for (size_t s = 0; s < p.slices; s++) {
    { unsigned spins = 0; while (p.filled[s].load(std::memory_order_acquire) != p.pps) { if (yield_idle && ++spins > 4096) sched_yield(); else __builtin_ia32_pause(); } }
    int b = s % r.n;
    CK(cuMemcpyHtoDAsync(dev + s * r.slice, r.base + b * r.slice, r.slice, st));
    CK(cuEventRecord(ev[b], st));
    inflight.push_back(s);
    while (head < inflight.size()) {
      size_t o = inflight[head];
      if (inflight.size() - head == (size_t)r.n) CK(cuEventSynchronize(ev[o % r.n]));
      else if (cuEventQuery(ev[o % r.n]) != CUDA_SUCCESS) break;
      head++;
      p.released.store(o + 1, std::memory_order_release);
    }
  }
  CK(cuStreamSynchronize(st));
  double t = now() - t0;
  for (auto &w : ws) w.join();
  if (fresh == 1 || fresh == 2) { CK(cuMemFree(dev)); dev = keep; }
  if (fresh == 3) { CK(cuMemFreeAsync(dev, st)); CK(cuStreamSynchronize(st)); dev = keep; }
  return t;
}
static double pack_only(Ring &r, int threads) {
  Pipe p(&r);
  p.prefetch = 0;
  p.released.store(1ul << 40);
  double t0 = now();
  std::vector<std::thread> ws;
  for (int i = 0; i < threads; i++) ws.emplace_back(packer, &p, -1);
  for (auto &w : ws) w.join();
  return now() - t0;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 7;
  CK(cuInit(0));
  CUdevice d; CK(cuDeviceGet(&d, 0));
  CUcontext ctx; CK(cuDevicePrimaryCtxRetain(&ctx, d)); CK(cuCtxSetCurrent(ctx));
  tensors = (char **)malloc(NT * sizeof(char *));
  for (size_t i = 0; i < NT; i++) { tensors[i] = (char *)malloc(TSIZE); memset(tensors[i], (int)i, TSIZE); }
  CK(cuMemAlloc(&dev, TOTAL));
  CUstream st[2]; CK(cuStreamCreate(&st[0], CU_STREAM_NON_BLOCKING)); CK(cuStreamCreate(&st[1], CU_STREAM_NON_BLOCKING));
  CUevent ev[64]; for (auto &e : ev) CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  char *host; CK(cuMemHostAlloc((void **)&host, TOTAL, 0)); memset(host, 0x5a, TOTAL);
  {
    std::vector<double> v;
    for (int i = 0; i <= reps; i++) { double t0 = now(); CK(cuMemcpyHtoDAsync(dev, host, TOTAL, st[0])); CK(cuStreamSynchronize(st[0])); if (i) v.push_back(now() - t0); }
    ceiling_s = median(v);
    report("ceiling: one pinned copy of 4 GiB", v);
    v.clear();
    for (int i = 0; i <= reps; i++) { double t0 = now();
      CK(cuMemcpyHtoDAsync(dev, host, TOTAL / 2, st[0])); CK(cuMemcpyHtoDAsync(dev + TOTAL / 2, host + TOTAL / 2, TOTAL / 2, st[1]));
      CK(cuStreamSynchronize(st[0])); CK(cuStreamSynchronize(st[1])); if (i) v.push_back(now() - t0); }
    report("two half copies on two streams", v);
  }
  CK(cuMemFreeHost(host));
  if (!getenv("PROBE_ONLY_VARIANTS")) {
  struct { size_t slice; int n; bool reg; int streams; } chains[] = {
    {4 * MiB, 8, true, 1}, {4 * MiB, 8, false, 1}, {2 * MiB, 8, true, 1}, {8 * MiB, 8, true, 1}, {16 * MiB, 4, true, 1},
    {4 * MiB, 8, true, 2}, {2 * MiB, 8, true, 2}};
  for (auto &c : chains) {
    Ring r = make_ring(c.slice, c.n, c.reg);
    std::vector<double> v;
    for (int i = 0; i <= reps; i++) { double t = chain(r, c.streams, ev, st); if (i) v.push_back(t); }
    char name[128]; snprintf(name, sizeof name, "copy chain only %dx%zuMiB %s %d stream(s)", c.n, c.slice / MiB, c.reg ? "register" : "hostalloc", c.streams);
    report(name, v);
    free_ring(r);
  }
  // Copy chain while 8 / 12 threads hammer memory like packers do.
  for (int k : {4, 8, 12}) {
    Ring r = make_ring(4 * MiB, 8, true);
    hammer_stop = false;
    std::vector<std::thread> hs; for (int i = 0; i < k; i++) hs.emplace_back(hammer, i);
    std::vector<double> v;
    for (int i = 0; i <= reps; i++) { double t = chain(r, 1, ev, st); if (i) v.push_back(t); }
    hammer_stop = true; for (auto &h : hs) h.join();
    char name[128]; snprintf(name, sizeof name, "copy chain 8x4MiB while %d threads pack elsewhere", k);
    report(name, v);
    free_ring(r);
  }
  {
    Ring r = make_ring(4 * MiB, 8, true);
    for (int k : {8, 12}) {
      std::vector<double> v;
      for (int i = 0; i <= reps; i++) { double t = pack_only(r, k); if (i) v.push_back(t); }
      char name[128]; snprintf(name, sizeof name, "pack only (no copies) %d threads", k);
      report(name, v);
    }
    struct { int threads, prefetch; bool pin; } ps[] = {{8, 0, false}, {8, 1, false}, {8, 0, true}, {10, 0, false}, {12, 0, false}, {12, 1, false}, {14, 0, false}};
    for (int round = 0; round < 2; round++)
      for (auto &c : ps) {
        std::vector<double> v;
        for (int i = 0; i <= reps; i++) { double t = pipeline(r, c.threads, c.prefetch, c.pin, ev, st[0]); if (i) v.push_back(t); }
        char name[128]; snprintf(name, sizeof name, "C pipeline 8x4MiB %d threads%s%s (round %d)", c.threads, c.prefetch ? " prefetch" : "", c.pin ? " pinned-cpus" : "", round);
        report(name, v);
      }
    free_ring(r);
  }
  }
  if (getenv("PROBE_VARIANTS")) {
    CUmemoryPool pool; CK(cuDeviceGetDefaultMemPool(&pool, d));
    unsigned long long thr = ~0ull; CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
    Ring r = make_ring(4 * MiB, 8, true);
    for (int round = 0; round < 3; round++) {
      struct { const char *name; int threads; int fresh; } vs[] = {
        {"reused dev", 10, 0}, {"fresh alloc timed", 10, 1}, {"fresh alloc untimed", 10, 2}, {"pool alloc async", 10, 3}};
      for (auto &c : vs) {
        std::vector<double> v;
        for (int i = 0; i <= reps; i++) { double t = pipeline(r, c.threads, 0, false, ev, st[0], c.fresh); if (i) v.push_back(t); }
        char name[128]; snprintf(name, sizeof name, "V C pipeline 8x4MiBx10 %s (round %d)", c.name, round);
        report(name, v);
      }
    }
    free_ring(r);
  }
  if (!getenv("PROBE_ONLY_VARIANTS")) {
  // Registration cost: untouched vs touched, whole vs per buffer.
  for (int touched = 0; touched < 2; touched++) {
    for (int per = 0; per < 2; per++) {
      std::vector<double> v;
      for (int i = 0; i < 5; i++) {
        char *p = map_huge(32 * MiB);
        if (touched) memset(p, 1, 32 * MiB);
        double t0 = now();
        if (per) for (int b = 0; b < 8; b++) CK(cuMemHostRegister(p + b * 4 * MiB, 4 * MiB, 0));
        else CK(cuMemHostRegister(p, 32 * MiB, 0));
        v.push_back(now() - t0);
        if (per) for (int b = 0; b < 8; b++) CK(cuMemHostUnregister(p + b * 4 * MiB));
        else CK(cuMemHostUnregister(p));
        munmap(p, 32 * MiB);
      }
      printf("register 32 MiB %s %s: median %.3f ms\n", touched ? "touched" : "untouched", per ? "as 8 x 4 MiB" : "at once", median(v) * 1e3);
    }
  }
  {
    std::vector<double> v;
    for (int i = 0; i < 5; i++) { char *p = map_huge(32 * MiB); double t0 = now(); memset(p, 1, 32 * MiB); v.push_back(now() - t0); munmap(p, 32 * MiB); }
    printf("first touch of 32 MiB (one thread): median %.3f ms\n", median(v) * 1e3);
  }
  }
  return 0;
}
