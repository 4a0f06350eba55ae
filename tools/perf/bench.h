// Internals of the benchmark harness (harness.h is its one entry point):
// the op, dtype and reduction tables and the options (options.cc), the
// shape of one call and the checks of its results (verify.cc), and the
// state of a run (harness.cc).
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "flagcx.h"

namespace perf {

enum class Op { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, Gather, Scatter,
                AlltoAll, AlltoAllv, SendRecv };

// Sizes follow nccl-tests: `bytes` is the largest buffer of the call (the
// gathered output, the scattered input, the whole alltoall buffer) and a
// "blocked" op moves nranks blocks of bytes/nranks.  Bus bandwidth factors
// are nccl-tests' too.
struct OpInfo {
  const char *name;
  Op op;
  bool reduces, rooted, blocked;
  bool sendIsFull, recvIsFull;  // buffer holds all nranks blocks (else one)
  double (*busFactor)(int n);
};

struct TypeInfo {
  const char *name;
  flagcxDataType_t dt;
  MPI_Datatype mpiReduce;  // MPI_DATATYPE_NULL: MPI cannot reduce it
  MPI_Datatype mpiMove;    // same size, for data movement only
};

struct RedInfo {
  const char *name;
  flagcxRedOp_t op;
  MPI_Op mpi;  // MPI_OP_NULL: no MPI equivalent
};

const OpInfo *findOp(const char *name);
extern const RedInfo kSum;

enum class Format { Table, FlagCX };

struct Options {
  size_t minBytes = 1024, maxBytes = 64u << 20, factor = 2;
  int warmup = 5;        // -w: warm-up calls per point, at least
  int warmupMs = 100;    // -W: and at least this long
  int iters = 20;        // -n: timed calls per repetition, at least
  int targetMs = 50;     // -T: and enough calls to last about this long
  int repeat = 1;        // --repeat: timed repetitions per point (median and spread)
  bool print = false, check = true, mpi = false;
  bool inPlace = false;  // -I 1
  int root = -1;  // -1: every root in turn
  uint64_t splitMask = 0;  // -s: ranks r and q share a communicator iff r & mask == q & mask
  int registerMode = 0;    // -R 1: flagcxMemAlloc + flagcxCommRegister buffers
  bool heap = false;       // -M 1: plain heap buffers (posix_memalign), host adapter only
  bool deterministic = false;  // -D 1: FLAGCX_DETERMINISTIC=1
  Format format = Format::Table;
  std::vector<const TypeInfo *> types;
  std::vector<const RedInfo *> redops;
  std::string algo, json;
  std::string given;  // the flags on the command line, in order ('N': --repeat)
};

// 0: parsed; 2: bad flags (*err says why); 3: -h.
int parseOptions(int argc, char **argv, Options *o, std::string *err);
// The help: every flag the collective benchmarks take, or with `oneSided`
// those test_put/test_get/test_putsignal take (oneSidedTakes).
void usage(FILE *f, const char *prog, bool oneSided = false);
bool oneSidedTakes(char flag);

struct Layout {  // one call's shape at one size
  size_t bytes = 0;    // reported size
  size_t count = 0;    // count argument of the call (per-rank block for blocked ops)
  size_t sendElems = 0, recvElems = 0;
  std::vector<size_t> sc, sd, rc, rd;  // alltoallv
};

Layout layoutFor(const OpInfo &op, size_t bytes, size_t ts, int nranks, int rank);
// Upper bound of the per-rank buffer bytes for a size (alltoallv's slack
// and the guard bytes included).
void bufferBytes(const OpInfo &op, size_t bytes, int nranks, size_t *send, size_t *recv);
constexpr size_t kGuardBytes = 64;  // checked after every receive buffer's data

struct Bench {
  const OpInfo *op = nullptr;
  Options opt;
  MPI_Comm mpiComm = MPI_COMM_WORLD;  // this rank's group (-s), flagcx and MPI alike
  int worldRank = 0, color = 0, ngroups = 1;
  int rank = 0, nranks = 1, localRanks = 1, localRank = 0, nhosts = 1;
  flagcxDeviceHandle_t dev = nullptr;
  flagcxComm_t comm = nullptr;
  flagcxStream_t stream = nullptr;
  void *send = nullptr, *recv = nullptr;  // what flagcx gets (device memory on a GPU)
  void *sendReg = nullptr, *recvReg = nullptr;  // -R 1: registration handles
  // Where inputs are written and results checked: send/recv themselves on
  // the host adapter; host mirrors, copied to and from the device, on a GPU.
  bool onDevice = false;
  std::vector<char> hostSend, hostRecv, sentCopy;
  void *hsend = nullptr, *hrecv = nullptr;
  size_t sendCap = 0, recvCap = 0;
  FILE *json = nullptr;
  std::string algoLabel, algoName, transport;  // header text; JSON "algo"
  size_t totalWrong = 0;  // wrong elements, overruns and changed send buffers
  bool printer() const { return rank == 0 && color == 0; }
};

// -I 1 (the layout of nccl-tests and MPI_IN_PLACE): allreduce, broadcast,
// reduce and alltoall get one buffer as both; allgather and gather send from
// this rank's block of the receive buffer; reducescatter and scatter receive
// into this rank's block of the send buffer.
bool hasInPlace(Op op);
bool recvInsideSend(Op op);
// The buffers a call gets, from the bases `send` and `recv` (the device
// buffers, or their host mirrors): the bases themselves out of place.
void callBuffers(const Bench &b, const Layout &l, size_t ts, void *send, void *recv, void **s,
                 void **r);

[[noreturn]] void fail(Bench &b, const char *what, flagcxResult_t r);

// Fresh inputs: this rank's values in the send buffer (and a saved copy),
// a sentinel no correct result equals in the receive buffer, guard bytes
// after it.
void fillInputs(Bench &b, const Layout &l, flagcxDataType_t dt, flagcxRedOp_t rop);
// The sentinel and the guard again (before a timed run).
void resetRecv(Bench &b, const Layout &l, flagcxDataType_t dt);
// Problems in this rank's results after a call: wrong elements, a changed
// guard byte, a changed send buffer; each reported on stderr with `when`.
size_t verify(Bench &b, const Layout &l, const TypeInfo &t, const RedInfo &red, int root,
              const char *when);
void printExcerpt(Bench &b, const Layout &l, flagcxDataType_t dt);

// One flagcx call of the benchmark, enqueued on the stream (calls.cc).
flagcxResult_t callFlagcx(Bench &b, const Layout &l, flagcxDataType_t dt, flagcxRedOp_t rop,
                          int root);
// Whether MPI can run the same call (*why says why not), and the call.
bool mpiCan(const Bench &b, const Layout &l, const TypeInfo &t, const RedInfo &red, int root,
            const char **why);
void callMpi(Bench &b, const Layout &l, const TypeInfo &t, const RedInfo &red, int root);

// header.cc: the run's header lines (rank 0 of group 0 only).
void printHeader(Bench &b, const std::vector<std::string> &hostNames, const char *prog);

}  // namespace perf
