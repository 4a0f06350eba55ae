#include "rendezvous/uniqueid.h"

#include <cstring>

#include "base/log.h"
#include "base/params.h"

namespace flagcx {

namespace {
constexpr uint64_t kIdMagic = 0x4449584347414c46ull;  // "FLAGCXID"
constexpr uint32_t kIdVersion = 1;

struct IdLayout {
  uint64_t magic;
  uint32_t version;
  uint32_t flags;  // bit 0: from FLAGCX_COMM_ID
  uint8_t secret[16];
  uint32_t addrLen;
  uint32_t check;  // low bits of a MAC over the fields above, catches garbage
  uint8_t addr[sizeof(SockAddr::u)];
};
static_assert(sizeof(IdLayout) <= FLAGCX_UNIQUE_ID_BYTES, "unique id too large");

uint32_t checkOf(const IdLayout &l) {
  Secret k{};
  return static_cast<uint32_t>(macOf(k, &l, offsetof(IdLayout, check)));
}
}  // namespace

void encodeUniqueId(const DecodedId &d, flagcxUniqueId *id) {
  memset(id, 0, sizeof(*id));
  IdLayout l{};
  l.magic = kIdMagic;
  l.version = kIdVersion;
  l.flags = d.fromEnv ? 1u : 0u;
  memcpy(l.secret, d.secret.data(), 16);
  l.addrLen = d.root.len;
  l.check = checkOf(l);
  memcpy(l.addr, &d.root.u, sizeof(l.addr));
  memcpy(id->internal, &l, sizeof(l));
}

flagcxResult_t decodeUniqueId(const flagcxUniqueId &id, DecodedId *out) {
  IdLayout l;
  memcpy(&l, id.internal, sizeof(l));
  if (l.magic != kIdMagic || l.version != kIdVersion || l.check != checkOf(l) ||
      l.addrLen == 0 || l.addrLen > sizeof(SockAddr::u)) {
    return argError(flagcxInvalidArgument, kBootstrap,
                    "commId: not a flagcx unique id (bad magic, version or checksum); "
                    "was it filled by flagcxGetUniqueId and passed unchanged to every rank?");
  }
  *out = DecodedId();
  memcpy(&out->root.u, l.addr, sizeof(l.addr));
  out->root.len = l.addrLen;
  int fam = out->root.u.sa.sa_family;
  if ((fam != AF_INET && fam != AF_INET6) || out->root.port() == 0)
    return argError(flagcxInvalidArgument, kBootstrap, "commId: root address is malformed");
  memcpy(out->secret.data(), l.secret, 16);
  out->fromEnv = (l.flags & 1u) != 0;
  return flagcxSuccess;
}

flagcxResult_t makeUniqueId(flagcxUniqueId *id) {
  DecodedId d;
  const std::string &env = paramStr(Param::COMM_ID);
  if (!env.empty()) {
    if (!parseHostPort(env, &d.root) || d.root.port() == 0)
      return argError(flagcxInvalidArgument, kBootstrap,
                      "FLAGCX_COMM_ID=%s: expected host:port or [ipv6]:port", env.c_str());
    // Every rank derives the same id from the variable alone, so the secret
    // can only be as private as the variable itself.
    Secret k{};
    uint64_t a = macOf(k, env.data(), env.size());
    k[0] = 1;
    uint64_t b = macOf(k, env.data(), env.size());
    memcpy(d.secret.data(), &a, 8);
    memcpy(d.secret.data() + 8, &b, 8);
    d.fromEnv = true;
  } else {
    std::string ifname;
    FLAGCX_CHECK(findLocalAddress(&d.root, &ifname));
    randomBytes(d.secret.data(), d.secret.size());
    FLAGCX_CHECK(startBootstrapRoot(&d.root, d.secret));
    INFO(kBootstrap, "unique id: root listens on %s (%s)", d.root.str().c_str(), ifname.c_str());
  }
  encodeUniqueId(d, id);
  return flagcxSuccess;
}

}  // namespace flagcx
