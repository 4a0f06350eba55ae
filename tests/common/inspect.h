// What multi-rank tests look at besides exit codes (tests/common/harness.h
// runs the ranks): a page of memory shared between the test process and its
// forked ranks, monotonic timestamps that compare across processes
// (CLOCK_MONOTONIC is system-wide), /proc inspection (open fds, threads,
// listening TCP ports, /dev/shm entries, RSS), and the seeded random source
// of the kill tests.
#pragma once
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <random>
#include <set>
#include <thread>
#include <sstream>
#include <string>
#include <vector>

#include "base/sanitizers.h"

namespace harness {

inline int64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000ll + ts.tv_nsec;
}
inline double secsSince(int64_t t0) { return static_cast<double>(nowNs() - t0) / 1e9; }

// Anonymous shared memory that survives fork(); T must be trivially
// constructible from zero bytes (atomics of integers are).
template <typename T>
T *sharedBlock() {
  void *p = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    abort();
  }
  memset(p, 0, sizeof(T));
  return new (p) T();
}
template <typename T>
void freeShared(T *p) {
  p->~T();
  munmap(p, sizeof(T));
}

inline bool envIs(const char *name, const char *value) {
  const char *v = getenv(name);
  return v != nullptr && strcmp(v, value) == 0;
}

// The random choices of a kill test (victim, moment): seeded by REL_SEED
// when set, else at random; the seed is printed so that a run can be replayed.
inline std::mt19937 &relRng() {
  static std::mt19937 g([] {
    const char *v = getenv("REL_SEED");
    unsigned s = v ? static_cast<unsigned>(strtoul(v, nullptr, 10)) : 0;
    if (s == 0) s = std::random_device{}();
    printf("REL_SEED=%u\n", s);
    return s;
  }());
  return g;
}
inline int envInt(const char *name, int def) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : def;
}

// Does `text` hold `number` as a whole token (not part of a longer number)?
inline bool hasNumberToken(const std::string &text, long long number) {
  std::string want = std::to_string(number);
  size_t pos = 0;
  while ((pos = text.find(want, pos)) != std::string::npos) {
    bool before = pos == 0 || !isdigit(static_cast<unsigned char>(text[pos - 1]));
    size_t end = pos + want.size();
    bool after = end >= text.size() || !isdigit(static_cast<unsigned char>(text[end]));
    if (before && after) return true;
    pos = end;
  }
  return false;
}

inline std::string lower(std::string s) {
  for (char &c : s) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return s;
}
inline bool containsCi(const std::string &hay, const std::string &needle) {
  return lower(hay).find(lower(needle)) != std::string::npos;
}

inline std::string readFile(const std::string &path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline int countDir(const std::string &dir) {
  DIR *d = opendir(dir.c_str());
  if (!d) return -1;
  int n = 0;
  while (dirent *e = readdir(d))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  closedir(d);
  return n;
}
inline int openFds() { return countDir("/proc/self/fd") - 1; }  // less the one opendir holds
inline int threadCount() { return countDir("/proc/self/task"); }
// The thread count once threads that are winding down (a detached
// rendezvous root) had a moment to leave: at most 2 s of waiting for it to
// fall to `bound`.
inline int settledThreads(int bound) {
  int t = threadCount();
  for (int i = 0; i < 200 && t > bound; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    t = threadCount();
  }
  return t;
}

// Entries in /dev/shm that flagcx made (flagcx-shm-<pid>-...), optionally
// only those whose creator pid is in `pids`.
inline std::vector<std::string> flagcxShmEntries(const std::set<int> *pids = nullptr) {
  std::vector<std::string> out;
  DIR *d = opendir("/dev/shm");
  if (!d) return out;
  while (dirent *e = readdir(d)) {
    if (strncmp(e->d_name, "flagcx", 6) != 0) continue;
    int pid = 0;
    if (pids) {
      if (sscanf(e->d_name, "flagcx-shm-%d-", &pid) != 1 || !pids->count(pid)) continue;
    }
    out.push_back(e->d_name);
  }
  closedir(d);
  return out;
}

// The /dev/shm entries that the ranks of a run left behind, unlinked here so
// that the machine stays clean.  Called after the ranks were reaped, so their
// pids are free, and pids are reused (pid_max 32768 wraps within a CI run):
//  - a name whose pid belongs to a live process now is that process's (another
//    test's rank in its short set-up window); so is a name that vanished while
//    we looked (unlinked by its owner).  Neither is touched: unlinking another
//    test's name would break its set-up.
//  - a name made before the run started (`startedNs`, CLOCK_REALTIME, 0: not
//    known) is the orphan of an earlier process that had the same pid (a rank
//    killed inside its set-up window): removed, not counted.
inline std::vector<std::string> leftoverShm(const std::vector<pid_t> &ranks, int64_t startedNs = 0) {
  constexpr int64_t kClockSlackNs = 50'000'000;  // file times come from a coarse clock
  std::set<int> pids(ranks.begin(), ranks.end());
  std::vector<std::string> found;
  for (auto &name : flagcxShmEntries(&pids)) {
    int pid = 0;
    sscanf(name.c_str(), "flagcx-shm-%d-", &pid);
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // a live process owns the pid now
    struct stat st;
    if (stat(("/dev/shm/" + name).c_str(), &st) != 0) continue;  // unlinked by its owner meanwhile
    int64_t made = static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
    shm_unlink(("/" + name).c_str());
    if (startedNs == 0 || made >= startedNs - kClockSlackNs) found.push_back(name);
  }
  return found;
}

inline long rssKb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return atol(line.c_str() + 6);
  return -1;
}

