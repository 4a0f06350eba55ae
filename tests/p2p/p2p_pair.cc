// Two processes through the P2P engine, written only to flagcx_p2p.h (FlagCX
// 0.13's surface): the harness (run_pair.sh) starts
//   p2p_pair target DIR            and   p2p_pair initiator DIR [MODE]
// which meet through files in DIR.  MODE: all (default), refused (the
// connection must be refused: FLAGCX_P2P_SECRET differs), killed (the
// target is killed midway; every later call must fail, none may hang).
//
// all:
//  1. Connect/Accept: the initiator Sends the address of its inbox; the
//     target Recvs it, writes into the inbox (the accepting side initiates)
//     and notifies.
//  2. RPC: GetConn("host:port") twice (the same cached connection); Write of
//     the first half of the target's region through a MakeDesc descriptor;
//     WriteVectorSync of the second half as shuffled non-contiguous blocks;
//     Read and ReadVector of the target's source region.
//  3. Errors: MakeDesc past the region, a write past the region (descriptor
//     moved with UpdateDesc), a wrong key, an unknown transfer id, an
//     unregistered local buffer, a region the target deregistered.
//  4. The target checks its region holds exactly the pattern and that the
//     guard bytes after it are untouched, and notifies its verdict.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "flagcx_p2p.h"

namespace {

constexpr size_t kN = 4 << 20;      // the target's region
constexpr size_t kGuard = 1 << 16;  // unregistered bytes right after it
constexpr size_t kBlock = 64 << 10;
int g_fail = 0;

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "p2p_pair %s:%d: CHECK failed: %s\n", role, __LINE__, #cond); \
      g_fail = 1;                                                                \
    }                                                                            \
  } while (0)

const char *role = "?";

uint8_t patA(size_t i) { return static_cast<uint8_t>(i * 7 + (i >> 12) + 1); }
uint8_t patB(size_t i) { return static_cast<uint8_t>(i * 13 + (i >> 10) + 5); }
uint8_t patC(size_t i) { return static_cast<uint8_t>(i * 3 + 11); }

void putFile(const std::string &path, const std::string &text) {
  std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  std::rename(tmp.c_str(), path.c_str());
}

