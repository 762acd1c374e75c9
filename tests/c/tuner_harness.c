/*
 * tuner_harness.c: loads libtacos the way NCCL loads a tuner plugin (dlopen, then dlsym of
 * ncclTunerPlugin_v6 .. _v2 cast to the struct layouts of include/nccl_tuner.h) and drives
 * init / getCollInfo / destroy-or-finalize of every version with cost tables shaped as NCCL
 * builds them.
 *
 * usage: tuner_harness LIB MODE RANKS NODES [nolog] [init-ms=N]
 *   MODE steer      the plugin has a topology for the communicator: check its choices
 *        untouched  it has none (rank mismatch, bad settings, too large): it must change nothing
 *        v2-off     as steer, but v2 must change nothing (NCCL_ALGO/NCCL_PROTO set)
 *   nolog           pass a NULL logger
 *   init-ms=N       every init must return within N milliseconds (wall clock)
 * The topology comes from the environment (TACOS_TOPOLOGY, NCCL_TOPO_FILE, ...).
 * Exit status 0 when every check passed; each failure is printed.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl_tuner.h"

#define NUM_ALGOS 7
#define NUM_PROTOS 3
#define GUARDS 4
#define GUARD_VALUE 12345.0f
#define MAX_CHANNELS 32
#define NUM_COLLS 5
#define SMALL ((size_t)8)
#define HUGE_SIZE ((size_t)16 << 30)

static int failures;
static int checks;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    checks++;                                                         \
    if (!(cond)) {                                                    \
      failures++;                                                     \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fprintf(stderr, "\n");                                          \
    }                                                                 \
  } while (0)

/* ---- the logger NCCL would pass ---- */

static int log_lines, log_warnings, log_misuse;

static void logger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                   const char* fmt, ...) {
  char text[4096];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof text, fmt, args);
  va_end(args);
  (void)file;
  (void)line;
  log_lines++;
  if (level == NCCL_LOG_WARN) log_warnings++;
  if (strcmp(fmt, "%s") != 0 || (flags & NCCL_TUNING) == 0) log_misuse++;
  if (getenv("HARNESS_VERBOSE")) fprintf(stderr, "[level %d] %s\n", (int)level, text);
}

/* ---- one plugin version behind one interface ---- */

typedef struct {
  int version;
  void* symbol;
} Plugin;

static ncclDebugLogger_t log_function;
static double init_bound_ms; /* 0: no bound */
static ncclNvlDomainInfo_v5_t nvl_info;
static ncclTunerConstants_v5_t constants;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void* plugin_init(Plugin p, size_t ranks, size_t nodes) {
  void* ctx = NULL;
  ncclResult_t r = ncclInternalError;
  double started = now_ms();
  switch (p.version) {
    case 2: r = ((ncclTuner_v2_t*)p.symbol)->init(ranks, nodes, log_function, &ctx); break;
    case 3: r = ((ncclTuner_v3_t*)p.symbol)->init(ranks, nodes, log_function, &ctx); break;
    case 4: r = ((ncclTuner_v4_t*)p.symbol)->init(ranks, nodes, log_function, &ctx); break;
    case 5:
      r = ((ncclTuner_v5_t*)p.symbol)->init(&ctx, 42, ranks, nodes, log_function, &nvl_info, &constants);
      break;
    case 6:
      r = ((ncclTuner_v6_t*)p.symbol)->init(&ctx, 42, ranks, nodes, log_function, &nvl_info, &constants);
      break;
  }
  double took = now_ms() - started;
  CHECK(r == ncclSuccess, "v%d init returned %d", p.version, (int)r);
  if (init_bound_ms > 0)
    CHECK(took <= init_bound_ms, "v%d init took %.0f ms, more than %.0f", p.version, took, init_bound_ms);
  return ctx;
}

