// The flight recorder (flight.h): recording operations and writing the dump.
#include "exec/flight.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "base/base.h"

namespace flagcx {

namespace {
double nowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}
const char *stateName(int s) {
  return s == 1 ? "running" : s == 2 ? "done" : s == 3 ? "failed" : "empty";
}
}  // namespace

void FlightRecorder::init(int rank, int nranks, size_t capacity) {
  rank_ = rank;
  nranks_ = nranks;
  ring_.assign(capacity ? capacity : 1, FlightEntry());
}

namespace {
// Bounded copy that always terminates (names longer than the field are cut).
void copyName(char *dst, size_t cap, const char *src) {
  size_t i = 0;
  for (; i + 1 < cap && src[i]; i++) dst[i] = src[i];
  dst[i] = 0;
}
}  // namespace

FlightEntry *FlightRecorder::begin(uint64_t seq, const char *op, const char *algo,
                                   uint64_t bytes, int dtype, int root) {
  std::lock_guard<std::mutex> lk(mu_);
  FlightEntry &e = ring_[count_++ % ring_.size()];
  e = FlightEntry();
  e.seq = seq;
  copyName(e.op, sizeof(e.op), op);  // not snprintf: this runs for every operation
  copyName(e.algo, sizeof(e.algo), algo ? algo : "-");
  e.bytes = bytes;
  e.dtype = dtype;
  e.root = root;
  e.state = 1;
  e.startUs = nowUs();
  return &e;
}

FlightEntry *FlightRecorder::retag(FlightEntry *e, const char *algo) {
  std::lock_guard<std::mutex> lk(mu_);
  copyName(e->algo, sizeof(e->algo), algo ? algo : "-");
  return e;
}

void FlightRecorder::end(FlightEntry *e, bool ok) {
  if (!e) return;
  e->state = ok ? 2 : 3;
  e->endUs = nowUs();
}

std::string FlightRecorder::text() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::ostringstream os;
  os << "flagcx-flight-recorder rank " << rank_ << " nranks " << nranks_ << "\n";
  os << "# seq op algo bytes dtype root stage state start_us end_us\n";
  uint64_t n = std::min<uint64_t>(count_, ring_.size());
  for (uint64_t i = count_ - n; i < count_; i++) {
    const FlightEntry &e = ring_[i % ring_.size()];
    char line[256];
    snprintf(line, sizeof(line), "%llu %s %s %llu %d %d %d %s %.0f %.0f\n",
             static_cast<unsigned long long>(e.seq), e.op, e.algo,
             static_cast<unsigned long long>(e.bytes), e.dtype, e.root, e.stage,
             stateName(e.state), e.startUs, e.endUs);
    os << line;
  }
  return os.str();
}

void FlightRecorder::dump(const char *why) {
  std::string t = text();
  std::string file = paramStr(Param::FLIGHT_RECORDER_FILE);
  if (!file.empty()) {
    std::string name;
    for (size_t i = 0; i < file.size(); i++) {
      if (file[i] == '%' && i + 1 < file.size() && file[i + 1] == 'r') {
        name += std::to_string(rank_);
        i++;
      } else {
        name += file[i];
      }
    }
    std::ofstream f(name, std::ios::trunc);
    f << "# " << why << "\n" << t;
    if (f.good()) {
      INFO(kColl, "rank %d: flight recorder written to %s (%s)", rank_, name.c_str(), why);
      return;
    }
  }
  // Into the log, one line per operation, at INFO so the WARN stays the cause.
  std::istringstream is(t);
  std::string line;
  while (std::getline(is, line)) INFO(kColl, "flight recorder (%s): %s", why, line.c_str());
}

