/*
 * tacos.h: the C API of libtacos, the topology-aware collective algorithm synthesizer.
 *
 * Every function is safe to call from any thread and never aborts the host process.
 */
#ifndef TACOS_H
#define TACOS_H

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version, e.g. "0.1.0". The string is owned by the library; do not free it. */
const char* tacos_version(void);

#ifdef __cplusplus
}
#endif

#endif /* TACOS_H */