/* getCollInfo of v3 to v6 on one contiguous table of numAlgo x numProto floats. */
static ncclResult_t plugin_table(Plugin p, void* ctx, int coll, size_t bytes, float* table,
                                 int num_algo, int num_proto, int* channels) {
  float** as_nccl_passes_it = (float**)table;
  switch (p.version) {
    case 3:
      return ((ncclTuner_v3_t*)p.symbol)->getCollInfo(ctx, (ncclFunc_t)coll, bytes, 1, as_nccl_passes_it,
                                                      num_algo, num_proto, channels);
    case 4:
      return ((ncclTuner_v4_t*)p.symbol)->getCollInfo(ctx, (ncclFunc_t)coll, bytes, 1, as_nccl_passes_it,
                                                      num_algo, num_proto, 0, channels);
    case 5:
      return ((ncclTuner_v5_t*)p.symbol)->getCollInfo(ctx, (ncclFunc_t)coll, bytes, 1, as_nccl_passes_it,
                                                      num_algo, num_proto, 0, channels);
    case 6:
      return ((ncclTuner_v6_t*)p.symbol)->getCollInfo(ctx, (ncclFunc_t)coll, bytes, 1, as_nccl_passes_it,
                                                      num_algo, num_proto, 0, channels);
  }
  return ncclInternalError;
}

static void plugin_finalize(Plugin p, void* ctx) {
  ncclResult_t r = ncclInternalError;
  switch (p.version) {
    case 2: r = ((ncclTuner_v2_t*)p.symbol)->destroy(ctx); break;
    case 3: r = ((ncclTuner_v3_t*)p.symbol)->destroy(ctx); break;
    case 4: r = ((ncclTuner_v4_t*)p.symbol)->destroy(ctx); break;
    case 5: r = ((ncclTuner_v5_t*)p.symbol)->finalize(ctx); break;
    case 6: r = ((ncclTuner_v6_t*)p.symbol)->finalize(ctx); break;
  }
  CHECK(r == ncclSuccess, "v%d finalize returned %d", p.version, (int)r);
}

/* ---- cost tables as NCCL builds them ---- */

/* NCCL's table for `coll`: Tree (All-Reduce only) and Ring enabled with NCCL-like costs
 * (Simple cheapest for large sizes, LL for small), everything else disabled; GUARDS floats
 * after it that nobody may touch. */
static void nccl_table(float* t, int coll, size_t bytes) {
  for (int i = 0; i < NUM_ALGOS * NUM_PROTOS; i++) t[i] = (float)NCCL_ALGO_PROTO_IGNORE;
  for (int a = NCCL_ALGO_TREE; a <= NCCL_ALGO_RING; a++) {
    if (a == NCCL_ALGO_TREE && coll != ncclFuncAllReduce) continue;
    for (int p = 0; p < NUM_PROTOS; p++) t[a * NUM_PROTOS + p] = 10.0f + (bytes > 65536 ? 3 - p : p) + a;
  }
  for (int g = 0; g < GUARDS; g++) t[NUM_ALGOS * NUM_PROTOS + g] = GUARD_VALUE;
}

static int changed_entries(const float* before, const float* after, int n, int* which) {
  int count = 0;
  for (int i = 0; i < n; i++)
    if (before[i] != after[i]) {
      count++;
      *which = i;
    }
  return count;
}

static void check_guards(const float* t, int from, const char* what) {
  for (int g = 0; g < GUARDS; g++) CHECK(t[from + g] == GUARD_VALUE, "%s: guard %d written", what, g);
}

/* One getCollInfo on an NCCL-like table; returns the entry lowered, or -1 for none. */
static int steer_once(Plugin p, void* ctx, int coll, size_t bytes, float* t, int* channels) {
  float before[NUM_ALGOS * NUM_PROTOS + GUARDS];
  memcpy(before, t, sizeof before);
  *channels = 0;
  ncclResult_t r = plugin_table(p, ctx, coll, bytes, t, NUM_ALGOS, NUM_PROTOS, channels);
  CHECK(r == ncclSuccess, "v%d coll %d %zu B returned %d", p.version, coll, bytes, (int)r);
  check_guards(t, NUM_ALGOS * NUM_PROTOS, "after the table");
  for (int i = 0; i < NUM_ALGOS * NUM_PROTOS; i++)
    if (before[i] < 0) CHECK(t[i] == before[i], "v%d coll %d: disabled entry %d became %g", p.version, coll, i, t[i]);
  CHECK(*channels >= 0 && *channels <= MAX_CHANNELS, "v%d coll %d %zu B: nChannels %d", p.version, coll, bytes,
        *channels);
  int which = -1;
  int n = changed_entries(before, t, NUM_ALGOS * NUM_PROTOS, &which);
  CHECK(n <= 1, "v%d coll %d %zu B: %d entries changed", p.version, coll, bytes, n);
  if (n == 1) CHECK(t[which] >= 0 && t[which] < before[which], "v%d: entry %d raised", p.version, which);
  return n == 1 ? which : -1;
}