bool getFile(const std::string &path, std::string *text, int seconds) {
  for (int i = 0; i < seconds * 100; i++) {
    std::ifstream f(path);
    if (f && std::getline(f, *text)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Waits for a notification whose text starts with `prefix` (the peer's
// progress: no fixed time is assumed, only an upper bound for a broken run).
bool waitNotif(const char *prefix, std::string *text) {
  static std::vector<FlagcxP2pNotifyMsg> seen;
  for (int i = 0; i < 60 * 1000; i++) {
    for (auto &m : flagcxP2pEngineGetNotifs()) seen.push_back(m);
    for (auto it = seen.begin(); it != seen.end(); ++it)
      if (std::strncmp(it->msg, prefix, std::strlen(prefix)) == 0) {
        if (text) *text = it->msg;
        seen.erase(it);
        return true;
      }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

bool notify(FlagcxP2pConn *c, const char *who, const std::string &text) {
  FlagcxP2pNotifyMsg m{};
  std::snprintf(m.name, sizeof(m.name), "%s", who);
  std::snprintf(m.msg, sizeof(m.msg), "%s", text.c_str());
  return flagcxP2pEngineSendNotif(c, &m) == static_cast<int>(sizeof(m));
}

// Polls a transfer until it ends: true when it completed.  (XferStatus
// reads false both in flight and after a failure; flagcx's XferState tells
// them apart.)  Every transfer ends within FLAGCX_TIMEOUT.
bool finished(FlagcxP2pConn *c, uint64_t id) {
  int st;
  while ((st = flagcxP2pEngineXferState(c, id)) == 0)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  return st == 1;
}

// "ip:port?gpu?notif" -> "ip:port", host, port
void splitMeta(const std::string &meta, std::string *session, std::string *host, int *port) {
  *session = meta.substr(0, meta.find('?'));
  size_t colon = session->rfind(':');
  *host = session->substr(0, colon);
  if (host->size() > 2 && host->front() == '[') *host = host->substr(1, host->size() - 2);
  *port = std::atoi(session->c_str() + colon + 1);
}

int target(const std::string &dir, const std::string &mode) {
  role = "target";
  FlagcxP2pEngine *e = flagcxP2pEngineCreate();
  CHECK(e != nullptr);
  if (!e) return 1;
  std::vector<uint8_t> region(kN + kGuard, 0), source(kN), spare(kBlock, 0);
  for (size_t i = 0; i < kN; i++) source[i] = patB(i);
  FlagcxP2pMr mrR = 0, mrS = 0, mrSpare = 0;
  CHECK(flagcxP2pEngineReg(e, reinterpret_cast<uintptr_t>(region.data()), kN, mrR) == 0);
  CHECK(flagcxP2pEngineReg(e, reinterpret_cast<uintptr_t>(source.data()), kN, mrS) == 0);
  uint64_t mr64 = 0;  // the C ABI
  CHECK(flagcxP2pRpcRegisterHost(e, reinterpret_cast<uintptr_t>(spare.data()), kBlock, &mr64) == 0);
  mrSpare = mr64;
  char *meta = nullptr;
  CHECK(flagcxP2pEngineGetMetadata(e, &meta) == 0 && meta);
  std::string session, host;
  int port = 0;
  splitMeta(meta, &session, &host, &port);
  CHECK(port == flagcxP2pEngineGetRpcPort(e));
  char pd[FLAGCX_P2P_DESC_SIZE];  // a descriptor made ahead, for the initiator's Read
  CHECK(flagcxP2pEnginePrepareDesc(e, mrS, source.data(), kN, pd) == 0);
  CHECK(flagcxP2pEnginePrepareDesc(e, mrR, source.data(), kN, pd + 0) != 0);  // not region mrR
  CHECK(flagcxP2pEnginePrepareDesc(e, mrS, source.data(), kN, pd) == 0);
  char line[512];
  std::snprintf(line, sizeof(line), "%s %lu %lu %lu", meta,
                static_cast<unsigned long>(reinterpret_cast<uintptr_t>(region.data())),
                static_cast<unsigned long>(reinterpret_cast<uintptr_t>(source.data())),
                static_cast<unsigned long>(reinterpret_cast<uintptr_t>(spare.data())));
  delete[] meta;
  std::string hexDesc;
  for (char ch : pd) {
    char t[3];
    std::snprintf(t, sizeof(t), "%02x", static_cast<unsigned char>(ch));
    hexDesc += t;
  }
  putFile(dir + "/target", std::string(line) + " " + hexDesc);
  if (mode == "refused") {  // serve until the initiator has been refused
    CHECK(flagcxP2pEngineStartRpcServer(e) == 0);
    std::string done;
    CHECK(getFile(dir + "/done", &done, 60));
    flagcxP2pEngineStopAccept(e);
    flagcxP2pEngineDestroy(e);
    return g_fail;
  }

  // 1. Connect/Accept, Send/Recv, a write by the accepting side.
  char ip[128] = "";
  int gpu = -2;
  FlagcxP2pConn *c1 = flagcxP2pEngineAccept(e, ip, sizeof(ip), &gpu);
  CHECK(c1 != nullptr && ip[0] != 0 && gpu >= -1);
  if (!c1) return 1;
  CHECK(flagcxP2pEngineStartListener(c1) == 0);
  char msg[64] = "";
  CHECK(flagcxP2pEngineRecv(c1, mrSpare, spare.data(), sizeof(msg)) == 0);
  std::memcpy(msg, spare.data(), sizeof(msg));
  unsigned long inbox = 0, inboxLen = 0;
  CHECK(std::sscanf(msg, "inbox %lu %lu", &inbox, &inboxLen) == 2 && inboxLen <= kBlock);
  for (size_t i = 0; i < inboxLen; i++) spare[i] = patC(i);
  FlagcxP2pRdmaDesc d{};
  CHECK(flagcxP2pEngineMakeDesc(c1, inbox, static_cast<uint32_t>(inboxLen), &d) == 0);
  CHECK(flagcxP2pEngineWriteVectorSync(c1, {mrSpare}, {spare.data()}, {inboxLen}, {d}) == 0);
  CHECK(notify(c1, "target", "reverse-done"));

  // 2.-3. The initiator works through the RPC server.
  CHECK(flagcxP2pEngineStartRpcServer(e) == 0);
  CHECK(flagcxP2pEngineStartRpcServer(e) == 0);  // idempotent
  CHECK(waitNotif("drop-source", nullptr));
  flagcxP2pEngineMrDestroy(e, mrS);
  CHECK(notify(c1, "target", "source-dropped"));
  CHECK(waitNotif("written", nullptr));

  // 4. The verdict.
  size_t bad = 0;
  for (size_t i = 0; i < kN; i++) bad += region[i] != patA(i);
  for (size_t i = kN; i < kN + kGuard; i++) bad += region[i] != 0;
  std::printf("target: %zu wrong bytes in the region and its guard\n", bad);
  CHECK(bad == 0);
  CHECK(notify(c1, "target", bad == 0 ? "verdict ok" : "verdict bad"));
  CHECK(waitNotif("bye", nullptr));
  flagcxP2pEngineDestroy(e);
  std::printf("target: %s\n", g_fail ? "FAILED" : "ok");
  return g_fail;
}

// What the target published: its metadata, the addresses of its region (R),
// its source region (S) and a spare one, and S's PrepareDesc descriptor.
struct TargetInfo {
  std::string session, host;
  int port = 0;
  unsigned long vaR = 0, vaS = 0, vaSpare = 0;
  FlagcxP2pRdmaDesc prepared{};
};

bool readTarget(const std::string &dir, TargetInfo *t) {
  std::string line;
  if (!getFile(dir + "/target", &line, 60)) {
    std::fprintf(stderr, "initiator: the target never wrote its metadata\n");
    return false;
  }
  char meta[256], hexDesc[2 * FLAGCX_P2P_DESC_SIZE + 1] = "";
  CHECK(std::sscanf(line.c_str(), "%255s %lu %lu %lu %128s", meta, &t->vaR, &t->vaS, &t->vaSpare,
                    hexDesc) == 5);
  char pd[FLAGCX_P2P_DESC_SIZE] = {};
  for (size_t i = 0; i < sizeof(pd) && hexDesc[2 * i]; i++) {
    unsigned v = 0;
    std::sscanf(hexDesc + 2 * i, "%2x", &v);
    pd[i] = static_cast<char>(v);
  }
  flagcxP2pDeserializeRdmaDesc(pd, &t->prepared);
  splitMeta(meta, &t->session, &t->host, &t->port);
  return true;
}

// The initiator's registered buffers.
struct Buffers {
  std::vector<uint8_t> src, dst, inbox, stray;
  FlagcxP2pMr mrSrc = 0, mrDst = 0, mrInbox = 0;
};

// Mode killed, after step 1: one write, the kill, then every call must fail.
int killedSteps(const std::string &dir, FlagcxP2pEngine *e, FlagcxP2pConn *c1, FlagcxP2pConn *c,
                const TargetInfo &t, Buffers &b) {
  uint64_t id = 0;
  FlagcxP2pRdmaDesc d{};
  CHECK(flagcxP2pEngineMakeDesc(c, t.vaR, kBlock, &d) == 0);
  CHECK(flagcxP2pEngineWriteVectorSync(c, {b.mrSrc}, {b.src.data()}, {kBlock}, {d}) == 0);
  putFile(dir + "/ready-to-kill", "1");
  std::string k;
  CHECK(getFile(dir + "/killed", &k, 60));
  CHECK(flagcxP2pEngineWriteVectorSync(c, {b.mrSrc}, {b.src.data()}, {kBlock}, {d}) != 0);
  CHECK(flagcxP2pEngineWrite(c, b.mrSrc, b.src.data(), kBlock, d, &id) != 0 || !finished(c, id));
  CHECK(flagcxP2pEngineRead(c, b.mrDst, b.dst.data(), kBlock, d, &id) != 0 || !finished(c, id));
  CHECK(!notify(c, "initiator", "anyone?"));
  CHECK(!notify(c1, "initiator", "anyone?"));
  CHECK(flagcxP2pEngineRecv(c1, b.mrDst, b.dst.data(), 64) != 0);
  flagcxP2pEngineDestroy(e);
  std::printf("initiator: every call failed after the kill: %s\n", g_fail ? "FAILED" : "ok");
  return g_fail;
}

// Step 2: Write, shuffled WriteVectorSync, Read and ReadVector, then the C ABI.
void writeAndRead(FlagcxP2pEngine *e, FlagcxP2pConn *c, const TargetInfo &t, Buffers &b) {
  uint64_t id = 0;
  unsigned long vaR = t.vaR, vaS = t.vaS;
  FlagcxP2pRdmaDesc d{};
  CHECK(flagcxP2pEngineMakeDesc(c, vaR, kN / 2, &d) == 0);
  CHECK(flagcxP2pEngineWrite(c, b.mrSrc, b.src.data(), kN / 2, d, &id) == 0 && finished(c, id));
  std::vector<void *> srcs;
  std::vector<size_t> sizes;
  std::vector<FlagcxP2pRdmaDesc> descs;
  size_t nb = kN / 2 / kBlock;
  for (size_t k = 0; k < nb; k++) {
    size_t blk = (k * 5 + 3) % nb;  // a shuffled order (nb is a power of two)
    size_t off = kN / 2 + blk * kBlock;
    FlagcxP2pRdmaDesc bd{};
    CHECK(flagcxP2pEngineMakeDesc(c, vaR + off, kBlock, &bd) == 0);
    srcs.push_back(b.src.data() + off);
    sizes.push_back(kBlock);
    descs.push_back(bd);
  }
  CHECK(flagcxP2pEngineWriteVectorSync(c, std::vector<FlagcxP2pMr>(nb, b.mrSrc), srcs, sizes,
                                       descs) == 0);
  FlagcxP2pRdmaDesc ds{};
  CHECK(flagcxP2pEngineMakeDesc(c, vaS, kN, &ds) == 0);
  // PrepareDesc at the target and MakeDesc here name the same bytes.
  CHECK(t.prepared.addr == ds.addr && t.prepared.size == ds.size && t.prepared.rkey == ds.rkey);
  CHECK(flagcxP2pEngineRead(c, b.mrDst, b.dst.data(), kN, t.prepared, &id) == 0 && finished(c, id));
  size_t bad = 0;
  for (size_t i = 0; i < kN; i++) bad += b.dst[i] != patB(i);
  CHECK(bad == 0);
  std::fill(b.dst.begin(), b.dst.end(), 0);
  FlagcxP2pRdmaDesc h1 = ds, h2 = ds;
  CHECK(flagcxP2pEngineUpdateDesc(h1, vaS + kN / 2, kN / 2) == 0);
  CHECK(flagcxP2pEngineUpdateDesc(h2, vaS, kN / 2) == 0);
  CHECK(flagcxP2pEngineReadVector(c, {b.mrDst, b.mrDst}, {b.dst.data(), b.dst.data() + kN / 2},
                                  {kN / 2, kN / 2}, {h1, h2}, 2, &id) == 0 &&
        finished(c, id));
  bad = 0;
  for (size_t i = 0; i < kN; i++) bad += b.dst[i] != patB((i + kN / 2) % kN);
  CHECK(bad == 0);

  // The C ABI: the same cached connection, a batch addressed by absolute VAs.
  CHECK(flagcxP2pRpcGetConn(e, t.session.c_str()) == c);
  uint64_t sva[2] = {reinterpret_cast<uintptr_t>(b.src.data()),
                     reinterpret_cast<uintptr_t>(b.src.data()) + kBlock};
  uint64_t dva[2] = {vaR, vaR + kBlock}, sz[2] = {kBlock, kBlock};
  CHECK(flagcxP2pRpcBatchWriteSync(c, 2, sva, dva, sz) == 0);
  dva[1] = vaR + kN - 8;
  CHECK(flagcxP2pRpcBatchWriteSync(c, 2, sva, dva, sz) != 0);
}

// Step 3: errors end in -1 or false, never in bytes written.
void refusedRequests(FlagcxP2pConn *c, const TargetInfo &t, Buffers &b) {
  uint64_t id = 0;
  unsigned long vaR = t.vaR, vaS = t.vaS;
  FlagcxP2pRdmaDesc x{}, ds{};
  CHECK(flagcxP2pEngineMakeDesc(c, vaR + kN - 8, 64, &x) != 0);
  CHECK(flagcxP2pEngineMakeDesc(c, vaR, 64, &x) == 0);
  FlagcxP2pRdmaDesc past = x;
  CHECK(flagcxP2pEngineUpdateDesc(past, vaR + kN - 8, 64) == 0);  // 56 bytes into the guard
  CHECK(flagcxP2pEngineWriteVectorSync(c, {b.mrSrc}, {b.stray.data()}, {64}, {past}) != 0);
  CHECK(flagcxP2pEngineWriteVectorSync(c, {b.mrSrc}, {b.src.data()}, {64}, {past}) != 0);
  FlagcxP2pRdmaDesc wrongKey = x;
  wrongKey.rkey ^= 0x5a5a;
  CHECK(flagcxP2pEngineWriteVectorSync(c, {b.mrSrc}, {b.src.data()}, {64}, {wrongKey}) != 0);
  CHECK(!flagcxP2pEngineXferStatus(c, 0xdeadbeefull));
  CHECK(flagcxP2pEngineWrite(c, b.mrSrc, b.stray.data(), 64, x, &id) != 0);  // stray: unregistered
  CHECK(notify(c, "initiator", "drop-source"));
  CHECK(waitNotif("source-dropped", nullptr));
  CHECK(flagcxP2pEngineMakeDesc(c, vaS, 64, &ds) == 0);  // the handshake's table still has it
  CHECK(flagcxP2pEngineRead(c, b.mrDst, b.dst.data(), 64, ds, &id) == 0);
  // A valid write right behind the refused read ends well (over verbs, the
  // refusal breaks the queue pair under it: it is redone on the lanes).
  uint64_t id2 = 0;
  CHECK(flagcxP2pEngineWrite(c, b.mrSrc, b.src.data(), 64, x, &id2) == 0);
  CHECK(!finished(c, id));
  CHECK(finished(c, id2));
  CHECK(!flagcxP2pEngineXferStatus(c, id));  // reported already: unknown now
  CHECK(flagcxP2pEngineMakeDesc(c, vaS, 64, &ds) == 0);
  CHECK(flagcxP2pEngineWriteVectorSync(c, {b.mrSrc}, {b.src.data()}, {64}, {ds}) != 0);
  // The connection is still good after refused requests.
  CHECK(flagcxP2pEngineWriteVectorSync(c, {b.mrSrc}, {b.src.data()}, {64}, {x}) == 0);
}

int initiator(const std::string &dir, const std::string &mode) {
  role = "initiator";
  TargetInfo t;
  if (!readTarget(dir, &t)) return 1;
  FlagcxP2pEngine *e = flagcxP2pEngineCreate();
  CHECK(e != nullptr);
  if (!e) return 1;
  if (mode == "refused") {
    CHECK(flagcxP2pEngineGetConn(e, t.session.c_str()) == nullptr);
    CHECK(flagcxP2pEngineConnect(e, t.host.c_str(), 0, t.port) == nullptr);
    flagcxP2pEngineDestroy(e);
    putFile(dir + "/done", "1");
    std::printf("initiator: refused as expected: %s\n", g_fail ? "FAILED" : "ok");
    return g_fail;
  }
  Buffers b{std::vector<uint8_t>(kN), std::vector<uint8_t>(kN, 0), std::vector<uint8_t>(kBlock, 0),
            std::vector<uint8_t>(kBlock, 1)};
  for (size_t i = 0; i < kN; i++) b.src[i] = patA(i);
  CHECK(flagcxP2pEngineReg(e, reinterpret_cast<uintptr_t>(b.src.data()), kN, b.mrSrc) == 0);
  CHECK(flagcxP2pEngineReg(e, reinterpret_cast<uintptr_t>(b.dst.data()), kN, b.mrDst) == 0);
  CHECK(flagcxP2pEngineReg(e, reinterpret_cast<uintptr_t>(b.inbox.data()), kBlock, b.mrInbox) == 0);

  // 1.
  FlagcxP2pConn *c1 = flagcxP2pEngineConnect(e, t.host.c_str(), 0, t.port);
  CHECK(c1 != nullptr);
  if (!c1) return 1;
  std::printf("initiator: connection is %s\n",
              flagcxP2pEngineConnIsLocal(c1) ? "same host" : "other host");
  char msg[64];
  std::snprintf(msg, sizeof(msg), "inbox %lu %lu",
                static_cast<unsigned long>(reinterpret_cast<uintptr_t>(b.inbox.data())),
                static_cast<unsigned long>(b.inbox.size()));
  std::memcpy(b.inbox.data(), msg, sizeof(msg));  // Send's source must be registered too
  uint64_t id = 0;
  CHECK(flagcxP2pEngineSend(c1, b.mrInbox, b.inbox.data(), sizeof(msg), &id) == 0 && finished(c1, id));
  CHECK(waitNotif("reverse-done", nullptr));
  size_t bad = 0;
  for (size_t i = 0; i < kBlock; i++) bad += b.inbox[i] != patC(i);
  CHECK(bad == 0);

  // 2.
  FlagcxP2pConn *c = flagcxP2pEngineGetConn(e, t.session.c_str());
  CHECK(c != nullptr && flagcxP2pEngineGetConn(e, t.session.c_str()) == c);
  if (!c) return 1;
  if (mode == "killed") return killedSteps(dir, e, c1, c, t, b);
  writeAndRead(e, c, t, b);
  // 3.
  refusedRequests(c, t, b);

  // 4.
  CHECK(notify(c, "initiator", "written"));
  std::string verdict;
  CHECK(waitNotif("verdict", &verdict) && verdict == "verdict ok");
  CHECK(notify(c1, "initiator", "bye"));
  flagcxP2pEngineDestroy(e);
  std::printf("initiator: %s\n", g_fail ? "FAILED" : "ok");
  return g_fail;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s target|initiator DIR [all|refused|killed]\n", argv[0]);
    return 2;
  }
  std::string r = argv[1];
  if (r == "target") return target(argv[2], argc > 3 ? argv[3] : "all");
  if (r == "initiator") return initiator(argv[2], argc > 3 ? argv[3] : "all");
  return 2;
}
