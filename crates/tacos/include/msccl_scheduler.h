/*
 * msccl_scheduler.h: the MSCCL executor's external scheduler ABI, as libtacos implements it.
 *
 * The executor dlopens MSCCL_SCHEDULER and reads the symbol mscclScheduler. For each
 * collective call it asks selectAlgo; a scheduler that picks an algorithm loads its XML with
 * the executor's mscclLoadAlgo (resolved at run time) and sets scheduled and handle.
 */
#ifndef TACOS_MSCCL_SCHEDULER_H
#define TACOS_MSCCL_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>

#include "nccl_tuner.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9
} ncclDataType_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

typedef enum {
  mscclFuncReduce = 0,
  mscclFuncBroadcast = 1,
  mscclFuncAllReduce = 2,
  mscclFuncReduceScatter = 3,
  mscclFuncAllGather = 4,
  mscclFuncSend = 5,
  mscclFuncRecv = 6,
  mscclFuncGather = 7,
  mscclFuncScatter = 8,
  mscclFuncAllToAll = 9,
  mscclFuncAllToAllv = 10
} mscclFunc_t;

typedef int mscclAlgoHandle_t;

/* One collective call, as the executor describes it to the scheduler. */
struct mscclSchedulerParam {
  const void* sendBuff;
  const size_t* sendCounts;
  const size_t* sDisPls;
  void* recvBuff;
  const size_t* recvCounts;
  const size_t* rDisPls;
  size_t count;
  ncclDataType_t dataType;
  int root;
  int peer;
  ncclRedOp_t op;
  mscclFunc_t func;
  int rank;
  int nRanks;
  bool scheduled;
  mscclAlgoHandle_t handle;
};

typedef struct {
  const char* name;
  ncclResult_t (*init)(void);
  ncclResult_t (*selectAlgo)(struct mscclSchedulerParam* param);
  ncclResult_t (*teardown)(void);
} mscclSchedulerInterface;

/* Exported by the executor; a scheduler resolves them at run time. */
typedef ncclResult_t (*mscclLoadAlgo_t)(const char* mscclAlgoFilePath, mscclAlgoHandle_t* mscclAlgoHandle,
                                        int rank);
typedef ncclResult_t (*mscclUnloadAlgo_t)(mscclAlgoHandle_t mscclAlgoHandle);

#ifdef __cplusplus
}
#endif

#endif /* TACOS_MSCCL_SCHEDULER_H */
