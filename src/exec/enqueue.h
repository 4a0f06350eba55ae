// Turning API calls into stream work: groups, point-to-point operations and
// collectives, executed in issue order by whichever thread drains the stream.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/comm.h"
#include "sched/ir.h"

namespace flagcx {

struct CollArgs {
  OpKind op;
  const void *send;
  void *recv;
  size_t count;
  flagcxDataType_t dtype;
  flagcxRedOp_t redop;
  int root;
  const size_t *sendcounts, *sdispls, *recvcounts, *rdispls;  // alltoallv
};

struct P2PItem {
  bool isSend;
  void *buf;
  size_t bytes;
  int peer;
};

struct CollItem {
  CollArgs a;
  uint64_t seq;
  std::vector<size_t> v;  // alltoallv counts/displacements, copied at call time
  struct FlightEntry *flight = nullptr;
};

struct Job {
  flagcxComm *comm = nullptr;
  uint64_t ticket = 0;
  flagcxStream_t stream = nullptr;
  std::vector<CollItem> colls;  // the first ncolls are this job's; the rest keep capacity
  size_t ncolls = 0;
  std::vector<P2PItem> p2p;
};

// One message of a stage or group.
struct Xfer {
  Conn *conn;
  bool isSend;
  char *buf;
  size_t bytes;
  uint64_t tag;
  int req = -1;
  bool posted = false, done = false;
  // recv_reduce: reduce the landed bytes into dst when complete
  char *reduceDst = nullptr;
  int peer;
  int ch = 0;
};

void freeJobs(flagcxComm *comm);

// Called by the API after validation; queue in the open group or run now.
flagcxResult_t enqueueP2P(flagcxComm *comm, bool isSend, void *buf, size_t bytes, int peer,
                          flagcxStream_t stream);
flagcxResult_t enqueueColl(flagcxComm *comm, const CollArgs &args, flagcxStream_t stream);
flagcxResult_t groupStart();
flagcxResult_t groupEnd();
int groupDepth();

}  // namespace flagcx