// Whether RSS growth says anything about leaks: under a sanitizer freed
// memory sits in quarantine (and is shadowed), so leak tests leave the heap
// to LeakSanitizer there.
#if defined(FLAGCX_ASAN) || defined(FLAGCX_TSAN)
constexpr bool kRssShowsLeaks = false;
#else
constexpr bool kRssShowsLeaks = true;
#endif

// Socket inodes held open by process `pid`.
inline std::set<unsigned long> socketInodes(int pid) {
  std::set<unsigned long> out;
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR *d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent *e = readdir(d)) {
    char target[256];
    std::string p = dir + "/" + e->d_name;
    ssize_t n = readlink(p.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    unsigned long ino = 0;
    if (sscanf(target, "socket:[%lu]", &ino) == 1) out.insert(ino);
  }
  closedir(d);
  return out;
}

struct Listener {
  bool v6 = false;
  std::string addrHex;  // as /proc/net/tcp prints it
  int port = 0;
  unsigned long inode = 0;
};

// TCP sockets in LISTEN state (st 0A) held by `pid`, from /proc/<pid>/net/tcp{,6}.
// A forked child also holds the listening sockets its parent had open at
// fork time (e.g. a rendezvous root's); see ownListeners.
inline std::vector<Listener> listeningPorts(int pid) {
  std::vector<Listener> out;
  std::set<unsigned long> inodes = socketInodes(pid);
  for (int v6 = 0; v6 < 2; v6++) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/net/" + (v6 ? "tcp6" : "tcp"));
    std::string line;
    std::getline(f, line);  // header
    while (std::getline(f, line)) {
      std::istringstream ls(line);
      std::string sl, local, remote, st, txrx, tr, retr, uid, timeout;
      unsigned long inode = 0;
      ls >> sl >> local >> remote >> st >> txrx >> tr >> retr >> uid >> timeout >> inode;
      if (st != "0A" || !inodes.count(inode)) continue;
      size_t colon = local.find(':');
      if (colon == std::string::npos) continue;
      Listener l;
      l.v6 = v6 != 0;
      l.addrHex = local.substr(0, colon);
      l.port = static_cast<int>(strtol(local.substr(colon + 1).c_str(), nullptr, 16));
      l.inode = inode;
      out.push_back(l);
    }
  }
  return out;
}

// The listeners of each pid that no other pid in `pids` holds: the sockets
// each process opened itself, less those inherited through fork().
inline std::vector<std::vector<Listener>> ownListeners(const std::vector<int> &pids) {
  std::vector<std::vector<Listener>> all;
  std::multiset<unsigned long> seen;
  for (int pid : pids) {
    all.push_back(listeningPorts(pid));
    for (auto &l : all.back()) seen.insert(l.inode);
  }
  for (auto &v : all) {
    std::vector<Listener> mine;
    for (auto &l : v)
      if (seen.count(l.inode) == 1) mine.push_back(l);
    v = mine;
  }
  return all;
}

// A blocking TCP connection to a listener found above (an "any" address is
// reached through loopback); -1 on failure.
inline int connectListener(const Listener &l) {
  int fd = socket(l.v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int rc;
  if (l.v6) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(static_cast<uint16_t>(l.port));
    bool any = true;
    for (int i = 0; i < 4; i++) {
      uint32_t w = static_cast<uint32_t>(strtoul(l.addrHex.substr(static_cast<size_t>(i) * 8, 8).c_str(), nullptr, 16));
      memcpy(reinterpret_cast<char *>(&a.sin6_addr) + i * 4, &w, 4);
      any = any && w == 0;
    }
    if (any) a.sin6_addr = in6addr_loopback;
    rc = connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(l.port));
    a.sin_addr.s_addr = static_cast<uint32_t>(strtoul(l.addrHex.c_str(), nullptr, 16));
    if (a.sin_addr.s_addr == 0) a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a);
  }
  if (rc != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace harness
