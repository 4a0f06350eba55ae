// Mapping a peer's shared memory (the one-sided fast path and the shm
// transport's mapped pulls go through host::ipcOpenFrom / shareMap): only a
// sealed flagcx allocation is mapped (a file the peer could shrink would
// fault this process on access), it is looked up in the process the caller
// names (the kernel-proven peer), never the one the handle names, and the
// caller learns how far the mapping reaches, to check the size the peer
// declared against it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <csignal>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "base/host_memory.h"

using namespace flagcx;

namespace {

struct Handle {
  std::vector<uint8_t> bytes;
  flagcxIpcMemHandle_t h() { return reinterpret_cast<flagcxIpcMemHandle_t>(bytes.data()); }
  // The ShareRef inside (after the handle's 8-byte magic).
  ShareRef ref() const {
    ShareRef r;
    memcpy(&r, bytes.data() + 8, sizeof r);
    return r;
  }
  void setRef(const ShareRef &r) { memcpy(bytes.data() + 8, &r, sizeof r); }
};

Handle handleOf(void *p) {
  flagcxIpcMemHandle_t h = nullptr;
  size_t n = 0;
  EXPECT_EQ(host::ipcCreate(&h, &n), flagcxSuccess);
  EXPECT_EQ(host::ipcGet(h, p), flagcxSuccess);
  Handle out{std::vector<uint8_t>(reinterpret_cast<uint8_t *>(h), reinterpret_cast<uint8_t *>(h) + n)};
  host::ipcFree(h);
  return out;
}

}  // namespace

TEST(PeerMemory, TheMappingReachesToTheAllocationsEndAndNoFurther) {
  void *buf = nullptr;
  ASSERT_EQ(host::memAlloc(&buf, 1 << 20, flagcxMemDevice), flagcxSuccess);
  Handle hd = handleOf(static_cast<char *>(buf) + 64);
  void *p = nullptr;
  size_t bytes = 0;
  ASSERT_EQ(host::ipcOpenFrom(hd.h(), getpid(), &p, &bytes), flagcxSuccess);
  EXPECT_EQ(bytes, (1u << 20) - 64);
  host::ipcClose(p);
  host::memFree(buf);
}

TEST(PeerMemory, AnAllocationCannotShrinkUnderItsMappings) {
  void *buf = nullptr;
  ASSERT_EQ(host::memAlloc(&buf, 1 << 20, flagcxMemDevice), flagcxSuccess);
  ShareRef r = handleOf(buf).ref();
  EXPECT_NE(ftruncate(r.fd, 4096), 0) << "a peer mapping it would fault past 4 KiB";
  EXPECT_EQ(errno, EPERM);
  host::memFree(buf);
}

TEST(PeerMemory, AFileThatIsNotASealedAllocationIsRefused) {
  void *buf = nullptr;
  ASSERT_EQ(host::memAlloc(&buf, 1 << 20, flagcxMemDevice), flagcxSuccess);
  Handle hd = handleOf(buf);
  // What a hostile peer could name instead: a memfd of its own that it can
  // truncate after this process mapped it.
  int fd = memfd_create("not-flagcx", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  struct stat st;
  ASSERT_EQ(fstat(fd, &st), 0);
  ShareRef r = hd.ref();
  r.fd = fd;
  r.dev = static_cast<uint64_t>(st.st_dev);
  r.ino = static_cast<uint64_t>(st.st_ino);
  hd.setRef(r);
  void *p = nullptr;
  size_t bytes = 0;
  EXPECT_EQ(host::ipcOpenFrom(hd.h(), getpid(), &p, &bytes), flagcxInvalidArgument);
  close(fd);
  host::memFree(buf);
}

TEST(PeerMemory, TheFdIsLookedUpInTheProcessTheCallerNames) {
  void *buf = nullptr;
  ASSERT_EQ(host::memAlloc(&buf, 1 << 20, flagcxMemDevice), flagcxSuccess);
  Handle hd = handleOf(buf);
  ShareRef r = hd.ref();
  r.pid = 1;  // what the handle claims does not matter
  hd.setRef(r);
  void *p = nullptr;
  size_t bytes = 0;
  ASSERT_EQ(host::ipcOpenFrom(hd.h(), getpid(), &p, &bytes), flagcxSuccess);
  host::ipcClose(p);
  // A process that does not hold that allocation (a child that closed
  // every fd but the standard ones): nothing is mapped.
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  if (child == 0) {
    for (int fd = 3; fd < 1024; fd++)
      if (fd != ready[1]) close(fd);
    if (write(ready[1], "x", 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);  // its fds are closed
  close(ready[0]);
  close(ready[1]);
  EXPECT_NE(host::ipcOpenFrom(hd.h(), child, &p, &bytes), flagcxSuccess);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  host::memFree(buf);
}
