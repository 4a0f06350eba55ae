// Segment (segment.h): creating, opening, mapping and unlinking POSIX
// shared-memory segments, and the TSan keys of their handshakes.
#include "base/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include "base/log.h"

#ifdef FLAGCX_TSAN
extern "C" void __tsan_acquire(void *addr);
extern "C" void __tsan_release(void *addr);
#endif

namespace flagcx {

#ifdef FLAGCX_TSAN
namespace {
// The process-wide stand-ins TSan synchronizes on.  Two flags sharing one
// (a hash collision) only order more than they should, which can hide a
// report but never make one.
char g_keys[1 << 14];
char *keyOf(size_t nameHash, const void *base, const void *p) {
  size_t off = static_cast<size_t>(static_cast<const char *>(p) - static_cast<const char *>(base));
  return &g_keys[(nameHash + off / 8) % sizeof(g_keys)];
}
}  // namespace

void Segment::released(const void *p) const { __tsan_release(keyOf(nameHash_, base_, p)); }
void Segment::acquired(const void *p) const { __tsan_acquire(keyOf(nameHash_, base_, p)); }
#endif

Segment::~Segment() {
  if (base_ != nullptr) munmap(base_, bytes_);
  unlink();
}

flagcxResult_t Segment::create(const std::string &name, size_t bytes, std::shared_ptr<Segment> *out) {
  auto s = std::shared_ptr<Segment>(new Segment());
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    WARN(kShm, "shm_open(%s) failed: %s", name.c_str(), strerror(errno));
    return flagcxSystemError;
  }
  s->name_ = name;
  s->owner_ = true;
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    WARN(kShm, "cannot reserve %zu bytes for %s in /dev/shm: %s (FLAGCX_SHM_BUFFER_SIZE too large or /dev/shm too small)",
         bytes, name.c_str(), strerror(rc));
    close(fd);
    return flagcxSystemError;
  }
  FLAGCX_CHECK(s->map(fd, bytes));
  *out = std::move(s);
  return flagcxSuccess;
}

flagcxResult_t Segment::open(const std::string &name, size_t bytes, std::shared_ptr<Segment> *out) {
  auto s = std::shared_ptr<Segment>(new Segment());
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    WARN(kShm, "shm_open(%s) of a peer's segment failed: %s", name.c_str(), strerror(errno));
    return flagcxSystemError;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    WARN(kShm, "peer segment %s has %lld bytes, expected %zu", name.c_str(),
         static_cast<long long>(st.st_size), bytes);
    close(fd);
    return flagcxSystemError;
  }
  s->name_ = name;  // not the owner: never unlinks it
  FLAGCX_CHECK(s->map(fd, bytes));
  *out = std::move(s);
  return flagcxSuccess;
}

void Segment::unlink() {
  if (owner_ && !name_.empty()) shm_unlink(name_.c_str());
  owner_ = false;
}

flagcxResult_t Segment::map(int fd, size_t bytes) {
  void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    WARN(kShm, "mmap of %zu bytes of %s failed: %s", bytes, name_.c_str(), strerror(errno));
    return flagcxSystemError;
  }
  base_ = p;
  bytes_ = bytes;
  nameHash_ = std::hash<std::string>()(name_);
  return flagcxSuccess;
}

}  // namespace flagcx
