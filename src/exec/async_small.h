// The stream-ordered small-call path of a staged rank (a CUDA rank whose
// buffers go through host memory): the call returns at once; its input
// copy, a hold and its output copy wait on the user's stream, and a worker
// thread runs the collective as a host operation on page-locked slots, then
// releases the hold (src/exec/async_small.cc; docs/GPU.md, "Stream ordering").
#pragma once
#include <cstddef>
#include <cstdint>

#include "flagcx.h"

namespace flagcx {

struct Job;
struct ExecState;
struct AsyncPath;
struct AsyncPathFree {  // joins the worker, waits for the slots, frees them
  void operator()(AsyncPath *p) const;
};

// Runs one job on the worker (the executor's runJob): waits for its turn,
// runs it, finishes its ticket and returns it to the pool.
using JobRunner = flagcxResult_t (*)(void *job);

// Bytes of a call's input and output (the larger of all ranks' shares) and
// whether this op has a fixed-size output the path can take.
bool asyncShape(const Job *j, int nranks, size_t *inB, size_t *outB);
// Takes j when it can (staged mode, one collective, a stream that can be
// held, both shares within FLAGCX_STREAM_ASYNC_BYTES): *res is then the
// call's result.  false: the caller runs its ordinary launch.
bool asyncLaunch(Job *j, JobRunner run, flagcxResult_t *res);
uint64_t asyncCalls(const ExecState *s);  // calls the path took (tests)

}  // namespace flagcx
