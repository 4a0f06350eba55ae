// kv_transfer: a KV cache moved from a prefill process to a decode process
// through the P2P engine (flagcx_p2p.h), against baselines in the same run.
//
// The cache: per layer a K and a V tensor of `blocks` blocks, each block
// tokens x heads x dim bf16 values.  A request owns `req` blocks scattered
// over the cache (different ids on each side), so one transfer is
// layers x 2 x req non-contiguous pieces, sent with one WriteVector and
// polled to completion.  Baselines, interleaved iteration by iteration:
//   process_vm_writev  the same pieces written straight into decode (one host)
//   tcp                one plain TCP stream carrying the same pieces (writev/
//                      recvmsg into the blocks, one byte back per transfer)
//   memcpy             the same pieces copied inside the prefill process
//
//   kv_transfer [options]                 both roles on this host (forked)
//   kv_transfer --role decode --dir D     /  --role prefill --dir D   (two hosts)
// options: --layers N --blocks N --heads N --dim N --tokens N --req N --iters N
//          --device host|cuda (cuda: device caches, CUDA IPC on one host; FLAGCX_DEVICE=cuda)
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flagcx.h"
#include "flagcx_p2p.h"

namespace {

struct Opt {
  int layers = 16, blocks = 128, heads = 8, dim = 128, tokens = 16, req = 64, iters = 10;
  std::string role, dir, device = "host";
};
Opt o;
flagcxDeviceHandle_t g_dev = nullptr;  // --device cuda: the caches are device memory

bool onDevice() { return o.device == "cuda"; }

// A cache of `bytes`, host or device; `init` (host bytes or null: zeros) copied in.
char *allocCache(size_t bytes, const std::vector<char> *init) {
  if (!onDevice()) {
    char *p = static_cast<char *>(std::calloc(1, bytes));
    if (p && init) std::memcpy(p, init->data(), bytes);
    return p;
  }
  void *p = nullptr;
  if (g_dev->deviceMalloc(&p, bytes, flagcxMemDevice, nullptr) != flagcxSuccess ||
      g_dev->deviceMemset(p, 0, bytes, flagcxMemDevice, nullptr) != flagcxSuccess)
    return nullptr;
  if (init && g_dev->deviceMemcpy(p, const_cast<char *>(init->data()), bytes,
                                  flagcxMemcpyHostToDevice, nullptr) != flagcxSuccess)
    return nullptr;
  return static_cast<char *>(p);
}
void freeCache(char *p) {
  if (onDevice()) g_dev->deviceFree(p, flagcxMemDevice, nullptr);
  else std::free(p);
}
std::string hex(const char *b, size_t n) {
  std::string s;
  char t[3];
  for (size_t i = 0; i < n; i++) {
    std::snprintf(t, sizeof(t), "%02x", static_cast<unsigned char>(b[i]));
    s += t;
  }
  return s;
}
void unhex(const std::string &s, char *b, size_t n) {
  for (size_t i = 0; i < n && 2 * i + 1 < s.size(); i++)
    b[i] = static_cast<char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
}

size_t blockBytes() { return size_t(o.tokens) * o.heads * o.dim * 2; }  // bf16
size_t cacheBytes() { return size_t(o.layers) * 2 * o.blocks * blockBytes(); }
size_t pieceOff(int layer, int kv, int block) {
  return ((size_t(layer) * 2 + kv) * o.blocks + block) * blockBytes();
}
// The request's block ids on each side (the same seed on both).
std::vector<int> pick(uint32_t seed) {
  std::vector<int> ids(o.blocks);
  for (int i = 0; i < o.blocks; i++) ids[i] = i;
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  ids.resize(o.req);
  return ids;
}
uint16_t value(size_t pieceIndex, size_t k) { return uint16_t(pieceIndex * 31 + k * 7 + 1); }

void die(const char *what) {
  std::fprintf(stderr, "kv_transfer: %s\n", what);
  std::exit(1);
}

void putFile(const std::string &path, const std::string &text) {
  std::ofstream(path + ".tmp") << text;
  std::rename((path + ".tmp").c_str(), path.c_str());
}
std::string getFile(const std::string &path) {
  for (int i = 0; i < 6000; i++) {
    std::ifstream f(path);
    std::string s;
    if (f && std::getline(f, s)) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  die(("no " + path).c_str());
  return "";
}

bool ioAll(int fd, std::vector<iovec> iov, bool out) {
  size_t i = 0;
  while (i < iov.size()) {
    msghdr m{};
    m.msg_iov = &iov[i];
    m.msg_iovlen = std::min<size_t>(iov.size() - i, 512);
    ssize_t n = out ? sendmsg(fd, &m, MSG_NOSIGNAL) : recvmsg(fd, &m, MSG_WAITALL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    for (size_t left = size_t(n); left > 0;) {
      size_t t = std::min(left, iov[i].iov_len);
      iov[i].iov_base = static_cast<char *>(iov[i].iov_base) + t;
      iov[i].iov_len -= t;
      left -= t;
      if (iov[i].iov_len == 0) i++;
    }
    while (i < iov.size() && iov[i].iov_len == 0) i++;
  }
  return true;
}

// The host of a session "[KEY@]host:port" (the engine's key travels in it).
std::string hostOf(const std::string &session) {
  std::string h = session.substr(session.find('@') + 1);
  h = h.substr(0, h.rfind(':'));
  if (h.size() > 2 && h.front() == '[') h = h.substr(1, h.size() - 2);
  return h;
}

// The pieces of one request: (offset on the source side, offset on decode).
std::vector<std::pair<size_t, size_t>> pieces() {
  std::vector<int> s = pick(1), d = pick(2);
  std::vector<std::pair<size_t, size_t>> p;
  for (int l = 0; l < o.layers; l++)
    for (int kv = 0; kv < 2; kv++)
      for (int i = 0; i < o.req; i++) p.push_back({pieceOff(l, kv, s[i]), pieceOff(l, kv, d[i])});
  return p;
}

int decode() {
  FlagcxP2pEngine *e = flagcxP2pEngineCreate();
  if (!e) die("engine");
  char *cache = allocCache(cacheBytes(), nullptr);
  if (!cache) die("cache allocation");
  FlagcxP2pMr mr;
  if (flagcxP2pEngineReg(e, uintptr_t(cache), cacheBytes(), mr) != 0) die("register");
  char ipc[FLAGCX_P2P_IPC_INFO_SIZE] = {};
  bool hasIpc = false;
  flagcxP2pEngineGetIpcInfo(e, uintptr_t(cache), ipc, &hasIpc);
  flagcxP2pEngineStartRpcServer(e);
  char *meta = nullptr;
  flagcxP2pEngineGetMetadata(e, &meta);
  std::string session(meta, std::strcspn(meta, "?"));
  delete[] meta;
  // The TCP baseline's listener, on the engine's address.
  addrinfo hints{}, *ai = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  if (getaddrinfo(hostOf(session).c_str(), "0", &hints, &ai) != 0) die("getaddrinfo");
  int lfd = socket(ai->ai_family, SOCK_STREAM, 0);
  if (bind(lfd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(lfd, 1) != 0) die("tcp listen");
  sockaddr_storage ss{};
  socklen_t sl = sizeof(ss);
  getsockname(lfd, reinterpret_cast<sockaddr *>(&ss), &sl);
  int tport = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6 *>(&ss)->sin6_port
                                             : reinterpret_cast<sockaddr_in *>(&ss)->sin_port);
  freeaddrinfo(ai);
  char line[512];
  std::snprintf(line, sizeof(line), "%s %lu %d %d ", session.c_str(),
                (unsigned long)uintptr_t(cache), int(getpid()), tport);
  putFile(o.dir + "/decode", line + (hasIpc ? hex(ipc, sizeof(ipc)) : std::string("-")));
  pollfd pf{lfd, POLLIN, 0};
  if (poll(&pf, 1, 120000) != 1) die("the prefill side never connected its TCP stream");
  int fd = accept(lfd, nullptr, nullptr);
  if (fd < 0) die("tcp accept");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::vector<iovec> iov;
  for (auto &p : pieces()) iov.push_back(iovec{cache + p.second, blockBytes()});
  char ack = 1;
  for (int it = 0; it < o.iters && !onDevice(); it++) {
    if (!ioAll(fd, iov, false) || write(fd, &ack, 1) != 1) die("tcp baseline");
  }
  close(fd);
  close(lfd);
  // Wait for "done", then check every piece.
  for (int ms = 0; ; ms++) {
    bool done = false;
    for (auto &n : flagcxP2pEngineGetNotifs()) done |= std::strcmp(n.msg, "done") == 0;
    if (done) break;
    if (ms > 120000) die("no \"done\" from the prefill side");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::vector<char> seen(cacheBytes());
  if (onDevice()) g_dev->deviceMemcpy(seen.data(), cache, cacheBytes(), flagcxMemcpyDeviceToHost, nullptr);
  else std::memcpy(seen.data(), cache, cacheBytes());
  size_t bad = 0, idx = 0;
  for (auto &p : pieces()) {
    const uint16_t *v = reinterpret_cast<const uint16_t *>(seen.data() + p.second);
    for (size_t k = 0; k < blockBytes() / 2; k++) bad += v[k] != value(idx, k);
    idx++;
  }
  std::printf("decode: %s (%zu wrong values)\n", bad ? "VERIFY FAILED" : "verified", bad);
  flagcxP2pEngineDestroy(e);
  freeCache(cache);
  return bad != 0;
}

struct Stat {
  std::vector<double> s;
  void add(double v) { s.push_back(v); }
  double med() {
    std::sort(s.begin(), s.end());
    return s.empty() ? 0 : s[s.size() / 2];
  }
  double max() { return s.empty() ? 0 : *std::max_element(s.begin(), s.end()); }
};

// The TCP baseline's connection to decode's plain listener.
int tcpConnect(const char *session, int tport) {
  addrinfo hints{}, *ai = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  if (getaddrinfo(hostOf(session).c_str(), std::to_string(tport).c_str(), &hints, &ai) != 0)
    die("getaddrinfo");
  int fd = socket(ai->ai_family, SOCK_STREAM, 0);
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) die("tcp connect");
  freeaddrinfo(ai);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// The run's shape and one row per path: rate, median and worst time.
void report(size_t npieces, bool sameHost, bool ipc, Stat &sf, Stat &sc, Stat &st, Stat &sm) {
  double bytes = double(npieces) * blockBytes();
  char load[128] = "?";
  if (FILE *f = std::fopen("/proc/loadavg", "r")) {
    if (!std::fgets(load, sizeof(load), f)) load[0] = 0;
    std::fclose(f);
    load[std::strcspn(load, "\n")] = 0;
  }
  std::printf("kv_transfer: layers %d, blocks %d, heads %d, dim %d, %d tokens/block (block %zu "
              "KiB, bf16); request %d blocks = %zu pieces, %.1f MiB per transfer; %d iterations; "
              "%s, %s memory%s; loadavg %s\n", o.layers, o.blocks, o.heads, o.dim, o.tokens,
              blockBytes() >> 10, o.req, npieces, bytes / (1 << 20), o.iters,
              sameHost ? "same host" : "other host", o.device.c_str(), ipc ? " (CUDA IPC)" : "", load);
  std::printf("%-28s %10s %12s %12s\n", "path", "GB/s", "median ms", "max ms");
  auto row = [&](const char *name, Stat &s) {
    if (s.s.empty()) {
      std::printf("%-28s %10s\n", name, "n/a");
      return;
    }
    double m = s.med();
    std::printf("%-28s %10.2f %12.3f %12.3f\n", name, bytes / m / 1e9, m * 1e3, s.max() * 1e3);
  };
  row("flagcx WriteVector", sf);
  row("process_vm_writev", sc);
  row("tcp stream", st);
  row(onDevice() ? "device copy (one D2D)" : "memcpy (in prefill)", sm);
}

int prefill() {
  std::string line = getFile(o.dir + "/decode");
  char session[256], ipcHex[2 * FLAGCX_P2P_IPC_INFO_SIZE + 2];
  unsigned long base = 0;
  int pid = 0, tport = 0;
  if (std::sscanf(line.c_str(), "%255s %lu %d %d %257s", session, &base, &pid, &tport, ipcHex) != 5)
    die("bad decode file");
  FlagcxP2pEngine *e = flagcxP2pEngineCreate();
  if (!e) die("engine");
  std::vector<char> init(cacheBytes());
  auto ps = pieces();
  for (size_t i = 0; i < ps.size(); i++) {
    uint16_t *v = reinterpret_cast<uint16_t *>(init.data() + ps[i].first);
    for (size_t k = 0; k < blockBytes() / 2; k++) v[k] = value(i, k);
  }
  char *cache = allocCache(cacheBytes(), &init), *local = allocCache(cacheBytes(), nullptr);
  if (!cache || !local) die("cache allocation");
  FlagcxP2pMr mr;
  if (flagcxP2pEngineReg(e, uintptr_t(cache), cacheBytes(), mr) != 0) die("register");
  FlagcxP2pConn *c = flagcxP2pEngineGetConn(e, session);
  if (!c) die("connect");
  std::vector<FlagcxP2pMr> mrs(ps.size(), mr);
  std::vector<void *> src;
  std::vector<size_t> sizes(ps.size(), blockBytes());
  std::vector<FlagcxP2pRdmaDesc> descs(ps.size());
  std::vector<iovec> lio, rio;
  // Device memory on one host: CUDA IPC, one IPC info per piece.
  bool ipc = onDevice() && ipcHex[0] != '-' && flagcxP2pEngineConnIsLocal(c);
  char ipcBase[FLAGCX_P2P_IPC_INFO_SIZE] = {};
  if (ipc) unhex(ipcHex, ipcBase, sizeof(ipcBase));
  std::vector<std::vector<char>> ipcStore(ipc ? ps.size() : 0);
  std::vector<char *> ipcBufs;
  for (size_t i = 0; i < ps.size(); i++) {
    src.push_back(cache + ps[i].first);
    if (flagcxP2pEngineMakeDesc(c, base + ps[i].second, uint32_t(blockBytes()), &descs[i]) != 0)
      die("MakeDesc");
    lio.push_back(iovec{cache + ps[i].first, blockBytes()});
    rio.push_back(iovec{reinterpret_cast<void *>(base + ps[i].second), blockBytes()});
    if (ipc) {
      ipcStore[i].assign(ipcBase, ipcBase + sizeof(ipcBase));
      flagcxP2pEngineUpdateIpcInfo(ipcStore[i].data(), base + ps[i].second, base, blockBytes());
      ipcBufs.push_back(ipcStore[i].data());
    }
  }
  bool local1 = flagcxP2pEngineConnIsLocal(c);
  bool cma = !onDevice() && local1 && process_vm_writev(pid, lio.data(), 1, rio.data(), 1, 0) == ssize_t(blockBytes());
  int fd = tcpConnect(session, tport);
  using clk = std::chrono::steady_clock;
  auto secs = [](clk::time_point a) { return std::chrono::duration<double>(clk::now() - a).count(); };
  Stat sf, sc, st, sm;
  for (int it = 0; it < o.iters; it++) {
    auto t = clk::now();
    uint64_t id = 0;
    if (flagcxP2pEngineWriteVector(c, mrs, src, sizes, descs, int(ps.size()), &id, ipcBufs) != 0)
      die("WriteVector");
    int stt;
    while ((stt = flagcxP2pEngineXferState(c, id)) == 0) std::this_thread::yield();
    if (stt != 1) die("transfer failed");
    sf.add(secs(t));
    if (cma) {
      t = clk::now();
      for (size_t i = 0; i < lio.size(); i += 512) {
        size_t n = std::min<size_t>(512, lio.size() - i);
        if (process_vm_writev(pid, &lio[i], n, &rio[i], n, 0) != ssize_t(n * blockBytes()))
          die("process_vm_writev");
      }
      sc.add(secs(t));
    }
    if (!onDevice()) {
      t = clk::now();
      char ack;
      if (!ioAll(fd, lio, true) || read(fd, &ack, 1) != 1) die("tcp baseline");
      st.add(secs(t));
      t = clk::now();
      for (auto &p : ps) std::memcpy(local + p.second, cache + p.first, blockBytes());
      sm.add(secs(t));
    } else {  // the device's own copy rate: one device-to-device copy of as many bytes
      // A device-to-device cudaMemcpy may return before the copy is done
      // (timing only the launch once gave "4697 GB/s" on an H200): wait for it.
      t = clk::now();
      if (g_dev->deviceMemcpy(local, cache, ps.size() * blockBytes(), flagcxMemcpyDeviceToDevice,
                              nullptr) != flagcxSuccess ||
          g_dev->deviceSynchronize() != flagcxSuccess)
        die("device copy");
      sm.add(secs(t));
    }
  }
  close(fd);
  FlagcxP2pNotifyMsg n{};
  std::snprintf(n.name, sizeof(n.name), "prefill");
  std::snprintf(n.msg, sizeof(n.msg), "done");
  flagcxP2pEngineSendNotif(c, &n);
  report(ps.size(), local1, ipc, sf, sc, st, sm);
  flagcxP2pEngineDestroy(e);
  freeCache(cache);
  freeCache(local);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    const char *v = argv[i + 1];
    if (k == "--role") o.role = v;
    else if (k == "--dir") o.dir = v;
    else if (k == "--layers") o.layers = std::atoi(v);
    else if (k == "--blocks") o.blocks = std::atoi(v);
    else if (k == "--heads") o.heads = std::atoi(v);
    else if (k == "--dim") o.dim = std::atoi(v);
    else if (k == "--tokens") o.tokens = std::atoi(v);
    else if (k == "--req") o.req = std::atoi(v);
    else if (k == "--iters") o.iters = std::atoi(v);
    else if (k == "--device") o.device = v;
    else die("unknown option (see the comment at the top of tools/perf/kv_transfer.cc)");
  }
  if (o.layers < 1 || o.blocks < 1 || o.heads < 1 || o.dim < 1 || o.tokens < 1 || o.req < 1 ||
      o.req > o.blocks || o.iters < 1)
    die("sizes must be positive and --req at most --blocks");
  if (o.device != "host" && o.device != "cuda") die("--device is host or cuda");
  auto devInit = [] {
    if (onDevice() && flagcxDeviceHandleInit(&g_dev) != flagcxSuccess)
      die("--device cuda: no device handle (FLAGCX_DEVICE=cuda and a GPU are needed)");
  };
  if (o.role == "decode") return devInit(), decode();
  if (o.role == "prefill") return devInit(), prefill();
  char tmpl[] = "/tmp/kv_transfer.XXXXXX";
  if (!mkdtemp(tmpl)) die("mkdtemp");
  o.dir = tmpl;
  pid_t child = fork();
  if (child == 0) {
    devInit();
    int r = decode();
    std::fflush(stdout);
    _exit(r);
  }
  devInit();
  int rc = prefill();
  int st = 0;
  waitpid(child, &st, 0);
  std::remove((o.dir + "/decode").c_str());
  rmdir(o.dir.c_str());
  return rc || !WIFEXITED(st) || WEXITSTATUS(st);
}
