// The unique id (uniqueid.h): its layout, and the FLAGCX_COMM_ID form with
// its secret from FLAGCX_COMM_SECRET or FLAGCX_COMM_SECRET_FILE.
#include "rendezvous/uniqueid.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "base/base.h"
#include "rendezvous/bootstrap_root.h"

namespace flagcx {

namespace {
constexpr uint64_t kIdMagic = 0x4449584347414c46ull;  // "FLAGCXID"
constexpr uint32_t kIdVersion = 1;

struct IdLayout {
  uint64_t magic;
  uint32_t version;
  uint32_t flags;  // bit 0: from FLAGCX_COMM_ID; bit 1: keyed by FLAGCX_COMM_SECRET;
                   // bits 8-31: growFrom
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
// The bytes of a secret file, less trailing white space.  Only a regular
// file that no one but its owner may read or write (as ssh asks of a key):
// anyone who can read it can join the job.
flagcxResult_t readSecretFile(const std::string &path, std::string *out) {
  constexpr off_t kMaxBytes = 4096;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0)
    return argError(flagcxInvalidArgument, kBootstrap, "FLAGCX_COMM_SECRET_FILE=%s: cannot open: %s",
                    path.c_str(), strerror(errno));
  struct stat st {};
  const char *bad = fstat(fd, &st) != 0 ? "cannot stat it"
                    : !S_ISREG(st.st_mode) ? "not a regular file"
                    : st.st_size > kMaxBytes ? "larger than 4 KiB"
                    : (st.st_mode & 077) != 0 ? "group or others may read or write it (chmod 600)"
                    : nullptr;
  std::string text(static_cast<size_t>(bad ? 0 : st.st_size), '\0');
  if (!bad && !text.empty() && read(fd, &text[0], text.size()) != static_cast<ssize_t>(text.size()))
    bad = "cannot read it whole";
  close(fd);
  if (bad)
    return argError(flagcxInvalidArgument, kBootstrap, "FLAGCX_COMM_SECRET_FILE=%s: %s",
                    path.c_str(), bad);
  while (!text.empty() && strchr(" \t\r\n", text.back())) text.pop_back();
  *out = std::move(text);
  return flagcxSuccess;
}

// A FLAGCX_COMM_ID job's secret: "" when neither variable is set.
flagcxResult_t commSecret(std::string *out) {
  const std::string &value = paramStr(Param::COMM_SECRET);
  const std::string &file = paramStr(Param::COMM_SECRET_FILE);
  if (!value.empty() && !file.empty())
    return argError(flagcxInvalidArgument, kBootstrap,
                    "FLAGCX_COMM_SECRET and FLAGCX_COMM_SECRET_FILE are both set; set one");
  *out = value;
  if (!file.empty()) FLAGCX_CHECK(readSecretFile(file, out));
  // Short secrets fall to a search offline against one observed handshake.
  if ((!out->empty() || !file.empty()) && out->size() < 16)
    return argError(flagcxInvalidArgument, kBootstrap,
                    "FLAGCX_COMM_SECRET%s: %zu characters, at least 16 needed (e.g. the output "
                    "of `openssl rand -hex 16`)", file.empty() ? "" : "_FILE", out->size());
  return flagcxSuccess;
}

// The job's key: a MAC of the secret and the address under two fixed keys.
// Without a secret it depends on the address alone, which is public.
Secret jobKey(const std::string &secret, const std::string &commId) {
  std::string m = secret.empty() ? commId : secret + '\0' + commId;
  Secret k{}, key{};
  uint64_t a = macOf(k, m.data(), m.size());
  k[0] = 1;
  uint64_t b = macOf(k, m.data(), m.size());
  memcpy(key.data(), &a, 8);
  memcpy(key.data() + 8, &b, 8);
  return key;
}

}  // namespace

void encodeUniqueId(const DecodedId &d, flagcxUniqueId *id) {
  memset(id, 0, sizeof(*id));
  IdLayout l{};
  l.magic = kIdMagic;
  l.version = kIdVersion;
  l.flags = (d.fromEnv ? 1u : 0u) | (d.fromEnv && d.keyed ? 2u : 0u) |
            (static_cast<uint32_t>(d.growFrom) & 0xffffffu) << 8;
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
  out->keyed = out->fromEnv && (l.flags & 2u) != 0;
  out->growFrom = static_cast<int>(l.flags >> 8);
  return flagcxSuccess;
}

flagcxResult_t makeUniqueId(flagcxUniqueId *id) {
  DecodedId d;
  const std::string &env = paramStr(Param::COMM_ID);
  if (!env.empty()) {
    if (!parseHostPort(env, &d.root) || d.root.port() == 0)
      return argError(flagcxInvalidArgument, kBootstrap,
                      "FLAGCX_COMM_ID=%s: expected host:port or [ipv6]:port", env.c_str());
    // Every rank derives the same id from the variable and the secret.
    std::string secret;
    FLAGCX_CHECK(commSecret(&secret));
    d.secret = jobKey(secret, env);
    d.keyed = !secret.empty();
    d.fromEnv = true;
    encodeUniqueId(d, id);
    return flagcxSuccess;
  }
  return makeFreshId(id, 0);
}

flagcxResult_t makeFreshId(flagcxUniqueId *id, int growFrom) {
  DecodedId d;
  d.growFrom = growFrom;
  std::string ifname;
  FLAGCX_CHECK(findLocalAddress(&d.root, &ifname));
  randomBytes(d.secret.data(), d.secret.size());
  FLAGCX_CHECK(startBootstrapRoot(&d.root, d.secret, "the unique id's secret"));
  INFO(kBootstrap, "unique id: root listens on %s (%s)", d.root.str().c_str(), ifname.c_str());
  encodeUniqueId(d, id);
  return flagcxSuccess;
}

}  // namespace flagcx