/* ---- the checks ---- */

/* The communicator's rank count, as the command line gives it. */
static size_t comm_ranks;

static void check_table_versions_steer(Plugin p, void* ctx) {
  float t[NUM_ALGOS * NUM_PROTOS + GUARDS];
  int channels;
  for (int coll = 0; coll < NUM_COLLS; coll++) {
    for (int b = 0; b <= 36; b++) {
      size_t bytes = (size_t)1 << b;
      nccl_table(t, coll, bytes);
      int e = steer_once(p, ctx, coll, bytes, t, &channels);
      CHECK(e >= 0, "v%d coll %d %zu B: nothing chosen", p.version, coll, bytes);
      if (e < 0) continue;
      int algo = e / NUM_PROTOS, proto = e % NUM_PROTOS;
      CHECK(algo == NCCL_ALGO_RING || (algo == NCCL_ALGO_TREE && coll == ncclFuncAllReduce),
            "v%d coll %d: algorithm %d", p.version, coll, algo);
      if (bytes == SMALL)
        CHECK(proto == NCCL_PROTO_LL, "v%d coll %d at 8 B: protocol %d, LL has the lowest latencies", p.version,
              coll, proto);
    }
    /* Huge: bandwidth dominates; never LL, whose flag bytes halve its rate (Simple moves
     * data at the full link speed; on thousands of ranks a ring's thousands of steps can
     * make LL128's lower step latency worth its 1/16 of flag bytes), and a size that needs
     * the full injection rate never asks for fewer channels. */
    nccl_table(t, coll, HUGE_SIZE);
    int e = steer_once(p, ctx, coll, HUGE_SIZE, t, &channels);
    CHECK(e >= 0 && (e % NUM_PROTOS == NCCL_PROTO_SIMPLE || (comm_ranks > 64 && e % NUM_PROTOS == NCCL_PROTO_LL128)),
          "v%d coll %d at 16 GiB: entry %d", p.version, coll, e);
    CHECK(channels == 0, "v%d coll %d at 16 GiB: nChannels %d", p.version, coll, channels);

    /* LL disabled (as NCCL_PROTO=^LL leaves the table): the next best enabled entry. */
    nccl_table(t, coll, SMALL);
    t[NCCL_ALGO_TREE * NUM_PROTOS + NCCL_PROTO_LL] = (float)NCCL_ALGO_PROTO_IGNORE;
    t[NCCL_ALGO_RING * NUM_PROTOS + NCCL_PROTO_LL] = (float)NCCL_ALGO_PROTO_IGNORE;
    e = steer_once(p, ctx, coll, SMALL, t, &channels);
    CHECK(e >= 0 && e % NUM_PROTOS != NCCL_PROTO_LL, "v%d coll %d LL off: entry %d", p.version, coll, e);

    /* Nothing the model covers is enabled: the table stays as it is. */
    nccl_table(t, coll, SMALL);
    for (int i = 0; i < 2 * NUM_PROTOS; i++) t[i] = (float)NCCL_ALGO_PROTO_IGNORE;
    t[NCCL_ALGO_PAT * NUM_PROTOS + NCCL_PROTO_SIMPLE] = 30.0f;
    CHECK(steer_once(p, ctx, coll, SMALL, t, &channels) == -1, "v%d coll %d: changed with Tree/Ring off", p.version,
          coll);

    /* NCCL prefers NVLS, which the model does not cover: its choice stands. */
    nccl_table(t, coll, HUGE_SIZE);
    t[NCCL_ALGO_NVLS * NUM_PROTOS + NCCL_PROTO_SIMPLE] = 1.0f;
    CHECK(steer_once(p, ctx, coll, HUGE_SIZE, t, &channels) == -1, "v%d coll %d: overrode NVLS", p.version, coll);
  }

  /* A table of an older NCCL (6 algorithms): read as one 6 x 3 block, nothing after it. */
  nccl_table(t, ncclFuncAllReduce, SMALL);
  for (int i = 6 * NUM_PROTOS; i < 6 * NUM_PROTOS + GUARDS; i++) t[i] = GUARD_VALUE;
  channels = 0;
  CHECK(plugin_table(p, ctx, ncclFuncAllReduce, SMALL, t, 6, NUM_PROTOS, &channels) == ncclSuccess, "6 x 3");
  check_guards(t, 6 * NUM_PROTOS, "after a 6 x 3 table");

  /* Collectives the model does not tune, and bad shapes: success, nothing written. */
  int odd[][3] = {{ncclFuncSendRecv, NUM_ALGOS, NUM_PROTOS}, {ncclFuncRecv, NUM_ALGOS, NUM_PROTOS},
                  {99, NUM_ALGOS, NUM_PROTOS},             {ncclFuncAllReduce, 0, NUM_PROTOS},
                  {ncclFuncAllReduce, -3, NUM_PROTOS},     {ncclFuncAllReduce, NUM_ALGOS, 0}};
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
    nccl_table(t, ncclFuncAllReduce, SMALL);
    float before[NUM_ALGOS * NUM_PROTOS + GUARDS];
    memcpy(before, t, sizeof before);
    channels = 0;
    ncclResult_t r = plugin_table(p, ctx, odd[i][0], SMALL, t, odd[i][1], odd[i][2], &channels);
    CHECK(r == ncclSuccess && memcmp(before, t, sizeof before) == 0 && channels == 0,
          "v%d: coll %d on %d x %d changed something", p.version, odd[i][0], odd[i][1], odd[i][2]);
  }
  CHECK(plugin_table(p, ctx, ncclFuncAllReduce, SMALL, NULL, NUM_ALGOS, NUM_PROTOS, &channels) == ncclSuccess,
        "null table");
  nccl_table(t, ncclFuncAllReduce, SMALL);
  CHECK(plugin_table(p, ctx, ncclFuncAllReduce, SMALL, t, NUM_ALGOS, NUM_PROTOS, NULL) == ncclSuccess,
        "null nChannels");
}

