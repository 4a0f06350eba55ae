/* The checks of the drop-in's C test programs: CHECK counts a failure in
 * g_fail and says where, OK checks that an NCCL call returned ncclSuccess. */
#pragma once
#include <nccl.h>
#include <stdio.h>

static int g_rank = -1, g_fail = 0;

#define CHECK(cond, ...)                                     \
  do {                                                       \
    if (!(cond)) {                                           \
      fprintf(stderr, "rank %d: FAIL %s:%d: ", g_rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                          \
      fprintf(stderr, "\n");                                 \
      g_fail++;                                              \
    }                                                        \
  } while (0)
#define OK(call)                                                                   \
  do {                                                                             \
    ncclResult_t r_ = (call);                                                      \
    CHECK(r_ == ncclSuccess, "%s -> %d (%s)", #call, (int)r_, ncclGetErrorString(r_)); \
  } while (0)
