// The RDMA-device interface on libibverbs, loaded at run time with dlopen so
// that the library runs (and falls back to sockets) where rdma-core is not
// installed.  Only the entry points that are real symbols are looked up;
// posting and polling go through the context's ops table (inline functions
// of verbs.h), as in every rdma-core provider.
//
// NOTE: no RDMA device exists on any machine this was developed or tested
// on.  This file is compiled, linked and its device listing is exercised by
// a test (which finds no device); the queue-pair set-up and the data path
// below have never run on hardware.  See docs/RDMA.md.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <mutex>

#include "base/base.h"
#include "net/ibverbs/hca_list.h"
#include "net/ibverbs/rdma_device.h"
#include "rendezvous/rendezvous.h"

namespace flagcx::rdma {

namespace {

struct Api {
  void *lib = nullptr;
  ibv_device **(*getDeviceList)(int *);
  void (*freeDeviceList)(ibv_device **);
  const char *(*getDeviceName)(ibv_device *);
  ibv_context *(*openDevice)(ibv_device *);
  int (*closeDevice)(ibv_context *);
  int (*queryDevice)(ibv_context *, ibv_device_attr *);
  int (*queryPort)(ibv_context *, uint8_t, ibv_port_attr *);
  int (*queryGid)(ibv_context *, uint8_t, int, ibv_gid *);
  ibv_pd *(*allocPd)(ibv_context *);
  int (*deallocPd)(ibv_pd *);
  ibv_mr *(*regMr)(ibv_pd *, void *, size_t, int);
  int (*deregMr)(ibv_mr *);
  ibv_cq *(*createCq)(ibv_context *, int, void *, ibv_comp_channel *, int);
  int (*destroyCq)(ibv_cq *);
  ibv_qp *(*createQp)(ibv_pd *, ibv_qp_init_attr *);
  int (*modifyQp)(ibv_qp *, ibv_qp_attr *, int);
  int (*destroyQp)(ibv_qp *);
  // Optional (rdma-core 34+): registration of a dma-buf (GPU memory).
  ibv_mr *(*regDmabufMr)(ibv_pd *, uint64_t, size_t, uint64_t, int, int) = nullptr;
};

// Loads libibverbs once; null (with the reason) when it cannot.
const Api *api(std::string *why) {
  static std::once_flag once;
  static Api a;
  static std::string err;
  std::call_once(once, [] {
    void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char *e = dlerror();
      err = std::string("libibverbs.so.1 cannot be loaded (rdma-core not installed?): ") +
            (e ? e : "?");
      return;
    }
    bool ok = true;
    auto sym = [&](const char *name, auto *fn) {
      *reinterpret_cast<void **>(fn) = dlsym(h, name);
      if (*reinterpret_cast<void **>(fn) == nullptr) {
        if (ok) err = std::string("libibverbs.so.1 lacks ") + name;
        ok = false;
      }
    };
    sym("ibv_get_device_list", &a.getDeviceList);
    sym("ibv_free_device_list", &a.freeDeviceList);
    sym("ibv_get_device_name", &a.getDeviceName);
    sym("ibv_open_device", &a.openDevice);
    sym("ibv_close_device", &a.closeDevice);
    sym("ibv_query_device", &a.queryDevice);
    sym("ibv_query_port", &a.queryPort);
    sym("ibv_query_gid", &a.queryGid);
    sym("ibv_alloc_pd", &a.allocPd);
    sym("ibv_dealloc_pd", &a.deallocPd);
    sym("ibv_reg_mr", &a.regMr);
    sym("ibv_dereg_mr", &a.deregMr);
    sym("ibv_create_cq", &a.createCq);
    sym("ibv_destroy_cq", &a.destroyCq);
    sym("ibv_create_qp", &a.createQp);
    sym("ibv_modify_qp", &a.modifyQp);
    sym("ibv_destroy_qp", &a.destroyQp);
    a.regDmabufMr = reinterpret_cast<decltype(a.regDmabufMr)>(dlsym(h, "ibv_reg_dmabuf_mr"));
    if (ok) a.lib = h;
    else dlclose(h);
  });
  if (a.lib == nullptr) {
    if (why) *why = err;
    return nullptr;
  }
  return &a;
}

constexpr int kMaxWr = 256;

struct Wire {  // QpAddr contents
  uint32_t magic;
  uint32_t qpn;
  uint32_t psn;
  uint16_t lid;
  uint8_t linkLayer;
  uint8_t mtu;
  uint8_t gid[16];
};
constexpr uint32_t kWireMagic = 0x49425631;  // "IBV1"
static_assert(sizeof(Wire) <= sizeof(QpAddr::bytes));

struct Ctx {
  const Api *a;
  ibv_context *ctx = nullptr;
  ibv_pd *pd = nullptr;
  uint8_t port = 1;
  ibv_port_attr attr{};
  ibv_gid gid{};
  int gidIndex = 0;
  uint8_t rdAtom = 1, initRdAtom = 1;  // the device's limits, at most 16
  ~Ctx() {
    if (pd) a->deallocPd(pd);
    if (ctx) a->closeDevice(ctx);
  }
};

class VerbsMr final : public Mr {
 public:
  VerbsMr(std::shared_ptr<Ctx> c, ibv_mr *m) : c_(std::move(c)), mr_(m) {}
  ~VerbsMr() override { c_->a->deregMr(mr_); }

