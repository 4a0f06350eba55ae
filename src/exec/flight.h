// The flight recorder: each communicator remembers its last
// FLAGCX_FLIGHT_RECORDER_SIZE operations (what, how big, which algorithm,
// when, how far it got) and writes them out when something fails, so that
// the dumps of all ranks show who diverged or stopped first
// (`flagcx-info --compare-dumps FILES...`).
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace flagcx {

struct FlightEntry {
  uint64_t seq = 0;      // collective sequence number (p2p: issue ticket)
  char op[16] = {};      // "allreduce", "sendrecv", ...
  char algo[24] = {};
  uint64_t bytes = 0;
  int32_t dtype = -1;
  int32_t root = -1;
  int32_t stage = -1;    // last stage started
  int32_t state = 0;     // 0 empty, 1 running, 2 done, 3 failed
  double startUs = 0, endUs = 0;
};

class FlightRecorder {
 public:
  void init(int rank, int nranks, size_t capacity);
  FlightEntry *begin(uint64_t seq, const char *op, const char *algo, uint64_t bytes, int dtype,
                     int root);
  // The same operation, carried on by another algorithm (a fallback).
  FlightEntry *retag(FlightEntry *e, const char *algo);
  void stage(FlightEntry *e, int stage) {
    if (e) e->stage = stage;
  }
  void end(FlightEntry *e, bool ok);
  // Write to FLAGCX_FLIGHT_RECORDER_FILE (%r = rank) or to the log.
  void dump(const char *why);
  std::string text() const;

 private:
  int rank_ = 0, nranks_ = 0;
  std::vector<FlightEntry> ring_;
  uint64_t count_ = 0;
  mutable std::mutex mu_;
};

// Compare dump files of several ranks; returns a human verdict naming the
// rank(s) that diverged or stopped first.
std::string compareFlightDumps(const std::vector<std::string> &files, bool *ok);

}  // namespace flagcx
