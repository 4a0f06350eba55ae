// The verifier's checks of the steps alone, before any simulation: the
// schedule's shape, chunk references, concurrent use of a chunk within a
// stage, message matching and message sizes (verifier.h).
#include <algorithm>
#include <map>

#include "sched/verifier.h"

namespace flagcx {
namespace verifier {

bool Verifier::shape() {
  if (n_ < 1 || static_cast<int>(s_.ranks.size()) != n_)
    return fail(-1, -1, "the schedule must hold one step list per rank");
  if (N_ < 1) return fail(-1, -1, "chunks(nranks) must be at least 1");
  if ((opInputIsBlock(s_.op) || opOutputIsBlock(s_.op) || s_.op == OpKind::AlltoAll) &&
      N_ % n_ != 0)
    return fail(-1, -1, "chunks(nranks)=" + std::to_string(N_) +
                            " must be a multiple of nranks for this op's block buffers");
  if (s_.op == OpKind::AlltoAllv && N_ != n_)
    return fail(-1, -1, "alltoallv needs chunks(nranks) == nranks (chunk k = block of peer k)");
  if (s_.root < 0 || s_.root >= n_) return fail(-1, -1, "root out of range");
  if (s_.foldOrder && !opReduces(s_.op))
    return fail(-1, -1, std::string("declares fold_order, but ") + opName(s_.op) +
                            " is not a reduction");
  if (s_.scratchCopies < 1 || int64_t(s_.scratchCopies) * N_ > (1 << 20))
    return fail(-1, -1, "scratch_copies must be at least 1, at most 2^20 chunks in all");
  return true;
}

bool Verifier::index() {  // base_[r]: rank r's first global step; base_[n]: the total
  base_.assign(n_ + 1, 0);
  for (int r = 0; r < n_; r++) {
    uint64_t t = uint64_t(base_[r]) + s_.ranks[r].steps.size();
    if (t >= UINT32_MAX) return fail(-1, -1, "too many steps to verify (4 G)");
    base_[r + 1] = static_cast<uint32_t>(t);
  }
  return true;
}

bool Verifier::checkRef(int r, int i, const ChunkRef &c, bool write) {
  int lim = nb(c.buf);
  if (c.chunk < 0 || c.chunk >= lim)
    return fail(r, i, "chunk " + refText(c) + " out of range (" + std::to_string(lim) + " chunks)");
  if (barrier()) return true;
  if (c.buf == BufKind::Input && write)
    return fail(r, i, "writes the input buffer, which schedules must leave unchanged");
  if (c.buf == BufKind::Input && !hasInput(r))
    return fail(r, i, "uses the input buffer, which only the root has for this op");
  if (c.buf == BufKind::Output && !hasOutput(r))
    return fail(r, i, "uses the output buffer, which only the root has for this op");
  if (c.buf == BufKind::Scratch && s_.op == OpKind::AlltoAllv)
    return fail(r, i, "alltoallv has no scratch buffer");
  return true;
}

bool Verifier::staticChecks() {
  for (int r = 0; r < n_; r++) {
    const RankSchedule &rs = s_.ranks[r];
    int prev = 0;
    for (int i = 0; i < static_cast<int>(rs.steps.size()); i++) {
      const Step &x = rs.steps[i];
      if (x.stage < prev || x.stage >= rs.nstages)
        return fail(r, i, "stage numbers must be sorted and below nstages");
      prev = x.stage;
      if (isComm(x.kind)) {
        if (x.peer < 0 || x.peer >= n_)
          return fail(r, i, "peer " + std::to_string(x.peer) + " out of range");
        if (x.peer == r) return fail(r, i, "sends to or receives from itself");
      }
      switch (x.kind) {
        case StepKind::Send:
          if (!checkRef(r, i, x.src, false)) return false;
          break;
        case StepKind::Recv:
        case StepKind::RecvReduce:
          if (!checkRef(r, i, x.dst, true)) return false;
          break;
        case StepKind::Copy:
        case StepKind::Reduce:
          if (!checkRef(r, i, x.src, false) || !checkRef(r, i, x.dst, true)) return false;
          if (x.src.buf == x.dst.buf && x.src.chunk == x.dst.chunk)
            return fail(r, i, "source and destination are the same chunk");
          break;
        case StepKind::Fold: {
          const std::vector<ChunkRef> *src = foldSources(rs, x);
          if (!src || src->empty()) return fail(r, i, "a fold needs a list of sources");
          for (const ChunkRef &c : *src)
            if (!checkRef(r, i, c, false)) return false;
          if (!checkRef(r, i, x.dst, true)) return false;
          break;
        }
      }
      if (x.kind == StepKind::Reduce || x.kind == StepKind::RecvReduce || x.kind == StepKind::Fold) {
        if (!opReduces(s_.op) && !barrier())
          return fail(r, i, std::string("reduces, but ") + opName(s_.op) + " is not a reduction");
      }
    }
  }
  return true;
}

namespace {
// The chunks a fold reads (its sources; one that is also its destination
// counts as the write only: the fold reads it before it writes) and writes.
template <class F>
void foldUses(const RankSchedule &rs, const Step &x, F use) {
  const std::vector<ChunkRef> *src = foldSources(rs, x);
  for (const ChunkRef &c : *src)
    if (c.buf != x.dst.buf || c.chunk != x.dst.chunk) use(c, false);
  use(x.dst, true);
}
}  // namespace

// Steps of one stage run concurrently: none may write a chunk another reads
// or writes.  Found by sorting a stage's chunk uses; the message comes from
// a walk in step order (hazardText) over the stage that has one.
bool Verifier::hazards() {
  if (barrier()) return true;
  struct Use {
    uint64_t key;  // buffer, chunk
    int step;
    bool write;
  };
  std::vector<Use> uses;
  for (int r = 0; r < n_; r++) {
    const auto &steps = s_.ranks[r].steps;
    size_t b = 0;
    while (b < steps.size()) {
      size_t e = b;
      while (e < steps.size() && steps[e].stage == steps[b].stage) e++;
      uses.clear();
      auto use = [&](const ChunkRef &c, int i, bool w) {
        uses.push_back({(uint64_t(static_cast<uint8_t>(c.buf)) << 32) | uint32_t(c.chunk), i, w});
      };
      for (size_t i = b; i < e; i++) {
        const Step &x = steps[i];
        int ii = static_cast<int>(i);
        if (x.kind == StepKind::Send) use(x.src, ii, false);
        else if (x.kind == StepKind::Recv || x.kind == StepKind::RecvReduce) use(x.dst, ii, true);
        else if (x.kind == StepKind::Fold) foldUses(s_.ranks[r], x, [&](const ChunkRef &c, bool w) { use(c, ii, w); });
        else use(x.src, ii, false), use(x.dst, ii, true);
      }
      std::sort(uses.begin(), uses.end(), [](const Use &p, const Use &q) {
        return p.key != q.key ? p.key < q.key : p.step < q.step;
      });
      for (size_t g = 0; g < uses.size();) {
        size_t h = g;
        bool w = false;
        while (h < uses.size() && uses[h].key == uses[g].key) w = uses[h++].write || w;
        if (h - g > 1 && w) return hazardText(r, b, e);
        g = h;
      }
      b = e;
    }
  }
  return true;
}

bool Verifier::hazardText(int r, size_t b, size_t e) {
  const auto &steps = s_.ranks[r].steps;
  std::map<std::pair<int, int>, std::pair<int, bool>> seen;  // chunk -> (step, wrote)
  for (int i = static_cast<int>(b); i < static_cast<int>(e); i++) {
    const Step &x = steps[i];
    auto touch = [&](const ChunkRef &c, bool write) {
      auto key = std::make_pair(static_cast<int>(c.buf), c.chunk);
      auto it = seen.find(key);
      if (it != seen.end() && it->second.first != i && (write || it->second.second)) {
        return fail(r, i,
                    std::string(write ? "writes " : "reads ") + refText(c) + ", which step " +
                        std::to_string(it->second.first) + " of the same stage " +
                        (it->second.second ? "writes" : "reads") +
                        "; steps of a stage run concurrently: put s:stage() between them");
      }
      if (it == seen.end()) seen[key] = {i, write};
      else if (write) it->second = {i, true};
      return true;
    };
    bool ok = true;
    switch (x.kind) {
      case StepKind::Send: ok = touch(x.src, false); break;
      case StepKind::Recv:
      case StepKind::RecvReduce: ok = touch(x.dst, true); break;
      case StepKind::Copy:
      case StepKind::Reduce: ok = touch(x.src, false) && touch(x.dst, true); break;
      case StepKind::Fold:
        foldUses(s_.ranks[r], x, [&](const ChunkRef &c, bool w) { ok = ok && touch(c, w); });
        break;
    }
    if (!ok) return false;
  }
  return fail(r, static_cast<int>(b), "steps of one stage use a chunk concurrently");
}

// Messages of a directed pair match in order: sort every message step by
// (sender, receiver, step) and pair the k-th send with the k-th receive.
bool Verifier::match() {
  uint32_t T = total();
  partner_.assign(T, 0);  // every message step gets one, or match() fails
  partnerRank_.assign(T, -1);
  struct Msg {
    uint64_t pair;  // sender * n + receiver
    uint32_t g;
  };
  std::vector<Msg> sends, recvs;
  size_t ns = 0;
  for (int r = 0; r < n_; r++)
    for (const Step &x : s_.ranks[r].steps) ns += x.kind == StepKind::Send;
  sends.reserve(ns);
  recvs.reserve(ns);
  for (int r = 0; r < n_; r++) {
    const auto &steps = s_.ranks[r].steps;
    for (size_t i = 0; i < steps.size(); i++) {
      const Step &x = steps[i];
      uint32_t g = base_[r] + static_cast<uint32_t>(i);
      if (x.kind == StepKind::Send) sends.push_back({uint64_t(r) * n_ + x.peer, g});
      else if (isComm(x.kind)) recvs.push_back({uint64_t(x.peer) * n_ + r, g});
    }
  }
  auto byPair = [](const Msg &a, const Msg &b) { return a.pair != b.pair ? a.pair < b.pair : a.g < b.g; };
  std::sort(sends.begin(), sends.end(), byPair);
  std::sort(recvs.begin(), recvs.end(), byPair);
  size_t i = 0, j = 0;
  while (i < sends.size() || j < recvs.size()) {
    uint64_t pair = std::min(i < sends.size() ? sends[i].pair : UINT64_MAX,
                             j < recvs.size() ? recvs[j].pair : UINT64_MAX);
    size_t i0 = i, j0 = j;
    while (i < sends.size() && sends[i].pair == pair) i++;
    while (j < recvs.size() && recvs[j].pair == pair) j++;
    int a = static_cast<int>(pair / n_), b = static_cast<int>(pair % n_);
    size_t ns = i - i0, nr = j - j0, m = std::min(ns, nr);
    for (size_t k = 0; k < m; k++) {
      partner_[sends[i0 + k].g] = recvs[j0 + k].g;
      partnerRank_[sends[i0 + k].g] = b;
      partner_[recvs[j0 + k].g] = sends[i0 + k].g;
      partnerRank_[recvs[j0 + k].g] = a;
    }
    if (ns == nr) continue;
    std::string counts = "rank " + std::to_string(a) + " sends " + std::to_string(ns) +
                         " message(s) to rank " + std::to_string(b) + ", which receives " +
                         std::to_string(nr) + " from it";
    if (ns > m) return fail(a, static_cast<int>(sends[i0 + m].g - base_[a]), "has no matching receive: " + counts);
    return fail(b, static_cast<int>(recvs[j0 + m].g - base_[b]), "has no matching send: " + counts);
  }
  return true;
}

// Elements of chunk c on rank r, for a call with `count` elements.
uint64_t Verifier::chunkSize(int r, const ChunkRef &c, uint64_t count) const {
  if (s_.op == OpKind::AlltoAllv) {
    // Per-peer counts that differ by rank and peer.
    auto m = [&](int from, int to) { return (count + from * 7 + to * 3) % 11; };
    return c.buf == BufKind::Input ? m(r, c.chunk) : m(c.chunk, r);
  }
  uint64_t T;
  switch (s_.op) {
    case OpKind::AllReduce:
    case OpKind::Reduce:
    case OpKind::Broadcast: T = count; break;
    case OpKind::Barrier: T = 0; break;
    default: T = count * n_;
  }
  int nbuf = nb(c.buf);
  uint64_t TB = c.buf == BufKind::Scratch ? T * s_.scratchCopies : nbuf == N_ ? T : T / n_;
  auto at = [&](uint64_t k) { return k * TB / nbuf; };
  return at(c.chunk + 1) - at(c.chunk);
}

bool Verifier::sizes() {
  static const uint64_t counts[] = {1, 7, 1009, 65537};
  for (uint64_t count : counts) {
    for (int r = 0; r < n_; r++) {
      const auto &steps = s_.ranks[r].steps;
      for (int i = 0; i < static_cast<int>(steps.size()); i++) {
        const Step &x = steps[i];
        if (x.kind == StepKind::Send) {
          uint32_t g = base_[r] + i;
          int b = partnerRank_[g];
          uint64_t a = chunkSize(r, x.src, count), z = chunkSize(b, partnerStep(g).dst, count);
          if (a != z)
            return fail(r, i, "sends " + std::to_string(a) + " elements but rank " +
                                  std::to_string(b) + " step " + std::to_string(partnerIdx(g)) +
                                  " receives " + std::to_string(z) +
                                  " (count=" + std::to_string(count) + ")");
        } else if (x.kind == StepKind::Copy || x.kind == StepKind::Reduce) {
          uint64_t a = chunkSize(r, x.src, count), z = chunkSize(r, x.dst, count);
          if (a != z)
            return fail(r, i, "source has " + std::to_string(a) + " elements, destination " +
                                  std::to_string(z) + " (count=" + std::to_string(count) + ")");
        } else if (x.kind == StepKind::Fold) {
          const std::vector<ChunkRef> &src = *foldSources(s_.ranks[r], x);
          uint64_t z = chunkSize(r, x.dst, count);
          for (size_t k = 0; k < src.size(); k++) {
            uint64_t a = chunkSize(r, src[k], count);
            if (a != z)
              return fail(r, i, "source " + std::to_string(k + 1) + " (" + refText(src[k]) +
                                    ") has " + std::to_string(a) + " elements, destination " +
                                    std::to_string(z) + " (count=" + std::to_string(count) + ")");
          }
        }
      }
    }
  }
  return true;
}

}  // namespace verifier
}  // namespace flagcx
