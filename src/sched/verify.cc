// Symbolic simulation of a whole schedule (see verify.h for the model).
// Memory is O(total steps): the steps, a partner per message step, chunk
// states and in-flight payloads as ContribSets (a run or two each;
// contrib.h).  A payload is taken when its send's stage starts and dropped
// when its receive completes.
#include "sched/verify.h"

#include <algorithm>
#include <cstdint>
#include <map>

#include "sched/contrib.h"
#include "sched/ir_names.h"

namespace flagcx {

namespace {

struct ChunkState {
  bool valid = false;
  ContribSet items;
};

bool isComm(StepKind k) { return k == StepKind::Send || k == StepKind::Recv || k == StepKind::RecvReduce; }

class Verifier {
 public:
  explicit Verifier(const Schedule &s) : s_(s), n_(s.nranks), N_(s.chunks) {}

  bool run(std::string *err) {
    err_ = err;
    return shape() && index() && staticChecks() && hazards() && match() && sizes() &&
           simulate() && finalCheck();
  }

 private:
  const Schedule &s_;
  int n_, N_;
  std::string *err_ = nullptr;
  // Steps are numbered globally: rank r's step i is base_[r] + i.
  std::vector<uint32_t> base_;
  std::vector<uint32_t> partner_;      // global index of the matching message step
  std::vector<int32_t> partnerRank_;  // and its rank
  std::vector<std::vector<ChunkState>> st_;  // per rank: input, output, scratch chunks
  std::vector<ContribSet> heard_;            // barrier: per rank, ranks heard from
  // Sends in flight: slot_[global step] indexes pool_; free slots are reused.
  std::vector<uint32_t> slot_;
  std::vector<ChunkState> pool_;
  std::vector<uint32_t> freeSlots_;

  std::string head(int rank = -1, int step = -1) const {
    std::string h = std::string("verify ") + opName(s_.op) + "/" + s_.algo +
                    " nranks=" + std::to_string(n_);
    if (opIsRooted(s_.op)) h += " root=" + std::to_string(s_.root);
    if (rank >= 0) h += " rank=" + std::to_string(rank);
    if (step >= 0) h += " step=" + std::to_string(step);
    return h + ": ";
  }
  bool fail(int rank, int step, const std::string &what) {
    std::string w = what;
    if (rank >= 0 && step >= 0) {
      const Step &x = s_.ranks[rank].steps[step];
      w = "(stage " + std::to_string(x.stage) + ", " + stepText(x, &s_.ranks[rank]) + ") " + what;
    }
    *err_ = head(rank, step) + w;
    return false;
  }
  bool barrier() const { return s_.op == OpKind::Barrier; }
  int nb(BufKind b) const { return bufChunks(s_.op, b, N_, n_, s_.scratchCopies); }
  bool hasInput(int r) const {
    return !((s_.op == OpKind::Broadcast || s_.op == OpKind::Scatter) && r != s_.root);
  }
  bool hasOutput(int r) const {
    return !((s_.op == OpKind::Reduce || s_.op == OpKind::Gather) && r != s_.root);
  }
  // Item of rank q's data-space chunk d (chunk-major, see contrib.h).
  uint64_t item(int q, int d) const { return static_cast<uint64_t>(d) * n_ + q; }

  bool shape() {
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
    if (s_.scratchCopies < 1 || int64_t(s_.scratchCopies) * N_ > (1 << 20))
      return fail(-1, -1, "scratch_copies must be at least 1, at most 2^20 chunks in all");
    return true;
  }

