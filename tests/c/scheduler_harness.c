/*
 * scheduler_harness.c: a stand-in for the MSCCL executor. It exports mscclLoadAlgo and
 * mscclUnloadAlgo (link with -rdynamic), dlopens libtacos as the executor does, and drives
 * mscclScheduler: init (twice, as the executor may), selectAlgo for allreduce, allgather
 * and reducescatter in place and out of place over several sizes and ranks, calls the
 * plugin must decline, then teardown.
 *
 * Usage: scheduler_harness LIB NRANKS expect-scheduled|expect-fallback
 *        scheduler_harness LIB NRANKS expect-any
 *        scheduler_harness LIB NRANKS expect-first BOUND_S
 * In expect-first, init and every call must return within BOUND_S seconds, and the job's
 * first call (an allreduce in place) must be scheduled, whatever the cache held: a band
 * the cache lacks is compiled at its first call. Prints LOAD/SELECT/UNLOAD lines for the
 * Rust test, then "N failures".
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "msccl_scheduler.h"

static int failures = 0;
#define CHECK(cond, ...)                  \
  do {                                    \
    if (!(cond)) {                        \
      failures++;                         \
      printf("FAIL %s: ", #cond);         \
      printf(__VA_ARGS__);                \
      printf("\n");                       \
    }                                     \
  } while (0)

#define MAX_LOADS 1024
static char loaded_path[MAX_LOADS][4096];
static int loaded_rank[MAX_LOADS];
static int unloaded[MAX_LOADS];
static int loads = 0;

/* The executor's loader: checks the file looks like an MSCCL algorithm and hands out a handle. */
ncclResult_t mscclLoadAlgo(const char* path, mscclAlgoHandle_t* handle, int rank) {
  FILE* f = fopen(path, "r");
  if (f == NULL) {
    printf("FAIL load: cannot open %s\n", path);
    failures++;
    return ncclInvalidUsage;
  }
  char head[512] = {0};
  size_t n = fread(head, 1, sizeof(head) - 1, f);
  fclose(f);
  CHECK(n > 0 && strstr(head, "<algo ") != NULL, "%s is not MSCCL XML", path);
  for (int i = 0; i < loads; i++) {
    CHECK(!(loaded_rank[i] == rank && strcmp(loaded_path[i], path) == 0),
          "%s loaded twice for rank %d", path, rank);
  }
  if (loads == MAX_LOADS) return ncclInternalError;
  snprintf(loaded_path[loads], sizeof(loaded_path[loads]), "%s", path);
  loaded_rank[loads] = rank;
  *handle = loads;
  printf("LOAD %d %d %s\n", rank, loads, path);
  loads++;
  return ncclSuccess;
}

ncclResult_t mscclUnloadAlgo(mscclAlgoHandle_t handle) {
  CHECK(handle >= 0 && handle < loads, "unknown handle %d", handle);
  if (handle >= 0 && handle < loads) {
    CHECK(!unloaded[handle], "handle %d unloaded twice", handle);
    unloaded[handle] = 1;
  }
  printf("UNLOAD %d\n", handle);
  return ncclSuccess;
}

/* Seconds on a monotonic clock. */
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Seconds the last timed call took, and the longest so far. */
static double bound_s = 0, longest_s = 0;
static int calls = 0;

/* Fails when a call took longer than the bound (where one is set). */
static void timed(const char* what, double started) {
  double took = now() - started;
  if (took > longest_s) longest_s = took;
  if (bound_s > 0) CHECK(took <= bound_s, "%s took %.3f s, over the bound of %.1f s", what, took, bound_s);
}

static const char* func_name(mscclFunc_t f) {
  switch (f) {
    case mscclFuncAllReduce: return "allreduce";
    case mscclFuncAllGather: return "allgather";
    case mscclFuncReduceScatter: return "reducescatter";
    default: return "other";
  }
}

/* One call as the executor describes it; buffers are never touched, only compared. */
static struct mscclSchedulerParam call(mscclFunc_t func, int in_place, size_t count, int rank,
                                       int nranks, ncclRedOp_t op, ncclDataType_t type) {
  struct mscclSchedulerParam p;
  memset(&p, 0, sizeof(p));
  size_t elem = 4, shift = (size_t)rank * count * elem;
  char* base = (char*)0x10000000;
  char* other = (char*)0x40000000;
  p.count = count;
  p.dataType = type;
  p.op = op;
  p.func = func;
  p.rank = rank;
  p.nRanks = nranks;
  p.root = 0;
  p.handle = -1;
  p.scheduled = false;
  p.sendBuff = base;
  p.recvBuff = other;
  if (in_place) {
    if (func == mscclFuncAllGather) p.sendBuff = base + shift, p.recvBuff = base;
    else if (func == mscclFuncReduceScatter) p.sendBuff = base, p.recvBuff = base + shift;
    else p.recvBuff = base;
  }
  return p;
}

/* One pass of calls over functions, placements, sizes and the first and last rank;
 * expect: 1 every call scheduled, 0 none, -1 no expectation. Returns how many were. */
