// A POSIX shared-memory segment (/dev/shm), mapped: created by one process
// and opened by its peers by name.  The shm transport keeps its rings in
// such segments, the executor its small-collective block (src/exec/small.cc);
// it lives in base so that both reach it.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "base/sanitizers.h"
#include "flagcx.h"

namespace flagcx {

// Unlinks its name on destruction unless that was already done (unlink()),
// and unmaps.  Every failure comes with one WARN line.
class Segment {
 public:
  ~Segment();
  // A new segment of `bytes`, its pages reserved now (a full /dev/shm fails
  // here with ENOSPC instead of a SIGBUS on first use).
  static flagcxResult_t create(const std::string &name, size_t bytes, std::shared_ptr<Segment> *out);
  // A peer's segment, which must have exactly `bytes`.
  static flagcxResult_t open(const std::string &name, size_t bytes, std::shared_ptr<Segment> *out);
  void unlink();
  char *base() const { return static_cast<char *>(base_); }
  const std::string &name() const { return name_; }
  // For ThreadSanitizer only (no code otherwise).  Ranks that are threads of
  // one process map a segment at different addresses, and TSan pairs a
  // release with an acquire by address: a flag stored through one mapping
  // and loaded through another orders nothing in its eyes, and every access
  // to memory the flag hands over is then reported as a race.  released(p)
  // before a release store to p, acquired(p) after an acquire load of p
  // that saw the awaited value, mirror the pair on one address per (segment
  // name, offset) for the whole process.
#ifdef FLAGCX_TSAN
  void released(const void *p) const;
  void acquired(const void *p) const;
#else
  void released(const void *) const {}
  void acquired(const void *) const {}
#endif

 private:
  Segment() = default;
  flagcxResult_t map(int fd, size_t bytes);
  void *base_ = nullptr;
  size_t bytes_ = 0;
  std::string name_;
  size_t nameHash_ = 0;  // of name_, for released/acquired
  bool owner_ = false;
};

}  // namespace flagcx
