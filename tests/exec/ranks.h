// Ranks as threads of this process for executor unit tests: each thread is
// one rank with a real bootstrap (sockets on this host), the host adapter,
// the compiled schedules and the loopback Conns (loopback.h), and runs the
// test's body on its own Executor.  No fork: a failing check points at the
// line, and a debugger sees every rank.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "adapters/device/adapter.h"
#include "exec/executor.h"
#include "flagcx.h"
#include "rendezvous/bootstrap.h"
#include "sched/algo_set.h"
#include "tests/common/bootstrap.h"
#include "tests/exec/loopback.h"

namespace execfix {

struct Options {
  // One host over shared memory: the executor may take its one-host block
  // (small calls) and one-host direct path (large calls); else every call
  // takes the schedules over the loopback Conns.
  bool sameHost = false;
  int nchannels = 1;
  // The mode every rank's executor must choose (staged: the host adapter's
  // emulated copy engine, FLAGCX_HOST_COPY_ENGINE_NS).
  flagcx::ExecMode mode = flagcx::ExecMode::Host;
};

using Body = std::function<void(int rank, flagcx::Executor &ex)>;

// Runs `body` on `nranks` rank threads; returns when every rank is done.
inline void runRanks(int nranks, const Options &o, const Body &body) {
  flagcxUniqueId id;
  ASSERT_EQ(flagcxGetUniqueId(&id), flagcxSuccess);
  loopback::Conns conns = loopback::connectAll(nranks, o.nchannels);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; r++)
    threads.emplace_back([&, r] {
      std::unique_ptr<flagcx::Bootstrap> bs = harness::makeBootstrap(r, nranks, id);
      ASSERT_TRUE(bs) << "rank " << r << ": bootstrap";
      std::unique_ptr<flagcx::AlgoSet> algos;
      ASSERT_EQ(flagcx::AlgoSet::create(r, nranks, nranks, &algos), flagcxSuccess);
      flagcx::ExecEnv env;
      env.rank = r;
      env.nranks = nranks;
      env.nchannels = o.nchannels;
      env.dev = flagcx::hostAdapter();
      env.bs = bs.get();
      env.conns = &conns[static_cast<size_t>(r)];
      env.algos = algos.get();
      env.sameHostShm = o.sameHost;
      {
        flagcx::Executor ex(env);
        ASSERT_EQ(ex.setup(false), flagcxSuccess);
        EXPECT_EQ(ex.mode(), o.mode);
        body(r, ex);
        EXPECT_TRUE(ex.drain());
        // No rank lets go of its Conns while a peer may still use them.
        EXPECT_EQ(bs->barrier(), flagcxSuccess);
      }
    });
  for (auto &t : threads) t.join();
}

inline flagcx::CollArgs coll(flagcx::OpKind op, const void *send, void *recv, size_t count,
                             flagcxDataType_t dt = flagcxFloat32,
                             flagcxRedOp_t redop = flagcxSum, int root = 0) {
  flagcx::CollArgs a{};
  a.op = op;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.dtype = dt;
  a.redop = redop;
  a.root = root;
  return a;
}

// Rank r's i-th input element: small integers, exact in float sums.
inline float inputOf(int r, size_t i) { return static_cast<float>((r + 1) * 3 + static_cast<int>(i % 11)); }

}  // namespace execfix