static void check_table_versions_untouched(Plugin p, void* ctx) {
  float t[NUM_ALGOS * NUM_PROTOS + GUARDS];
  for (int coll = 0; coll < NUM_COLLS; coll++) {
    for (int b = 0; b <= 36; b += 4) {
      size_t bytes = (size_t)1 << b;
      nccl_table(t, coll, bytes);
      float before[NUM_ALGOS * NUM_PROTOS + GUARDS];
      memcpy(before, t, sizeof before);
      int channels = 0;
      ncclResult_t r = plugin_table(p, ctx, coll, bytes, t, NUM_ALGOS, NUM_PROTOS, &channels);
      CHECK(r == ncclSuccess && memcmp(before, t, sizeof before) == 0 && channels == 0,
            "v%d coll %d %zu B: changed NCCL's choice", p.version, coll, bytes);
    }
  }
}

static void v2_choice(Plugin p, void* ctx, int coll, size_t bytes, int collnet, int nvls, int* algo, int* proto,
                      int* channels) {
  *algo = -1;
  *proto = -1;
  *channels = 0;
  ncclResult_t r = ((ncclTuner_v2_t*)p.symbol)
                     ->getCollInfo(ctx, (ncclFunc_t)coll, bytes, collnet, nvls, 1, algo, proto, channels);
  CHECK(r == ncclSuccess, "v2 coll %d returned %d", coll, (int)r);
}