std::string compareFlightDumps(const std::vector<std::string> &files, bool *ok) {
  struct Op {
    std::string op, algo, state;
    uint64_t bytes = 0;
    int dtype = 0, root = 0, stage = 0;
  };
  struct RankDump {
    int rank = -1;
    int nranks = 0;
    std::map<uint64_t, Op> ops;
    uint64_t lastDone = 0;
    bool anyDone = false;
  };
  std::vector<RankDump> dumps;
  std::ostringstream out;
  *ok = true;
  for (const auto &f : files) {
    // A dump is read whole, so it must be a regular file of bounded size (a
    // FIFO or /dev/zero would block or read forever).
    std::string text, err;
    if (!readConfigFile(f, &text, &err)) {
      out << err << "\n";
      *ok = false;
      continue;
    }
    std::istringstream in(text);
    RankDump d;
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ls(line);
      if (line.rfind("flagcx-flight-recorder", 0) == 0) {
        std::string w;
        ls >> w >> w >> d.rank >> w >> d.nranks;
        continue;
      }
      uint64_t seq;
      Op o;
      double s, e;
      if (!(ls >> seq >> o.op >> o.algo >> o.bytes >> o.dtype >> o.root >> o.stage >> o.state >> s >> e))
        continue;
      if (o.op == "p2p") continue;  // point-to-point calls differ by design
      d.ops[seq] = o;
      if (o.state == "done" && (!d.anyDone || seq > d.lastDone)) {
        d.lastDone = seq;
        d.anyDone = true;
      }
    }
    if (d.rank < 0) {
      out << f << ": not a flagcx flight-recorder dump\n";
      *ok = false;
      continue;
    }
    dumps.push_back(d);
  }
  if (dumps.size() < 2) {
    out << "need dumps of at least two ranks\n";
    *ok = false;
    return out.str();
  }
  // Divergence: the same sequence number with different calls.
  std::map<uint64_t, std::vector<std::pair<int, const Op *>>> bySeq;
  for (auto &d : dumps)
    for (auto &[seq, o] : d.ops) bySeq[seq].push_back({d.rank, &o});
  for (auto &[seq, v] : bySeq) {
    for (size_t i = 1; i < v.size(); i++) {
      const Op &a = *v[0].second, &b = *v[i].second;
      if (a.op != b.op || a.bytes != b.bytes || a.dtype != b.dtype || a.root != b.root) {
        out << "DIVERGED at operation #" << seq << ": rank " << v[0].first << " called " << a.op
            << " (" << a.bytes << " bytes, dtype " << a.dtype << ", root " << a.root
            << ") but rank " << v[i].first << " called " << b.op << " (" << b.bytes
            << " bytes, dtype " << b.dtype << ", root " << b.root << ")\n";
        return out.str();
      }
    }
  }
  // Otherwise: who stopped first (fewest completed operations).
  uint64_t minDone = UINT64_MAX, maxDone = 0;
  for (auto &d : dumps) {
    uint64_t v = d.anyDone ? d.lastDone + 1 : 0;
    minDone = std::min(minDone, v);
    maxDone = std::max(maxDone, v);
  }
  // Ranks that left no dump never saw an error: when every rank that did
  // waits in the same operation, the silent ones are the ones that stopped.
  int nr = 0;
  for (auto &d : dumps) nr = std::max(nr, d.nranks);
  std::vector<int> missing;
  for (int r = 0; r < nr; r++) {
    bool have = false;
    for (auto &d : dumps) have = have || d.rank == r;
    if (!have) missing.push_back(r);
  }
  if (minDone == maxDone && !missing.empty()) {
    out << "STOPPED FIRST:";
    for (int r : missing) out << " rank " << r;
    out << " (left no dump while the others wait in operation #" << maxDone << ")\n";
    *ok = true;
    return out.str();
  }
  if (minDone == maxDone) {
    out << "all " << dumps.size() << " ranks completed the same operations (through #"
        << (maxDone ? maxDone - 1 : 0) << ")\n";
    return out.str();
  }
  out << "STOPPED FIRST:";
  for (auto &d : dumps)
    if ((d.anyDone ? d.lastDone + 1 : 0) == minDone) out << " rank " << d.rank;
  out << " (completed " << minDone << " operation(s); others reached " << maxDone << ")\n";
  return out.str();
}

}  // namespace flagcx