static int pass(mscclSchedulerInterface* s, int nranks, int expect, const char* label) {
  mscclFunc_t funcs[] = {mscclFuncAllReduce, mscclFuncAllGather, mscclFuncReduceScatter};
  size_t counts[] = {(size_t)1 << 12, (size_t)1 << 16, (size_t)1 << 20};
  int scheduled = 0;
  for (int f = 0; f < 3; f++)
    for (int ip = 0; ip <= 1; ip++)
      for (int c = 0; c < 3; c++)
        for (int rank = 0; rank < nranks; rank += nranks - 1) {
          for (int again = 0; again < 2; again++) {
            struct mscclSchedulerParam p =
                call(funcs[f], ip, counts[c], rank, nranks, ncclSum, ncclFloat32);
            double started = now();
            CHECK(s->selectAlgo(&p) == ncclSuccess, "selectAlgo");
            timed("selectAlgo", started);
            calls++;
            scheduled += p.scheduled;
            printf("SELECT %s %s %d %zu %d -> %d %d\n", label, func_name(funcs[f]), ip, counts[c],
                   rank, (int)p.scheduled, p.handle);
            if (expect == 1) CHECK(p.scheduled, "%s in_place=%d count=%zu rank=%d not scheduled",
                                   func_name(funcs[f]), ip, counts[c], rank);
            if (expect == 0) CHECK(!p.scheduled, "%s %s scheduled", label, func_name(funcs[f]));
            if (p.scheduled) CHECK(p.handle >= 0 && p.handle < loads, "bad handle %d", p.handle);
          }
        }
  return scheduled;
}

int main(int argc, char** argv) {
  int first = argc == 5 && strcmp(argv[3], "expect-first") == 0;
  if (argc != 4 && !first) {
    fprintf(stderr,
            "usage: %s LIB NRANKS expect-scheduled|expect-fallback|expect-any\n"
            "       %s LIB NRANKS expect-first BOUND_S\n",
            argv[0], argv[0]);
    return 2;
  }
  int nranks = atoi(argv[2]);
  int expect = strcmp(argv[3], "expect-scheduled") == 0    ? 1
               : strcmp(argv[3], "expect-any") == 0 ? -1
                                                     : 0;
  if (first) bound_s = atof(argv[4]);
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    printf("FAIL dlopen: %s\n1 failures\n", dlerror());
    return 1;
  }
  mscclSchedulerInterface* s = (mscclSchedulerInterface*)dlsym(lib, "mscclScheduler");
  CHECK(s != NULL, "no mscclScheduler symbol");
  if (s == NULL) return 1;
  CHECK(s->name != NULL && strlen(s->name) > 0, "unnamed scheduler");
  double started = now();
  CHECK(s->init() == ncclSuccess, "init");
  timed("init", started);
  started = now();
  CHECK(s->init() == ncclSuccess, "second init");
  timed("second init", started);
  CHECK(s->selectAlgo(NULL) == ncclSuccess, "NULL param");

  int scheduled;
  if (first) {
    struct mscclSchedulerParam p =
        call(mscclFuncAllReduce, 1, (size_t)1 << 16, 0, nranks, ncclSum, ncclFloat32);
    started = now();
    CHECK(s->selectAlgo(&p) == ncclSuccess, "first selectAlgo");
    timed("first selectAlgo", started);
    calls++;
    CHECK(p.scheduled, "the first call was not scheduled");
    scheduled = p.scheduled + pass(s, nranks, -1, "first");
  } else {
    scheduled = pass(s, nranks, expect, "run");
  }
  /* Calls the plugin must leave to the executor. */
  struct mscclSchedulerParam declined[] = {
      call(mscclFuncSend, 0, 1 << 16, 0, nranks, ncclSum, ncclFloat32),
      call(mscclFuncAllToAllv, 0, 1 << 16, 0, nranks, ncclSum, ncclFloat32),
      call(mscclFuncAllReduce, 1, 1 << 16, 0, nranks, ncclAvg, ncclFloat32),
      call(mscclFuncAllReduce, 1, 1 << 16, 0, nranks, (ncclRedOp_t)77, ncclFloat32),
      call(mscclFuncAllReduce, 1, 1 << 16, 0, nranks, ncclSum, (ncclDataType_t)99),
      call(mscclFuncAllReduce, 1, 0, 0, nranks, ncclSum, ncclFloat32),
      call(mscclFuncAllReduce, 1, (1 << 16) + 1, 0, nranks, ncclSum, ncclFloat32),
      call(mscclFuncAllReduce, 1, 1 << 16, 0, nranks + 1, ncclSum, ncclFloat32),
      call(mscclFuncAllReduce, 1, 1 << 16, nranks, nranks, ncclSum, ncclFloat32),
      call((mscclFunc_t)1234, 1, 1 << 16, 0, nranks, ncclSum, ncclFloat32),
  };
  for (size_t i = 0; i < sizeof(declined) / sizeof(declined[0]); i++) {
    started = now();
    CHECK(s->selectAlgo(&declined[i]) == ncclSuccess, "selectAlgo on declined call %zu", i);
    timed("selectAlgo on a declined call", started);
    CHECK(!declined[i].scheduled, "declined call %zu was scheduled", i);
  }
  started = now();
  CHECK(s->teardown() == ncclSuccess, "teardown");
  timed("teardown", started);
  for (int i = 0; i < loads; i++) CHECK(unloaded[i], "handle %d never unloaded", i);
  printf("%d of %d calls scheduled, %d loads, longest call %.3f s\n", scheduled, calls, loads,
         longest_s);
  printf("%d failures\n", failures);
  return failures == 0 ? 0 : 1;
}