static void check_v2(Plugin p, void* ctx, int expect_choices) {
  int algo, proto, channels;
  for (int coll = 0; coll < NUM_COLLS; coll++) {
    for (int b = 0; b <= 36; b++) {
      size_t bytes = (size_t)1 << b;
      v2_choice(p, ctx, coll, bytes, 0, 0, &algo, &proto, &channels);
      if (!expect_choices) {
        CHECK(algo == -1 && proto == -1 && channels == 0, "v2 coll %d %zu B chose %d/%d", coll, bytes, algo, proto);
        continue;
      }
      CHECK(algo == NCCL_ALGO_RING || (algo == NCCL_ALGO_TREE && coll == ncclFuncAllReduce), "v2 coll %d: algo %d",
            coll, algo);
      /* v2 cannot see whether LL128 is enabled: only LL and Simple. */
      CHECK(proto == NCCL_PROTO_LL || proto == NCCL_PROTO_SIMPLE, "v2 coll %d: protocol %d", coll, proto);
      CHECK(channels >= 0 && channels <= MAX_CHANNELS, "v2 coll %d: nChannels %d", coll, channels);
      if (bytes == SMALL) CHECK(proto == NCCL_PROTO_LL, "v2 coll %d at 8 B: protocol %d", coll, proto);
    }
    if (!expect_choices) continue;
    v2_choice(p, ctx, coll, HUGE_SIZE, 0, 0, &algo, &proto, &channels);
    CHECK(proto == NCCL_PROTO_SIMPLE && channels == 0, "v2 coll %d at 16 GiB: %d/%d/%d", coll, algo, proto,
          channels);
    /* CollNet or NVLS available: NCCL's own choice may be one of them; leave it. */
    v2_choice(p, ctx, coll, HUGE_SIZE, 0, 1, &algo, &proto, &channels);
    CHECK(algo == -1 && proto == -1, "v2 coll %d with NVLS: chose %d/%d", coll, algo, proto);
    v2_choice(p, ctx, coll, HUGE_SIZE, 1, 0, &algo, &proto, &channels);
    CHECK(algo == -1 && proto == -1, "v2 coll %d with CollNet: chose %d/%d", coll, algo, proto);
  }
  v2_choice(p, ctx, ncclFuncRecv, SMALL, 0, 0, &algo, &proto, &channels);
  CHECK(algo == -1 && proto == -1 && channels == 0, "v2 Recv chose %d/%d", algo, proto);
  CHECK(((ncclTuner_v2_t*)p.symbol)->getCollInfo(ctx, ncclFuncAllReduce, SMALL, 0, 0, 1, NULL, NULL, NULL) ==
          ncclSuccess,
        "v2 with null outputs");
}

/* NCCL-shaped constants made up for the test, valid (finite, >= 0), with LL's start-up
 * latency so large that LL can never be the fastest: a v5+ tuner that reads them must not
 * pick LL at 8 bytes, where a tuner on NCCL's defaults does. */
static void made_up_constants(void) {
  double* all = (double*)&constants;
  for (size_t i = 0; i < sizeof constants / sizeof(double); i++) all[i] = 1.0;
  for (int a = 0; a < 7; a++)
    for (int p = 0; p < 3; p++) constants.baseLatencies[a][p] = p == NCCL_PROTO_LL ? 1e6 : 1.0;
  for (int g = 0; g < 4; g++)
    for (int n = 0; n < 3; n++) {
      constants.llMaxBws[g][n] = 20.0;
      constants.perChMaxRingLL128Bws[g][n] = 20.0;
      constants.perChMaxTreeLL128Bws[g][n] = 20.0;
      constants.perChMaxTreeBws[g][n] = 20.0;
    }
}

