/* plugin_abi.h: every plugin ABI libtacos implements; build.rs generates Rust types from it. */
#ifndef TACOS_PLUGIN_ABI_H
#define TACOS_PLUGIN_ABI_H
#include "msccl_scheduler.h"
#include "nccl_tuner.h"
#endif /* TACOS_PLUGIN_ABI_H */
