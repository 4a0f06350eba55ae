// Communicators made from a parent (docs/ELASTIC.md): split by colour and
// key, shrink to the survivors of a failure, grow by new ranks, and revoke.
// A child is a communicator of its own, built by the same commInit as any
// other from a fresh unique id whose root runs in the child's first rank.
// The parent's bootstrap only carries that id, point to point from the
// first rank to each other member (and, for split and grow, one small
// allgather over the parent first), so a shrink never waits for a parent
// rank outside the child, dead or stopped.
#include <algorithm>

#include "base/base.h"
#include "core/comm.h"

namespace flagcx {

namespace {

constexpr uint32_t kChildTag = 0x7c000000u;

// What the first rank of a child sends each other member: the id, and a
// digest of the member list as it computed it (members that disagree about
// it fail rather than build different communicators).
struct ChildNote {
  flagcxUniqueId id;
  uint64_t members;
};

uint64_t digestOf(const std::vector<int> &members) {
  uint64_t h = 1469598103934665603ull;
  for (int r : members) h = (h ^ static_cast<uint64_t>(r)) * 1099511628211ull;
  return h;
}

// The tag of this parent's next child: every member makes the same calls on
// the parent in the same order, so they count alike.
uint32_t nextChildTag(flagcxComm *parent) {
  return kChildTag | (parent->children++ & 0xffffffu);
}

// The first member makes the child's id (`id` non-null: a child with a
// rendezvous of its own) and hands it, with the members' digest, to the
// others.
flagcxResult_t shareChildId(flagcxComm *parent, uint32_t tag, const std::vector<int> &members,
                            const char *what, flagcxUniqueId *id) {
  ChildNote note{};
  const uint64_t digest = digestOf(members);
  if (parent->rank == members[0]) {
    if (id) FLAGCX_CHECK(makeFreshId(&note.id, 0));
    note.members = digest;
    for (size_t i = 1; i < members.size(); i++)
      FLAGCX_CHECK(parent->bs->send(members[i], tag, &note, sizeof note));
  } else {
    FLAGCX_CHECK(parent->bs->recv(members[0], tag, &note, sizeof note));
    if (note.members != digest)
      return argError(flagcxInvalidUsage, kInit, "%s: rank %d: parent rank %d (the new "
                      "communicator's first rank) counts other members than this rank; every "
                      "member must pass the same arguments", what, parent->rank, members[0]);
  }
  if (id) *id = note.id;
  return flagcxSuccess;
}

// Builds the child (this rank is a member) and restores the log's rank.
flagcxResult_t initChild(ChildOf &from, const flagcxUniqueId &id, flagcxComm **out) {
  flagcxComm *parent = from.parent;
  const std::vector<int> &members = from.members;
  int me = static_cast<int>(std::find(members.begin(), members.end(), parent->rank) -
                            members.begin());
  flagcxResult_t r = commInit(out, static_cast<int>(members.size()), id, me, &from);
  logSetRank(parent->rank);
  if (r == flagcxSuccess)
    INFO(kInit, "rank %d: new communicator of %zu rank(s), rank %d in it", parent->rank,
         members.size(), me);
  return r;
}

// The parent's operations enqueued before this call finish first: they may
// use the bootstrap (connections on first use) that the new one's set-up
// uses from this thread.
flagcxResult_t settleParent(flagcxComm *parent, const char *what) {
  if (parent->exec->drain()) return flagcxSuccess;
  return argError(flagcxInvalidUsage, kInit, "%s: rank %d: %d operation(s) of the communicator "
                  "still running after FLAGCX_TIMEOUT; after a failure, shrink with "
                  "FLAGCX_SHRINK_ABORT", what, parent->rank, parent->exec->inFlight());
}

}  // namespace

flagcxResult_t commSplit(flagcxComm *parent, int color, int key, flagcxComm **out) {
  *out = nullptr;
  const uint32_t tag = nextChildTag(parent);
  FLAGCX_CHECK(settleParent(parent, "flagcxCommSplit"));
  struct Choice {
    int32_t color, key;
  };
  std::vector<Choice> all(static_cast<size_t>(parent->nranks));
  all[static_cast<size_t>(parent->rank)] = {color, key};
  FLAGCX_CHECK(parent->bs->allgather(all.data(), sizeof(Choice)));
  if (color == FLAGCX_SPLIT_NOCOLOR) return flagcxSuccess;
  std::vector<int> members;
  for (int r = 0; r < parent->nranks; r++)
    if (all[static_cast<size_t>(r)].color == color) members.push_back(r);
  // MPI_Comm_split's order: by key, ties by parent rank.
  std::stable_sort(members.begin(), members.end(), [&all](int a, int b) {
    return all[static_cast<size_t>(a)].key < all[static_cast<size_t>(b)].key;
  });
  flagcxUniqueId id;
  FLAGCX_CHECK(shareChildId(parent, tag, members, "flagcxCommSplit", &id));
  ChildOf from;
  from.parent = parent;
  from.members = std::move(members);
  return initChild(from, id, out);
}

flagcxResult_t commShrink(flagcxComm *parent, const std::vector<int> &exclude, bool abort,
                          flagcxComm **out) {
  *out = nullptr;
  const uint32_t tag = nextChildTag(parent);
  ChildOf from;
  from.parent = parent;
  from.childNo = tag;
  from.shrink = true;
  if (abort) {
    // Fail what is in flight on the parent; its jobs stop touching the
    // user's buffers before this returns (or are reported as still running).
    // Drained, the parent's connections are idle and may go to the child.
    parent->exec->abort();
    from.takeConns = parent->exec->drain();
    if (!from.takeConns)
      WARN(kInit, "flagcxCommShrink: rank %d: %d operation(s) of the parent still running 2 s "
           "after the abort", parent->rank, parent->exec->inFlight());
  } else {
    FLAGCX_CHECK(settleParent(parent, "flagcxCommShrink"));
  }
  for (int r = 0; r < parent->nranks; r++)
    if (std::find(exclude.begin(), exclude.end(), r) == exclude.end()) from.members.push_back(r);
  // No id: the child's bootstrap is a view of the parent's (commInit).
  FLAGCX_CHECK(shareChildId(parent, tag, from.members, "flagcxCommShrink", nullptr));
  return initChild(from, flagcxUniqueId{}, out);
}

namespace {

// Whether this rank's parent can hand its Conns to child rank q on: drained
// after FLAGCX_SHRINK_ABORT, and every channel's Conn one shm can adopt.
bool canGive(const flagcxComm *child, const ChildOf &from, int q) {
  flagcxComm *parent = from.parent;
  const int pr = from.members[static_cast<size_t>(q)], nch = child->nchannels;
  bool ok = from.takeConns && q != child->rank && parent->nchannels == nch &&
            parent->shm && parent->via[static_cast<size_t>(pr)] == parent->shm.get();
  for (int c = 0; ok && c < nch; c++)
    ok = parent->conn(pr, c) && parent->shm->adoptable(*parent->conn(pr, c));
  return ok;
}

}  // namespace

flagcxResult_t commChildFacts(flagcxComm *child, ChildOf *from) {
  // Each member's slot: whether its parent used verbs, its
  // FLAGCX_SHM_BUFFER_SIZE, and a bit per child rank it can hand Conns to.
  const size_t n = static_cast<size_t>(child->nranks), slot = 2 + (n + 63) / 64;
  const size_t me = static_cast<size_t>(child->rank);
  std::vector<uint64_t> all(n * slot);
  uint64_t *mine = &all[me * slot];
  mine[0] = from->parent->ib != nullptr;
  mine[1] = static_cast<uint64_t>(paramInt(Param::SHM_BUFFER_SIZE));
  for (size_t q = 0; from->shrink && q < n; q++)
    if (canGive(child, *from, static_cast<int>(q))) mine[2 + q / 64] |= uint64_t{1} << (q % 64);
  FLAGCX_CHECK(child->bs->allgather(all.data(), slot * sizeof(uint64_t)));
  bool sameRings = true;
  from->anyVerbs = false;
  for (size_t r = 0; r < n; r++) {
    from->anyVerbs = from->anyVerbs || all[r * slot] != 0;
    sameRings = sameRings && all[r * slot + 1] == mine[1];
  }
  from->adoptWith.clear();
  auto bit = [&](size_t r, size_t q) { return (all[r * slot + 2 + q / 64] >> (q % 64)) & 1; };
  for (size_t q = 0; q < n && sameRings && !from->anyVerbs; q++)
    if (bit(me, q) && bit(q, me)) from->adoptWith.push_back(static_cast<int>(q));
  return flagcxSuccess;
}

void commAdoptConns(flagcxComm *child, const ChildOf &from) {
  flagcxComm *parent = from.parent;
  Transport *shm = child->shm.get();
  const int nch = child->nchannels;
  size_t taken = 0;
  for (int q : from.adoptWith) {
    if (child->via[static_cast<size_t>(q)] != shm) continue;  // as on q's side
    const int pr = from.members[static_cast<size_t>(q)];
    for (int c = 0; c < nch; c++) {
      auto &old = parent->conns[static_cast<size_t>(pr * nch + c)];
      child->conns[static_cast<size_t>(q * nch + c)] = shm->adopt(*old, child->rank, q);
      old.reset();
    }
    taken++;
  }
  if (from.shrink)
    INFO(kInit, "rank %d: took the connections to %zu peer(s) over from the parent", child->rank,
         taken);
}

flagcxResult_t commGrowId(flagcxComm *parent, flagcxUniqueId *id) {
  return makeFreshId(id, parent->nranks);
}

flagcxResult_t commGrow(flagcxComm *parent, int nranks, const flagcxUniqueId *id, int rank,
                        flagcxComm **out) {
  *out = nullptr;
  if (!parent) return commInit(out, nranks, *id, rank);
  const uint32_t tag = nextChildTag(parent);
  FLAGCX_CHECK(settleParent(parent, "flagcxCommGrow"));
  // Who holds the id: the lowest parent rank that passed one sends it on.
  std::vector<uint8_t> has(static_cast<size_t>(parent->nranks));
  has[static_cast<size_t>(parent->rank)] = id != nullptr;
  FLAGCX_CHECK(parent->bs->allgather(has.data(), 1));
  int holder = static_cast<int>(std::find(has.begin(), has.end(), 1) - has.begin());
  if (holder == parent->nranks)
    return argError(flagcxInvalidUsage, kInit, "flagcxCommGrow: rank %d: no existing rank passed "
                    "the id (the coordinator, which called flagcxCommGetUniqueId, must)",
                    parent->rank);
  flagcxUniqueId shared;
  if (parent->rank == holder) {
    shared = *id;
    for (int r = 0; r < parent->nranks; r++)
      if (r != holder) FLAGCX_CHECK(parent->bs->send(r, tag, &shared, sizeof shared));
  } else {
    FLAGCX_CHECK(parent->bs->recv(holder, tag, &shared, sizeof shared));
  }
  flagcxResult_t r = commInit(out, nranks, shared, parent->rank);
  logSetRank(parent->rank);
  return r;
}

flagcxResult_t commRevoke(flagcxComm *comm) {
  if (comm->revoked.exchange(true)) return flagcxSuccess;
  comm->exec->abort();
  // A job in flight fails and tells the peers itself; otherwise tell them
  // here, so that a peer waiting on this rank fails now.
  if (comm->exec->drain()) comm->exec->poisonPeers();
  INFO(kInit, "rank %d: communicator revoked", comm->rank);
  return flagcxSuccess;
}

}  // namespace flagcx
