/*
 * api_harness.c: calls libtacos's C API (include/tacos.h) the way a C program does, through
 * dlopen, so that a call that crashes or aborts shows as this process's exit status.
 *
 * usage: api_harness LIB simulate TOPOLOGY XML_PATH SIZE
 *        api_harness LIB synth TOPOLOGY COLLECTIVE SIZE [FIELD=VALUE ...]
 *   FIELD is one of chunks, root, in_place, bandwidth, latency, proto, target; the rest of
 *   the options keep tacos_synth_options_init's defaults.
 * Prints "rc=N" and, on failure, "error=..." (tacos_last_error) on stdout; exit status 0
 * whatever the call returned, 2 for a usage error.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tacos.h"

typedef const char* (*last_error_fn)(void);
typedef void (*free_string_fn)(char*);
typedef void (*options_init_fn)(tacos_synth_options*);
typedef int (*synthesize_fn)(const char*, const char*, uint64_t, const tacos_synth_options*,
                             char**);
typedef int (*simulate_fn)(const char*, const char*, uint64_t, double*);

static void* need(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (!f) {
    fprintf(stderr, "%s: %s\n", name, dlerror());
    exit(2);
  }
  return f;
}

/* Sets one option from FIELD=VALUE; 0 when FIELD is unknown. */
static int set_option(tacos_synth_options* o, const char* arg) {
  const char* eq = strchr(arg, '=');
  if (!eq) return 0;
  size_t n = (size_t)(eq - arg);
  const char* v = eq + 1;
  if (n == 6 && !strncmp(arg, "chunks", n)) {
    o->chunks_per_npu = (uint32_t)strtoul(v, NULL, 10);
  } else if (n == 4 && !strncmp(arg, "root", n)) {
    o->root = (int32_t)strtol(v, NULL, 10);
  } else if (n == 8 && !strncmp(arg, "in_place", n)) {
    o->in_place = (int32_t)strtol(v, NULL, 10);
  } else if (n == 9 && !strncmp(arg, "bandwidth", n)) {
    o->bandwidth_gbps = strtod(v, NULL); /* strtod reads "nan" and "inf" */
  } else if (n == 7 && !strncmp(arg, "latency", n)) {
    o->latency_us = strtod(v, NULL);
  } else if (n == 5 && !strncmp(arg, "proto", n)) {
    o->proto = v;
  } else if (n == 6 && !strncmp(arg, "target", n)) {
    o->target = v;
  } else if (n == 6 && !strncmp(arg, "format", n)) {
    o->format = v;
  } else {
    return 0;
  }
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: %s LIB simulate|synth ...\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  last_error_fn last_error = (last_error_fn)need(lib, "tacos_last_error");
  uint64_t size = strtoull(argv[5], NULL, 10);
  int rc;
  if (!strcmp(argv[2], "simulate")) {
    simulate_fn simulate = (simulate_fn)need(lib, "tacos_simulate_xml");
    double time_us = -1.0;
    rc = simulate(argv[3], argv[4], size, &time_us);
    if (rc == 0) printf("time_us=%g\n", time_us);
  } else if (!strcmp(argv[2], "synth")) {
    options_init_fn init = (options_init_fn)need(lib, "tacos_synth_options_init");
    synthesize_fn synthesize = (synthesize_fn)need(lib, "tacos_synthesize_xml");
    free_string_fn free_string = (free_string_fn)need(lib, "tacos_free_string");
    tacos_synth_options options;
    init(&options);
    for (int i = 6; i < argc; i++) {
      if (!set_option(&options, argv[i])) {
        fprintf(stderr, "unknown option %s\n", argv[i]);
        return 2;
      }
    }
    char* xml = NULL;
    rc = synthesize(argv[3], argv[4], size, &options, &xml);
    if (rc == 0) printf("xml_bytes=%zu\n", strlen(xml));
    free_string(xml);
  } else {
    fprintf(stderr, "unknown mode %s\n", argv[2]);
    return 2;
  }
  printf("rc=%d\n", rc);
  if (rc != 0) printf("error=%s\n", last_error());
  return 0;
}