static void check_v5_reads_constants(Plugin p, void* ctx) {
  float t[NUM_ALGOS * NUM_PROTOS + GUARDS];
  int channels;
  for (int coll = 0; coll < NUM_COLLS; coll++) {
    nccl_table(t, coll, SMALL);
    int e = steer_once(p, ctx, coll, SMALL, t, &channels);
    CHECK(e >= 0 && e % NUM_PROTOS != NCCL_PROTO_LL, "v%d coll %d: chose LL (entry %d) despite its latency",
          p.version, coll, e);
  }
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s LIB steer|untouched|v2-off RANKS NODES [nolog] [init-ms=N]\n", argv[0]);
    return 2;
  }
  log_function = logger;
  for (int i = 5; i < argc; i++) {
    if (strcmp(argv[i], "nolog") == 0)
      log_function = NULL;
    else if (strncmp(argv[i], "init-ms=", 8) == 0)
      init_bound_ms = atof(argv[i] + 8);
    else {
      fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  const char* mode = argv[2];
  int steer = strcmp(mode, "untouched") != 0;
  int v2_steers = strcmp(mode, "steer") == 0;
  size_t ranks = strtoul(argv[3], NULL, 10), nodes = strtoul(argv[4], NULL, 10);
  comm_ranks = ranks;
  nvl_info.nNvlDomains = (int)nodes;
  nvl_info.minRanksPerNvlDomain = nvl_info.maxRanksPerNvlDomain = (int)(ranks / nodes);

  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
    return 2;
  }
  for (int v = 6; v >= 2; v--) {
    char name[32];
    snprintf(name, sizeof name, "ncclTunerPlugin_v%d", v);
    Plugin p = {v, dlsym(lib, name)};
    CHECK(p.symbol != NULL, "%s not found", name);
    if (!p.symbol) continue;
    const char* plugin_name = *(const char* const*)p.symbol; /* `name` comes first in every version */
    CHECK(plugin_name != NULL && strlen(plugin_name) > 0, "v%d has no name", v);
    if (v == 6) {
      ncclTuner_v6_t* t6 = (ncclTuner_v6_t*)p.symbol;
      size_t chunk = 4096;
      if (t6->getChunkSize)
        CHECK(t6->getChunkSize(NULL, ncclFuncAllReduce, SMALL, 1, 2, 4, &chunk) == ncclSuccess && chunk == 4096,
              "getChunkSize changed the chunk");
    }

    int warnings_before = log_warnings;
    if (v >= 5) made_up_constants();
    void* ctx = plugin_init(p, ranks, nodes);
    if (v >= 5 && steer) {
      check_v5_reads_constants(p, ctx);
      plugin_finalize(p, ctx);
      /* Again, without constants: NCCL's defaults. */
      ctx = NULL;
      CHECK((v == 5 ? ((ncclTuner_v5_t*)p.symbol)->init(&ctx, 7, ranks, nodes, log_function, &nvl_info, NULL)
                    : ((ncclTuner_v6_t*)p.symbol)->init(&ctx, 7, ranks, nodes, log_function, &nvl_info, NULL)) ==
              ncclSuccess,
            "v%d init without constants", v);
    }
    if (v == 2)
      check_v2(p, ctx, v2_steers);
    else if (steer)
      check_table_versions_steer(p, ctx);
    else
      check_table_versions_untouched(p, ctx);
    plugin_finalize(p, ctx);
    if (log_function && !steer)
      CHECK(log_warnings == warnings_before + 1, "v%d: %d warnings logged, one expected", v,
            log_warnings - warnings_before);
    if (log_function && steer) CHECK(log_warnings == warnings_before, "v%d: warnings logged", v);
  }
  /* Null contexts (what init leaves when it cannot even allocate) are harmless. */
  ncclTuner_v4_t* t4 = (ncclTuner_v4_t*)dlsym(lib, "ncclTunerPlugin_v4");
  float t[NUM_ALGOS * NUM_PROTOS + GUARDS];
  nccl_table(t, ncclFuncAllReduce, SMALL);
  int channels = 0;
  CHECK(t4 && t4->getCollInfo(NULL, ncclFuncAllReduce, SMALL, 1, (float**)t, NUM_ALGOS, NUM_PROTOS, 0, &channels) ==
                ncclSuccess,
        "null context");
  CHECK(t4 && t4->destroy(NULL) == ncclSuccess, "destroy(NULL)");
  CHECK(t4 && t4->init(ranks, nodes, log_function, NULL) == ncclSuccess, "init with no context pointer");

  if (log_function) {
    CHECK(log_lines > 0, "nothing logged");
    CHECK(log_misuse == 0, "%d log calls without fmt \"%%s\" or the TUNING flag", log_misuse);
  }
  dlclose(lib);
  printf("%d checks, %d failures, %d log lines (%d warnings)\n", checks, failures, log_lines, log_warnings);
  return failures == 0 ? 0 : 1;
}
