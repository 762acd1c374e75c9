/*
 * tacos.h: the C API of libtacos, the topology-aware collective algorithm synthesizer.
 *
 * A topology is given as text: a builder spec ("mesh:4x4", "preset:dgx-a100,nodes=2",
 * "rfs:2x4x8,bw=200:100:50"), the path of a topology JSON file, the path of an NCCL
 * topology XML file ("nccl:/path/topo.xml,nodes=2"), or JSON text itself (starting with '{').
 * A collective is named as on the command line: "allgather", "reducescatter", "allreduce",
 * "broadcast", "reduce", "gather", "scatter", "alltoall". Sizes follow nccl-tests: the buffer
 * every GPU ends with (the input for reducescatter).
 *
 * Functions returning int give 0 on success and -1 on failure; tacos_last_error() then says
 * why and tacos_last_error_code() which kind of error it was. Every function is safe to call
 * from any thread, never aborts the host process and never lets an error escape as anything
 * but a return code. Sizes run from 1 byte to 2^63 - 1.
 * Inputs past the library's limits (topology sizes, XML nesting and element counts, the
 * cost of verifying a program) fail the call with the limit named, before anything is
 * allocated for them. An internal error (a bug) also fails the call, and prints one line,
 * "tacos: WARN ...", on stderr.
 */
#ifndef TACOS_H
#define TACOS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version, e.g. "0.1.0". Owned by the library; do not free it. */
const char* tacos_version(void);

/*
 * Why the last failing call on this thread failed; "" when none has: the error and each
 * cause under it, outermost first, joined by ": " (a file's problem leads with
 * "file:line:column:" where it is at one). Owned by the library and valid until the next
 * call into it on this thread.
 */
const char* tacos_last_error(void);

/*
 * The kind of the last failing call's error on this thread, to branch on without reading
 * the message; TACOS_OK (0) when none has failed. The kinds are those `tacos ... --json`
 * reports as error.kind; an error with causes has the kind of the innermost. A code keeps
 * its number in every version; a new kind takes a new one, and reaches a program built
 * with an older header as TACOS_ERR_OTHER.
 */
#define TACOS_OK 0
#define TACOS_ERR_INVALID 1        /* an argument outside what is allowed (NULL, a bad value) */
#define TACOS_ERR_UNKNOWN 2        /* a name not known: a collective, a preset, a protocol */
#define TACOS_ERR_LIMIT 3          /* a figure past a limit: memory, transfers, NPUs */
#define TACOS_ERR_TARGET_LIMIT 4   /* a program past a limit of the loader it is for */
#define TACOS_ERR_SPEC 5           /* a topology spec or file (JSON, NCCL XML) not understood */
#define TACOS_ERR_TOPOLOGY 6       /* a topology that breaks a rule */
#define TACOS_ERR_DISCONNECTED 7   /* NPUs that cannot reach each other */
#define TACOS_ERR_COLLECTIVE 8     /* a collective that cannot be made over these NPUs */
#define TACOS_ERR_SCHEDULE 9       /* a schedule that breaks a rule */
#define TACOS_ERR_BASELINE 10      /* a baseline that does not apply */
#define TACOS_ERR_SYNTHESIS 11     /* no algorithm found within the options */
#define TACOS_ERR_MSCCL 12         /* an MSCCL program that does not lower, read or verify */
#define TACOS_ERR_PLAN 13          /* an MSCCL++ plan that does not lower or verify */
#define TACOS_ERR_COST 14          /* a cost profile or measurement table that is not usable */
#define TACOS_ERR_COMPILE 15       /* a compiled set that cannot be made or read */
#define TACOS_ERR_IO 16            /* a file that cannot be read or written */
#define TACOS_ERR_INTERNAL 17      /* a bug (please report): the call was stopped safely */
#define TACOS_ERR_OTHER 18         /* a kind newer than this header */
int tacos_last_error_code(void);