 private:
  std::shared_ptr<Ctx> c_;
  ibv_mr *mr_;
};

int ibvAccess(uint32_t a) {
  int f = IBV_ACCESS_LOCAL_WRITE;
  if (a & kRemoteWrite) f |= IBV_ACCESS_REMOTE_WRITE;
  if (a & kRemoteRead) f |= IBV_ACCESS_REMOTE_READ;
  if (a & kRemoteAtomic) f |= IBV_ACCESS_REMOTE_ATOMIC;
  return f;
}

WcStatus mapStatus(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS: return WcStatus::Success;
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_LEN_ERR: return WcStatus::LocalProtection;
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR: return WcStatus::RemoteAccess;
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR: return WcStatus::RetryExceeded;
    case IBV_WC_WR_FLUSH_ERR: return WcStatus::Flushed;
    default: return WcStatus::Fatal;
  }
}

class VerbsQp final : public Qp {
 public:
  explicit VerbsQp(std::shared_ptr<Ctx> c) : c_(std::move(c)) {}
  ~VerbsQp() override {
    if (qp_) c_->a->destroyQp(qp_);
    if (cq_) c_->a->destroyCq(cq_);
  }
  flagcxResult_t create() {
    const Api *a = c_->a;
    cq_ = a->createCq(c_->ctx, 2 * kMaxWr, nullptr, nullptr, 0);
    if (cq_ == nullptr) return sysFail("ibv_create_cq");
    ibv_qp_init_attr ia{};
    ia.send_cq = cq_;
    ia.recv_cq = cq_;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = kMaxWr;
    ia.cap.max_recv_wr = kMaxWr;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    qp_ = a->createQp(c_->pd, &ia);
    if (qp_ == nullptr) return sysFail("ibv_create_qp");
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_INIT;
    at.pkey_index = 0;
    at.port_num = c_->port;
    at.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    if (a->modifyQp(qp_, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      return sysFail("ibv_modify_qp(INIT)");
    randomBytes(&psn_, sizeof psn_);
    psn_ &= 0xffffff;
    return flagcxSuccess;
  }
  flagcxResult_t localAddr(QpAddr *out) override {
    Wire w{};
    w.magic = kWireMagic;
    w.qpn = qp_->qp_num;
    w.psn = psn_;
    w.lid = c_->attr.lid;
    w.linkLayer = c_->attr.link_layer;
    w.mtu = static_cast<uint8_t>(c_->attr.active_mtu);
    memcpy(w.gid, c_->gid.raw, 16);
    *out = QpAddr{};
    memcpy(out->bytes, &w, sizeof w);
    return flagcxSuccess;
  }
  flagcxResult_t connect(const QpAddr &peer) override {
    Wire w;
    memcpy(&w, peer.bytes, sizeof w);
    if (w.magic != kWireMagic) {
      WARN(kNet, "verbs: the peer's queue pair address is not a verbs address (software device on one side?)");
      return flagcxRemoteError;
    }
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_RTR;
    at.path_mtu = static_cast<ibv_mtu>(std::min<int>(w.mtu, c_->attr.active_mtu));
    at.dest_qp_num = w.qpn;
    at.rq_psn = w.psn;
    at.max_dest_rd_atomic = c_->rdAtom;
    at.min_rnr_timer = 12;
    at.ah_attr.port_num = c_->port;
    if (c_->attr.link_layer == IBV_LINK_LAYER_ETHERNET) {
      at.ah_attr.is_global = 1;
      memcpy(at.ah_attr.grh.dgid.raw, w.gid, 16);
      at.ah_attr.grh.sgid_index = static_cast<uint8_t>(c_->gidIndex);
      at.ah_attr.grh.hop_limit = 255;
    } else {
      at.ah_attr.dlid = w.lid;
    }
    const Api *a = c_->a;
    if (a->modifyQp(qp_, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      return sysFail("ibv_modify_qp(RTR)");
    at = ibv_qp_attr{};
    at.qp_state = IBV_QPS_RTS;
    at.timeout = static_cast<uint8_t>(paramInt(Param::IB_TIMEOUT));
    at.retry_cnt = static_cast<uint8_t>(paramInt(Param::IB_RETRY_CNT));
    at.rnr_retry = 7;
    at.sq_psn = psn_;
    at.max_rd_atomic = c_->initRdAtom;
    if (a->modifyQp(qp_, &at, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
      return sysFail("ibv_modify_qp(RTS)");
    state_ = QpState::Ready;
    return flagcxSuccess;
  }
  flagcxResult_t postSend(const SendWr &w) override {
    ibv_sge sge{reinterpret_cast<uint64_t>(w.local), w.length, w.lkey};
    ibv_send_wr wr{};
    wr.wr_id = w.wrId;
    wr.sg_list = w.length > 0 || w.op == Opcode::FetchAdd || w.op == Opcode::CompSwap ? &sge : nullptr;
    wr.num_sge = wr.sg_list ? 1 : 0;
    wr.send_flags = w.signaled ? IBV_SEND_SIGNALED : 0;
    if (w.op == Opcode::FetchAdd || w.op == Opcode::CompSwap) {
      sge.length = 8;
      wr.opcode = w.op == Opcode::FetchAdd ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
      wr.wr.atomic.remote_addr = w.remote;
      wr.wr.atomic.rkey = w.rkey;
      wr.wr.atomic.compare_add = w.compareAdd;
      wr.wr.atomic.swap = w.swap;
    } else {
      wr.opcode = w.op == Opcode::Write ? IBV_WR_RDMA_WRITE
                  : w.op == Opcode::WriteImm ? IBV_WR_RDMA_WRITE_WITH_IMM
                                             : IBV_WR_RDMA_READ;
      wr.imm_data = htonl(w.imm);
      wr.wr.rdma.remote_addr = w.remote;
      wr.wr.rdma.rkey = w.rkey;
    }
    ibv_send_wr *bad = nullptr;
    int rc = ibv_post_send(qp_, &wr, &bad);
    if (rc != 0) {
      WARN(kNet, "verbs: ibv_post_send (%s) failed: %s", opcodeName(w.op), strerror(rc));
      return flagcxSystemError;
    }
    return flagcxSuccess;
  }
  flagcxResult_t postRecv(uint64_t wrId) override {
    ibv_recv_wr wr{};
    wr.wr_id = wrId;
    ibv_recv_wr *bad = nullptr;
    int rc = ibv_post_recv(qp_, &wr, &bad);
    if (rc != 0) {
      WARN(kNet, "verbs: ibv_post_recv failed: %s", strerror(rc));
      return flagcxSystemError;
    }
    return flagcxSuccess;
  }
  int poll(Completion *out, int max) override {
    ibv_wc wc[16];
    int n = ibv_poll_cq(cq_, std::min(max, 16), wc);
    if (n < 0) {
      state_ = QpState::Error;
      return 0;
    }
    for (int i = 0; i < n; i++) {
      Completion &c = out[i];
      c = Completion{};
      c.wrId = wc[i].wr_id;
      c.status = mapStatus(wc[i].status);
      if (c.status != WcStatus::Success) {
        state_ = QpState::Error;
        if (c.status != WcStatus::Flushed)
          WARN(kNet, "verbs: completion error: %s (vendor error 0x%x)",
               wcStatusName(c.status), wc[i].vendor_err);
      }
      switch (wc[i].opcode) {
        case IBV_WC_RECV_RDMA_WITH_IMM: c.op = Opcode::Recv; break;
        case IBV_WC_RDMA_READ: c.op = Opcode::Read; break;
        case IBV_WC_FETCH_ADD: c.op = Opcode::FetchAdd; break;
        case IBV_WC_COMP_SWAP: c.op = Opcode::CompSwap; break;
        default: c.op = Opcode::Write; break;
      }
      if (wc[i].wc_flags & IBV_WC_WITH_IMM) c.imm = ntohl(wc[i].imm_data);
      c.length = wc[i].byte_len;
    }
    return n;
  }
  QpState state() const override { return state_; }
  void abort() override {
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_ERR;
    if (c_->a->modifyQp(qp_, &at, IBV_QP_STATE) != 0) (void)sysFail("ibv_modify_qp(ERR)");
    state_ = QpState::Error;
  }
  int maxSendWr() const override { return kMaxWr; }

 private:
  flagcxResult_t sysFail(const char *what) {
    WARN(kNet, "verbs: %s failed: %s", what, strerror(errno));
    return flagcxSystemError;
  }
  std::shared_ptr<Ctx> c_;
  ibv_cq *cq_ = nullptr;
  ibv_qp *qp_ = nullptr;
  uint32_t psn_ = 0;
  QpState state_ = QpState::Init;
};

class VerbsDevice final : public Device {
 public:
  VerbsDevice(std::shared_ptr<Ctx> c, PortInfo p) : c_(std::move(c)), port_(std::move(p)) {}
  const char *kind() const override { return "verbs"; }
  const PortInfo &port() const override { return port_; }
  flagcxResult_t regMr(void *addr, size_t length, uint32_t access,
                       std::unique_ptr<Mr> *out) override {
    ibv_mr *m = c_->a->regMr(c_->pd, addr, length, ibvAccess(access));
    if (m == nullptr) {
      WARN(kNet, "verbs: ibv_reg_mr of %zu bytes at %p failed: %s", length, addr, strerror(errno));
      return flagcxSystemError;
    }
    return wrap(m, addr, length, access, out);
  }
  // The NIC addresses the region by `addr` (the iova), as with ibv_reg_mr.
  flagcxResult_t regDmabuf(int fd, uint64_t offset, void *addr, size_t length, uint32_t access,
                           std::unique_ptr<Mr> *out) override {
    if (!c_->a->regDmabufMr) return flagcxInternalError;  // rdma-core older than 34
    ibv_mr *m = c_->a->regDmabufMr(c_->pd, offset, length, reinterpret_cast<uint64_t>(addr), fd,
                                   ibvAccess(access));
    if (m == nullptr) {
      INFO(kNet, "verbs: ibv_reg_dmabuf_mr of %zu bytes at %p (fd %d) failed: %s", length, addr,
           fd, strerror(errno));
      return flagcxInternalError;
    }
    return wrap(m, addr, length, access, out);
  }
  flagcxResult_t createQp(std::unique_ptr<Qp> *out) override {
    auto qp = std::make_unique<VerbsQp>(c_);
    FLAGCX_CHECK(qp->create());
    *out = std::move(qp);
    return flagcxSuccess;
  }

 private:
  flagcxResult_t wrap(ibv_mr *m, void *addr, size_t length, uint32_t access,
                      std::unique_ptr<Mr> *out) {
    auto mr = std::make_unique<VerbsMr>(c_, m);
    mr->addr = addr;
    mr->length = length;
    mr->lkey = m->lkey;
    mr->rkey = m->rkey;
    mr->access = access;
    *out = std::move(mr);
    return flagcxSuccess;
  }
  std::shared_ptr<Ctx> c_;
  PortInfo port_;
};

// As verbs.h's inline ibv_query_port: the provider's extended entry when
// it has one, else the exported (compat) symbol, which fills the older
// prefix of the structure.
int queryPort(const Api *a, ibv_context *ctx, uint8_t port, ibv_port_attr *pa) {
  memset(pa, 0, sizeof *pa);
  verbs_context *v = verbs_get_ctx_op(ctx, query_port);
  if (v != nullptr) return v->query_port(ctx, port, pa, sizeof *pa);
  return a->queryPort(ctx, port, pa);
}

}  // namespace

int verbsDeviceCount(std::string *why, std::vector<std::string> *names) {
  const Api *a = api(why);
  if (a == nullptr) return -1;
  int n = 0;
  errno = 0;
  ibv_device **list = a->getDeviceList(&n);
  if (list == nullptr) {
    if (why) *why = std::string("ibv_get_device_list: ") + strerror(errno ? errno : ENODEV);
    return 0;
  }
  for (int i = 0; i < n && names; i++) names->push_back(a->getDeviceName(list[i]));
  a->freeDeviceList(list);
  if (n == 0 && why) *why = "ibv_get_device_list found no RDMA device";
  return n;
}

flagcxResult_t openVerbsDevice(std::unique_ptr<Device> *out, std::string *why) {
  out->reset();
  HcaList hcas;
  std::string err;
  if (!HcaList::parse(paramStr(Param::IB_HCA), &hcas, &err)) {
    WARN(kInit, "FLAGCX_IB_HCA='%s': %s", paramStr(Param::IB_HCA).c_str(), err.c_str());
    return flagcxInvalidArgument;
  }
  const Api *a = api(why);
  if (a == nullptr) return flagcxSuccess;
  int n = 0;
  errno = 0;
  ibv_device **list = a->getDeviceList(&n);
  if (list == nullptr || n == 0) {
    *why = list == nullptr ? std::string("ibv_get_device_list: ") + strerror(errno ? errno : ENODEV)
                           : "no RDMA device";
    if (list) a->freeDeviceList(list);
    return flagcxSuccess;
  }
  std::string seen;
  for (int i = 0; i < n && !*out; i++) {
    std::string name = a->getDeviceName(list[i]);
    auto c = std::make_shared<Ctx>();
    c->a = a;
    c->ctx = a->openDevice(list[i]);
    if (c->ctx == nullptr) continue;
    ibv_device_attr da{};
    if (a->queryDevice(c->ctx, &da) != 0) continue;
    for (int p = 1; p <= da.phys_port_cnt && !*out; p++) {
      ibv_port_attr pa{};
      if (queryPort(a, c->ctx, static_cast<uint8_t>(p), &pa) != 0) continue;
      bool allowed = hcas.allows(name, p);
      seen += (seen.empty() ? "" : ", ") + name + ":" + std::to_string(p) +
              (pa.state == IBV_PORT_ACTIVE ? " active" : " down") + (allowed ? "" : " (excluded by FLAGCX_IB_HCA)");
      if (!allowed || pa.state != IBV_PORT_ACTIVE) continue;
      c->port = static_cast<uint8_t>(p);
      c->rdAtom = static_cast<uint8_t>(std::clamp(da.max_qp_rd_atom, 1, 16));
      c->initRdAtom = static_cast<uint8_t>(std::clamp(da.max_qp_init_rd_atom, 1, 16));
      c->attr = pa;
      c->gidIndex = static_cast<int>(paramInt(Param::IB_GID_INDEX));
      if (pa.link_layer == IBV_LINK_LAYER_ETHERNET &&
          a->queryGid(c->ctx, c->port, c->gidIndex, &c->gid) != 0) {
        seen += " (no GID at FLAGCX_IB_GID_INDEX)";
        continue;
      }
      c->pd = a->allocPd(c->ctx);
      if (c->pd == nullptr) continue;
      PortInfo pi;
      pi.device = name;
      pi.port = p;
      pi.active = true;
      *out = std::make_unique<VerbsDevice>(c, pi);
    }
  }
  a->freeDeviceList(list);
  if (!*out) *why = "no active port usable: " + seen;
  return flagcxSuccess;
}

}  // namespace flagcx::rdma
