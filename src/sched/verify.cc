// Symbolic simulation of a whole schedule (see verify.h for the model).
#include "sched/verify.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>

#include "sched/ir_names.h"

namespace flagcx {

namespace {

using Item = uint64_t;  // rank * N + data-space chunk

struct ChunkState {
  bool valid = false;
  std::vector<Item> items;  // sorted multiset
};

struct RankState {
  std::vector<ChunkState> buf[3];  // input, output, scratch
  std::vector<uint8_t> heard;       // barrier: ranks heard from
};

bool isComm(StepKind k) { return k == StepKind::Send || k == StepKind::Recv || k == StepKind::RecvReduce; }

class Verifier {
 public:
  explicit Verifier(const Schedule &s) : s_(s), n_(s.nranks), N_(s.chunks) {}

  bool run(std::string *err) {
    err_ = err;
    return shape() && staticChecks() && hazards() && match() && sizes() && simulate() &&
           finalCheck();
  }

 private:
  const Schedule &s_;
  int n_, N_;
  std::string *err_ = nullptr;
  // partner_[r][i] = (rank, step) of the matching message step, for comm steps.
  std::vector<std::vector<std::pair<int, int>>> partner_;
  std::vector<RankState> st_;
  std::vector<std::vector<ChunkState>> payload_;  // per rank, per step (sends)

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
      w = "(stage " + std::to_string(x.stage) + ", " + stepText(x) + ") " + what;
    }
    *err_ = head(rank, step) + w;
    return false;
  }
  bool barrier() const { return s_.op == OpKind::Barrier; }
  int nb(BufKind b) const { return bufChunks(s_.op, b, N_, n_); }
  bool hasInput(int r) const {
    return !((s_.op == OpKind::Broadcast || s_.op == OpKind::Scatter) && r != s_.root);
  }
  bool hasOutput(int r) const {
    return !((s_.op == OpKind::Reduce || s_.op == OpKind::Gather) && r != s_.root);
  }

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
    return true;
  }

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
        }
        if (x.kind == StepKind::Reduce || x.kind == StepKind::RecvReduce) {
          if (!opReduces(s_.op) && !barrier())
            return fail(r, i, std::string("reduces, but ") + opName(s_.op) + " is not a reduction");
        }
      }
    }
    return true;
  }

  // Steps of one stage run concurrently: none may write a chunk another reads
  // or writes.
  bool hazards() {
    if (barrier()) return true;
    for (int r = 0; r < n_; r++) {
      const auto &steps = s_.ranks[r].steps;
      std::map<std::pair<int, int>, std::pair<int, bool>> seen;  // chunk -> (step, wrote)
      int stage = -1;
      for (int i = 0; i < static_cast<int>(steps.size()); i++) {
        const Step &x = steps[i];
        if (x.stage != stage) {
          seen.clear();
          stage = x.stage;
        }
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
        }
        if (!ok) return false;
      }
    }
    return true;
  }

  bool match() {
    partner_.assign(n_, {});
    for (int r = 0; r < n_; r++) partner_[r].assign(s_.ranks[r].steps.size(), {-1, -1});
    // Per directed pair (a -> b): a's sends and b's receives, in order.
    std::map<std::pair<int, int>, std::pair<std::vector<int>, std::vector<int>>> q;
    for (int r = 0; r < n_; r++) {
      const auto &steps = s_.ranks[r].steps;
      for (int i = 0; i < static_cast<int>(steps.size()); i++) {
        const Step &x = steps[i];
        if (x.kind == StepKind::Send) q[{r, x.peer}].first.push_back(i);
        else if (isComm(x.kind)) q[{x.peer, r}].second.push_back(i);
      }
    }
    for (auto &[pair, lists] : q) {
      auto [a, b] = pair;
      const auto &sends = lists.first;
      const auto &recvs = lists.second;
      size_t m = std::min(sends.size(), recvs.size());
      for (size_t k = 0; k < m; k++) {
        partner_[a][sends[k]] = {b, recvs[k]};
        partner_[b][recvs[k]] = {a, sends[k]};
      }
      std::string counts = "rank " + std::to_string(a) + " sends " + std::to_string(sends.size()) +
                           " message(s) to rank " + std::to_string(b) + ", which receives " +
                           std::to_string(recvs.size()) + " from it";
      if (sends.size() > m) return fail(a, sends[m], "has no matching receive: " + counts);
      if (recvs.size() > m) return fail(b, recvs[m], "has no matching send: " + counts);
    }
    return true;
  }

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
    uint64_t TB = nbuf == N_ ? T : T / n_;
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
            auto [b, j] = partner_[r][i];
            uint64_t a = chunkSize(r, x.src, count), z = chunkSize(b, s_.ranks[b].steps[j].dst, count);
            if (a != z)
              return fail(r, i, "sends " + std::to_string(a) + " elements but rank " +
                                    std::to_string(b) + " step " + std::to_string(j) + " receives " +
                                    std::to_string(z) + " (count=" + std::to_string(count) + ")");
          } else if (x.kind == StepKind::Copy || x.kind == StepKind::Reduce) {
            uint64_t a = chunkSize(r, x.src, count), z = chunkSize(r, x.dst, count);
            if (a != z)
              return fail(r, i, "source has " + std::to_string(a) + " elements, destination " +
                                    std::to_string(z) + " (count=" + std::to_string(count) + ")");
          }
        }
      }
    }
    return true;
  }

  std::string itemText(Item it) const {
    return "rank " + std::to_string(it / N_) + "'s chunk " + std::to_string(it % N_);
  }

  void initState() {
    st_.assign(n_, {});
    payload_.assign(n_, {});
    for (int r = 0; r < n_; r++) {
      RankState &rs = st_[r];
      for (int b = 0; b < 3; b++) rs.buf[b].assign(nb(static_cast<BufKind>(b)), {});
      if (hasInput(r)) {
        int ni = nb(BufKind::Input);
        for (int k = 0; k < ni; k++) {
          int d = ni == N_ ? k : r * ni + k;
          rs.buf[0][k].valid = true;
          rs.buf[0][k].items = {static_cast<Item>(r) * N_ + d};
        }
      }
      rs.heard.assign(n_, 0);
      rs.heard[r] = 1;
      payload_[r].assign(s_.ranks[r].steps.size(), {});
    }
  }

  ChunkState &chunk(int r, const ChunkRef &c) { return st_[r].buf[static_cast<int>(c.buf)][c.chunk]; }

  // Steps [begin, end) of rank r's stage `stage`.
  std::vector<std::vector<std::pair<int, int>>> stageRanges_;

  void enterStage(int r, int stage) {
    auto [b, e] = stageRanges_[r][stage];
    for (int i = b; i < e; i++) {
      const Step &x = s_.ranks[r].steps[i];
      if (x.kind != StepKind::Send) continue;
      if (barrier()) {
        ChunkState p;
        for (int q = 0; q < n_; q++)
          if (st_[r].heard[q]) p.items.push_back(q);
        payload_[r][i] = std::move(p);
      } else {
        payload_[r][i] = chunk(r, x.src);
      }
    }
  }

  static void merge(std::vector<Item> &dst, const std::vector<Item> &src) {
    std::vector<Item> out;
    out.reserve(dst.size() + src.size());
    std::merge(dst.begin(), dst.end(), src.begin(), src.end(), std::back_inserter(out));
    dst.swap(out);
  }

  bool readable(int r, int i, const ChunkRef &c) {
    if (barrier() || chunk(r, c).valid) return true;
    return fail(r, i, "reads " + refText(c) + " before anything was written to it");
  }

  bool completeStage(int r, int stage) {
    auto [b, e] = stageRanges_[r][stage];
    for (int i = b; i < e; i++) {
      const Step &x = s_.ranks[r].steps[i];
      switch (x.kind) {
        case StepKind::Send:
          if (!barrier() && !payload_[r][i].valid)
            return fail(r, i, "sends " + refText(x.src) + " before anything was written to it");
          break;
        case StepKind::Recv:
        case StepKind::RecvReduce: {
          auto [p, j] = partner_[r][i];
          const ChunkState &msg = payload_[p][j];
          if (barrier()) {
            for (Item q : msg.items) st_[r].heard[q] = 1;
            break;
          }
          ChunkState &d = chunk(r, x.dst);
          if (x.kind == StepKind::Recv) {
            d = msg;
          } else {
            if (!readable(r, i, x.dst)) return false;
            merge(d.items, msg.items);
          }
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
          std::vector<Item> src = chunk(r, x.src).items;
          merge(chunk(r, x.dst).items, src);
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
        enterStage(r, 0);
        unfinished++;
      }
    }
    auto posted = [&](int p, int j) { return cur[p] >= s_.ranks[p].steps[j].stage; };
    // First step of r's current stage whose partner has not been posted.
    auto blocker = [&](int r) {
      auto [b, e] = stageRanges_[r][cur[r]];
      for (int i = b; i < e; i++) {
        if (!isComm(s_.ranks[r].steps[i].kind)) continue;
        auto [p, j] = partner_[r][i];
        if (!posted(p, j)) return i;
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
          if (cur[r] < s_.ranks[r].nstages) enterStage(r, cur[r]);
          else unfinished--;
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
      r = partner_[r][blocker(r)].first;
    }
    std::string what = "deadlock:";
    for (size_t k = pos[r]; k < order.size(); k++) {
      int a = order[k];
      int i = blocker(a);
      auto [p, j] = partner_[a][i];
      what += " rank " + std::to_string(a) + " step " + std::to_string(i) + " (stage " +
              std::to_string(s_.ranks[a].steps[i].stage) + ", " + stepText(s_.ranks[a].steps[i]) +
              ") waits for rank " + std::to_string(p) + " step " + std::to_string(j) + " (stage " +
              std::to_string(s_.ranks[p].steps[j].stage) + "), but rank " + std::to_string(p) +
              " is at stage " + std::to_string(cur[p]) + ";";
    }
    what.pop_back();
    *err_ = head(r, blocker(r)) + what;
    return false;
  }

  std::vector<Item> expected(int r, int k) const {
    std::vector<Item> e;
    auto item = [&](int rank, int d) { return static_cast<Item>(rank) * N_ + d; };
    int B = N_ / n_;
    switch (s_.op) {
      case OpKind::AllReduce:
      case OpKind::Reduce:
        for (int q = 0; q < n_; q++) e.push_back(item(q, k));
        break;
      case OpKind::ReduceScatter:
        for (int q = 0; q < n_; q++) e.push_back(item(q, r * B + k));
        break;
      case OpKind::Broadcast: e.push_back(item(s_.root, k)); break;
      case OpKind::AllGather:
      case OpKind::Gather: e.push_back(item(k / B, k)); break;
      case OpKind::Scatter: e.push_back(item(s_.root, r * B + k)); break;
      case OpKind::AlltoAll: e.push_back(item(k / B, r * B + k % B)); break;
      case OpKind::AlltoAllv: e.push_back(item(k, r)); break;
      default: break;
    }
    std::sort(e.begin(), e.end());
    return e;
  }

  bool finalCheck() {
    if (barrier()) {
      for (int r = 0; r < n_; r++)
        for (int q = 0; q < n_; q++)
          if (!st_[r].heard[q])
            return fail(r, -1, "finishes the barrier without hearing (even indirectly) from rank " +
                                   std::to_string(q));
      return true;
    }
    for (int r = 0; r < n_; r++) {
      if (!hasOutput(r)) continue;
      int no = nb(BufKind::Output);
      for (int k = 0; k < no; k++) {
        const ChunkState &c = st_[r].buf[1][k];
        std::string name = "output[" + std::to_string(k) + "]";
        if (!c.valid) return fail(r, -1, name + " is never written");
        std::vector<Item> want = expected(r, k);
        if (c.items == want) continue;
        std::vector<Item> extra, missing;
        std::set_difference(c.items.begin(), c.items.end(), want.begin(), want.end(),
                            std::back_inserter(extra));
        std::set_difference(want.begin(), want.end(), c.items.begin(), c.items.end(),
                            std::back_inserter(missing));
        std::string what = name + " ends wrong:";
        for (size_t m = 0; m < extra.size() && m < 3; m++) {
          bool twice = std::binary_search(want.begin(), want.end(), extra[m]);
          what += " " + itemText(extra[m]) + (twice ? " is counted more than once;" : " does not belong there;");
        }
        for (size_t m = 0; m < missing.size() && m < 3; m++) what += " " + itemText(missing[m]) + " is missing;";
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
  std::vector<int> roots{0};
  if (opIsRooted(script.op())) {
    roots.clear();
    if (t.nranks <= 16) {
      for (int r = 0; r < t.nranks; r++) roots.push_back(r);
    } else {
      roots = {0, 1, t.nranks / 2, t.nranks - 1};
    }
  }
  for (int root : roots) {
    Schedule s;
    if (!script.compileAll(t, root, &s, err)) return false;
    if (!verifySchedule(s, err)) return false;
  }
  return true;
}

}  // namespace flagcx
