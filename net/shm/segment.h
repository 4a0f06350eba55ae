// A POSIX shared-memory segment (/dev/shm), mapped: created by one process
// and opened by its peers by name.  The shm transport keeps its rings in
// such segments, the executor its small-collective block (src/exec/small.cc).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

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

 private:
  Segment() = default;
  flagcxResult_t map(int fd, size_t bytes);
  void *base_ = nullptr;
  size_t bytes_ = 0;
  std::string name_;
  bool owner_ = false;
};

}  // namespace flagcx