/* Frees a string the library returned (NULL is ignored). */
void tacos_free_string(char* text);

/*
 * Choices for synthesis. Initialize with tacos_synth_options_init, then change fields. Fields
 * are only ever appended: a caller built against an older header (a smaller struct_size)
 * keeps working, the fields it lacks taking their defaults.
 */
typedef struct tacos_synth_options {
  uint32_t struct_size;    /* set by tacos_synth_options_init; lets the struct grow */
  uint32_t chunks_per_npu; /* K; 0 = try 1, 2, 4, 8 (then K between them beside
                              the fastest) and keep the fastest program (the
                              default everywhere: `tacos synth --xml`, compile) */
  uint64_t seed;           /* fixes every random choice */
  int32_t root;            /* root NPU of rooted collectives; -1 = the first alive NPU */
  int32_t in_place;        /* 1 in place, 0 out of place, -1 the collective's usual */
  const char* proto;       /* "Simple", "LL", "LL128"; NULL = LL up to 512 KiB, else Simple */
  double bandwidth_gbps;   /* for links the topology leaves unspecified; 0 = 50 GB/s */
  double latency_us;       /* likewise; negative = 0.5 us */
  /* Out-of-range values fail the call (-1) naming the field, as the command line's flags
     do: a root below -1, an in_place other than -1, 0, 1, a bandwidth that is negative,
     NaN or infinite, a latency that is NaN or infinite. */
  /*
   * The loader the XML is for: "executor" (the MSCCL executor as built by default, and RCCL:
   * 64 steps per threadblock, 64 threadblocks per GPU), "executor-256" (built with
   * MSCCL_MAX_NUM_STEPS=256), "msccl-legacy" (the older microsoft/msccl); NULL = "executor".
   * With chunks_per_npu = 0, only K whose program fits the target are considered; a request
   * that cannot fit fails, naming the limit. An unknown name fails, naming the known ones.
   */
  const char* target;
  /*
   * What tacos_synthesize_xml and tacos_synthesize_xml_file return: "msccl" (MSCCL algorithm
   * XML for the target above) or "mscclpp" (an MSCCL++ execution plan, JSON, verified by the
   * plan verifier, for the MSCCL++ executor and its NCCL shim; target and proto do not apply);
   * NULL = "msccl". An unknown name fails, naming the known ones.
   */
  const char* format;
} tacos_synth_options;

/* Fills *options with the defaults described above. */
void tacos_synth_options_init(tacos_synth_options* options);

/*
 * Synthesizes the collective on the topology, checks the schedule, lowers it to MSCCL
 * algorithm XML for the options' target, checks the program against the target's loader rules
 * and verifies it, and returns the XML in *xml_out (free it with tacos_free_string): the same
 * bytes `tacos synth --xml` writes for the same request. Candidates are ranked by the executor
 * cost model, as tacos_simulate_xml times them. options may be NULL for the defaults.
 */
int tacos_synthesize_xml(const char* topology, const char* collective, uint64_t size_bytes,
                         const tacos_synth_options* options, char** xml_out);

/* As tacos_synthesize_xml, writing the XML to path (through a temporary file and a rename). */
int tacos_synthesize_xml_file(const char* topology, const char* collective, uint64_t size_bytes,
                              const tacos_synth_options* options, const char* path);

/*
 * Verifies the MSCCL XML file at xml_path and times it on the topology (rank r on NPU r) for
 * a collective of size_bytes with the executor cost model (the topology preset's GPU
 * generation, else Hopper; the profile TACOS_PROFILE names, else the generation's built-in
 * one), as `tacos simulate --xml` and `tacos verify` time it; *time_us gets the time in
 * microseconds.
 */
int tacos_simulate_xml(const char* topology, const char* xml_path, uint64_t size_bytes,
                       double* time_us);

#ifdef __cplusplus
}
#endif

#endif /* TACOS_H */