  bool index() {  // base_[r]: rank r's first global step; base_[n]: the total
    base_.assign(n_ + 1, 0);
    for (int r = 0; r < n_; r++) {
      uint64_t t = uint64_t(base_[r]) + s_.ranks[r].steps.size();
      if (t >= UINT32_MAX) return fail(-1, -1, "too many steps to verify (4 G)");
      base_[r + 1] = static_cast<uint32_t>(t);
    }
    return true;
  }
  uint32_t total() const { return base_[n_]; }
  bool checkRef(int r, int i, const ChunkRef &c, bool write) {
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

  bool staticChecks() {
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

  // The chunks a fold reads (its sources; one that is also its destination
  // counts as the write only: the fold reads it before it writes) and writes.
  template <class F>
  static void foldUses(const RankSchedule &rs, const Step &x, F use) {
    const std::vector<ChunkRef> *src = foldSources(rs, x);
    for (const ChunkRef &c : *src)
      if (c.buf != x.dst.buf || c.chunk != x.dst.chunk) use(c, false);
    use(x.dst, true);
  }

  // Steps of one stage run concurrently: none may write a chunk another reads
  // or writes.  Found by sorting a stage's chunk uses; the message comes from
  // a walk in step order (hazardText) over the stage that has one.
  bool hazards() {
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

  bool hazardText(int r, size_t b, size_t e) {
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
  bool match() {
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
  const Step &partnerStep(uint32_t g) const {
    int p = partnerRank_[g];
    return s_.ranks[p].steps[partner_[g] - base_[p]];
  }
  int partnerIdx(uint32_t g) const { return static_cast<int>(partner_[g] - base_[partnerRank_[g]]); }

  // Elements of chunk c on rank r, for a call with `count` elements.
  uint64_t chunkSize(int r, const ChunkRef &c, uint64_t count) const {
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

  bool sizes() {
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

  std::string itemText(uint64_t it) const {
    return "rank " + std::to_string(it % n_) + "'s chunk " + std::to_string(it / n_);
  }

  void initState() {
    st_.assign(n_, {});
    slot_.assign(total(), 0);
    if (barrier()) {
      heard_.assign(n_, {});
      for (int r = 0; r < n_; r++) heard_[r] = ContribSet::one(r);
    }
    int ni = nb(BufKind::Input), no = nb(BufKind::Output);
    for (int r = 0; r < n_; r++) {
      std::vector<ChunkState> &c = st_[r];
      c.assign(ni + no + nb(BufKind::Scratch), {});
      if (!hasInput(r)) continue;
      for (int k = 0; k < ni; k++) {
        int d = ni == N_ ? k : r * ni + k;
        c[k].valid = true;
        c[k].items = ContribSet::one(item(r, d));
      }
    }
  }

  ChunkState &chunk(int r, const ChunkRef &c) {
    int off = c.buf == BufKind::Input ? 0 : c.buf == BufKind::Output ? nb(BufKind::Input)
                                                                    : nb(BufKind::Input) + nb(BufKind::Output);
    return st_[r][off + c.chunk];
  }

  // Steps [begin, end) of rank r's stage `stage`.
  std::vector<std::vector<std::pair<int, int>>> stageRanges_;

  // A stage's sends take their payload when it starts.
  bool enterStage(int r, int stage) {
    auto [b, e] = stageRanges_[r][stage];
    for (int i = b; i < e; i++) {
      const Step &x = s_.ranks[r].steps[i];
      if (x.kind != StepKind::Send) continue;
      if (!barrier() && !chunk(r, x.src).valid)
        return fail(r, i, "sends " + refText(x.src) + " before anything was written to it");
      uint32_t k;
      if (freeSlots_.empty()) {
        k = static_cast<uint32_t>(pool_.size());
        pool_.emplace_back();
      } else {
        k = freeSlots_.back();
        freeSlots_.pop_back();
      }
      slot_[base_[r] + i] = k;
      pool_[k] = barrier() ? ChunkState{true, heard_[r]} : chunk(r, x.src);
    }
    return true;
  }

  bool readable(int r, int i, const ChunkRef &c) {
    if (barrier() || chunk(r, c).valid) return true;
    return fail(r, i, "reads " + refText(c) + " before anything was written to it");
  }

  bool completeStage(int r, int stage) {
    auto [b, e] = stageRanges_[r][stage];
    for (int i = b; i < e; i++) {
      const Step &x = s_.ranks[r].steps[i];
      uint32_t g = base_[r] + i;
      switch (x.kind) {
        case StepKind::Send: break;
        case StepKind::Recv:
        case StepKind::RecvReduce: {
          uint32_t k = slot_[partner_[g]];
          ChunkState &msg = pool_[k];
          if (barrier()) {
            heard_[r].unite(msg.items);
          } else {
            ChunkState &d = chunk(r, x.dst);
            if (x.kind == StepKind::Recv) {
              d = std::move(msg);
            } else {
              if (!readable(r, i, x.dst)) return false;
              d.items.add(msg.items);
            }
          }
          msg.items.clear();  // delivered: each send meets one receive
          freeSlots_.push_back(k);
          break;
        }
        case StepKind::Copy:
          if (barrier()) break;
          if (!readable(r, i, x.src)) return false;
          chunk(r, x.dst) = chunk(r, x.src);
          break;
        case StepKind::Reduce: {
          if (barrier()) break;
          if (!readable(r, i, x.src) || !readable(r, i, x.dst)) return false;
          ContribSet src = chunk(r, x.src).items;
          chunk(r, x.dst).items.add(src);
          break;
        }
        case StepKind::Fold: {
          if (barrier()) break;
          ContribSet sum;
          for (const ChunkRef &c : *foldSources(s_.ranks[r], x)) {
            if (!readable(r, i, c)) return false;
            sum.add(chunk(r, c).items);
          }
          ChunkState &d = chunk(r, x.dst);
          d.valid = true;
          d.items = std::move(sum);
          break;
        }
      }
    }
    return true;
  }

  bool simulate() {
    initState();
    stageRanges_.assign(n_, {});
    for (int r = 0; r < n_; r++) {
      const RankSchedule &rs = s_.ranks[r];
      stageRanges_[r].assign(rs.nstages, {0, 0});
      int i = 0, ns = static_cast<int>(rs.steps.size());
      for (int stg = 0; stg < rs.nstages; stg++) {
        int b = i;
        while (i < ns && rs.steps[i].stage == stg) i++;
        stageRanges_[r][stg] = {b, i};
      }
    }
    std::vector<int> cur(n_, 0);  // stage each rank has posted
    int unfinished = 0;
    for (int r = 0; r < n_; r++) {
      if (s_.ranks[r].nstages > 0) {
        if (!enterStage(r, 0)) return false;
        unfinished++;
      }
    }
    auto posted = [&](uint32_t g) { return cur[partnerRank_[g]] >= partnerStep(g).stage; };
    // First step of r's current stage whose partner has not been posted.
    auto blocker = [&](int r) {
      auto [b, e] = stageRanges_[r][cur[r]];
      for (int i = b; i < e; i++) {
        if (!isComm(s_.ranks[r].steps[i].kind)) continue;
        if (!posted(base_[r] + i)) return i;
      }
      return -1;
    };
    while (unfinished > 0) {
      bool progress = false;
      for (int r = 0; r < n_; r++) {
        while (cur[r] < s_.ranks[r].nstages && blocker(r) < 0) {
          if (!completeStage(r, cur[r])) return false;
          cur[r]++;
          progress = true;
          if (cur[r] < s_.ranks[r].nstages) {
            if (!enterStage(r, cur[r])) return false;
          } else {
            unfinished--;
          }
        }
      }
      if (!progress) return deadlock(cur, blocker);
    }
    return true;
  }

  template <class F>
  bool deadlock(const std::vector<int> &cur, F blocker) {
    int start = -1;
    for (int r = 0; r < n_ && start < 0; r++)
      if (cur[r] < s_.ranks[r].nstages) start = r;
    // Follow "waits for" edges until a rank repeats: that is the cycle.
    std::vector<int> order, pos(n_, -1);
    int r = start;
    while (pos[r] < 0) {
      pos[r] = static_cast<int>(order.size());
      order.push_back(r);
      r = partnerRank_[base_[r] + blocker(r)];
    }
    std::string what = "deadlock:";
    for (size_t k = pos[r]; k < order.size(); k++) {
      int a = order[k];
      int i = blocker(a);
      uint32_t g = base_[a] + i;
      int p = partnerRank_[g];
      what += " rank " + std::to_string(a) + " step " + std::to_string(i) + " (stage " +
              std::to_string(s_.ranks[a].steps[i].stage) + ", " + stepText(s_.ranks[a].steps[i]) +
              ") waits for rank " + std::to_string(p) + " step " + std::to_string(partnerIdx(g)) +
              " (stage " + std::to_string(partnerStep(g).stage) + "), but rank " +
              std::to_string(p) + " is at stage " + std::to_string(cur[p]) + ";";
    }
    what.pop_back();
    *err_ = head(r, blocker(r)) + what;
    return false;
  }

  // What output chunk k of rank r must hold at the end.
  ContribSet expected(int r, int k) const {
    int B = N_ / n_;
    switch (s_.op) {
      case OpKind::AllReduce:
      case OpKind::Reduce: return ContribSet::range(item(0, k), item(0, k) + n_);
      case OpKind::ReduceScatter: return ContribSet::range(item(0, r * B + k), item(0, r * B + k) + n_);
      case OpKind::Broadcast: return ContribSet::one(item(s_.root, k));
      case OpKind::AllGather:
      case OpKind::Gather: return ContribSet::one(item(k / B, k));
      case OpKind::Scatter: return ContribSet::one(item(s_.root, r * B + k));
      case OpKind::AlltoAll: return ContribSet::one(item(k / B, r * B + k % B));
      case OpKind::AlltoAllv: return ContribSet::one(item(k, r));
      default: return {};
    }
  }

  bool finalCheck() {
    if (barrier()) {
      ContribSet all = ContribSet::range(0, n_);
      for (int r = 0; r < n_; r++) {
        if (heard_[r] == all) continue;
        ContribSet::Diff d = heard_[r].diff(all, 1);
        return fail(r, -1, "finishes the barrier without hearing (even indirectly) from rank " +
                               std::to_string(d.missing.empty() ? 0 : d.missing[0]));
      }
      return true;
    }
    for (int r = 0; r < n_; r++) {
      if (!hasOutput(r)) continue;
      int no = nb(BufKind::Output);
      for (int k = 0; k < no; k++) {
        const ChunkState &c = chunk(r, ChunkRef{BufKind::Output, k});
        std::string name = "output[" + std::to_string(k) + "]";
        if (!c.valid) return fail(r, -1, name + " is never written");
        ContribSet want = expected(r, k);
        if (c.items == want) continue;
        ContribSet::Diff d = c.items.diff(want, 3);
        std::string what = name + " ends wrong:";
        for (auto [it, wanted] : d.extra)
          what += " " + itemText(it) + (wanted ? " is counted more than once;" : " does not belong there;");
        for (uint64_t it : d.missing) what += " " + itemText(it) + " is missing;";
        what.pop_back();
        return fail(r, -1, what);
      }
    }
    return true;
  }
};

}  // namespace

bool verifySchedule(const Schedule &s, std::string *err) { return Verifier(s).run(err); }

bool verifyScript(Script &script, const Topo &t, std::string *err, std::string *skipped) {
  std::string why;
  if (skipped) skipped->clear();
  if (!script.supports(t, &why)) {
    if (why.find(':') != std::string::npos && why.find(script.path()) == 0) {
      *err = why;  // a Lua error inside requires()
      return false;
    }
    if (skipped) *skipped = why;
    return true;
  }
  Schedule s;
  if (!script.compileAll(t, 0, &s, err)) return false;
  if (!verifySchedule(s, err)) return false;
  // A rooted fold_order script is built at each root: verify each.
  if (opIsRooted(script.op()) && script.foldOrder()) {
    for (int root = 1; root < t.nranks; root++)
      if (!script.compileAll(t, root, &s, err) || !verifySchedule(s, err)) return false;
    return true;
  }
  // Other rooted ops run every root from this schedule, relabelled
  // (script.h): check the relabelling too, at the root farthest from 0.
  if (opIsRooted(script.op()) && t.nranks > 1) {
    relabelRoot(&s, t.nranks - 1);
    if (!verifySchedule(s, err)) return false;
  }
  return true;
}

}  // namespace flagcx
