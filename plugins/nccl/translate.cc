// The NCCL <-> flagcx translations of translate.h: results, datatypes,
// reduction operations, unique ids and ncclConfig_t.
#include "translate.h"

#include <climits>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace ncclx {

static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES && NCCL_UNIQUE_ID_BYTES == 128,
              "NCCL's unique id is 128 bytes");
static_assert(sizeof(flagcxUniqueId) >= sizeof(ncclUniqueId),
              "the flagcx id is the larger one; packId checks that its tail is unused");
// Values that the translation passes through unchanged.
static_assert(int(ncclSuccess) == int(flagcxSuccess) &&
              int(ncclUnhandledCudaError) == int(flagcxUnhandledDeviceError) &&
              int(ncclSystemError) == int(flagcxSystemError) &&
              int(ncclInternalError) == int(flagcxInternalError) &&
              int(ncclInvalidArgument) == int(flagcxInvalidArgument) &&
              int(ncclInvalidUsage) == int(flagcxInvalidUsage) &&
              int(ncclRemoteError) == int(flagcxRemoteError) &&
              int(ncclInProgress) == int(flagcxInProgress));
static_assert(int(ncclInt8) == int(flagcxInt8) && int(ncclUint8) == int(flagcxUint8) &&
              int(ncclInt32) == int(flagcxInt32) && int(ncclUint32) == int(flagcxUint32) &&
              int(ncclInt64) == int(flagcxInt64) && int(ncclUint64) == int(flagcxUint64) &&
              int(ncclFloat16) == int(flagcxFloat16) && int(ncclFloat32) == int(flagcxFloat32) &&
              int(ncclFloat64) == int(flagcxFloat64) && int(ncclBfloat16) == int(flagcxBfloat16) &&
              int(ncclFloat8e4m3) == int(flagcxFloat8e4m3) && int(ncclFloat8e5m2) == int(flagcxFloat8e5m2) &&
              int(ncclNumTypes) == int(flagcxNumTypes));
static_assert(int(ncclSum) == int(flagcxSum) && int(ncclProd) == int(flagcxProd) &&
              int(ncclMax) == int(flagcxMax) && int(ncclMin) == int(flagcxMin) &&
              int(ncclAvg) == int(flagcxAvg) && int(ncclNumOps) == 5);

const char *ncclErrorText(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with FLAGCX_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with FLAGCX_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the flagcx developers";
    case ncclInvalidArgument: return "invalid argument (run with FLAGCX_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with FLAGCX_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

ncclResult_t mapType(ncclDataType_t t, Use use, flagcxDataType_t *out, const char **why) {
  if (fastType(t)) {
    *out = static_cast<flagcxDataType_t>(t);
    return ncclSuccess;
  }
  if (float8Type(t)) {
    if (use == Use::Scale) {
      *why = "PreMulSum on float8 data is not supported by the drop-in (its scaling kernels have no "
             "float8; sum, prod, max, min and avg are)";
      return ncclInvalidArgument;
    }
    *out = static_cast<flagcxDataType_t>(t);
    return ncclSuccess;
  }
  *why = "not an ncclDataType_t";
  return ncclInvalidArgument;
}

ncclResult_t packId(const flagcxUniqueId &in, ncclUniqueId *out, std::string *why) {
  for (size_t i = sizeof(ncclUniqueId); i < sizeof(flagcxUniqueId); i++) {
    if (in.internal[i] != 0) {
      *why = "the flagcx unique id uses more than the 128 bytes of an ncclUniqueId (byte " +
             std::to_string(i) + " is set)";
      return ncclInternalError;
    }
  }
  memcpy(out->internal, in.internal, sizeof(out->internal));
  return ncclSuccess;
}

void unpackId(const ncclUniqueId &in, flagcxUniqueId *out) {
  memset(out->internal, 0, sizeof(out->internal));
  memcpy(out->internal, in.internal, sizeof(in.internal));
}

namespace {
constexpr unsigned kConfigMagic = 0xcafebeef;

// The caller's struct may be older (smaller) than ours: a field counts only
// when `size` covers it.
bool covers(const ncclConfig_t *c, size_t off, size_t len) { return c->size >= off + len; }
#define HAS(field) covers(cfg, offsetof(ncclConfig_t, field), sizeof(cfg->field))

void note(std::string *s, const char *name) {
  if (!s->empty()) *s += ", ";
  *s += name;
}
}  // namespace

ncclResult_t parseConfig(const ncclConfig_t *cfg, const char *envBlocking, Config *out,
                         std::string *why) {
  *out = Config();
  if (envBlocking && *envBlocking) out->blocking = atoi(envBlocking) != 0;
  if (!cfg) return ncclSuccess;
  if (cfg->magic != kConfigMagic) {
    *why = "config was not initialized with NCCL_CONFIG_INITIALIZER (bad magic)";
    return ncclInvalidArgument;
  }
  if (cfg->size < offsetof(ncclConfig_t, blocking) + sizeof(int)) {
    *why = "config->size " + std::to_string(cfg->size) + " is too small for an ncclConfig_t";
    return ncclInvalidArgument;
  }
  if (cfg->version < 21400 || cfg->version > 100000) {
    *why = "config->version " + std::to_string(cfg->version) + " is not an NCCL version";
    return ncclInvalidArgument;
  }
  if (HAS(blocking) && cfg->blocking != NCCL_CONFIG_UNDEF_INT) {
    if (cfg->blocking != 0 && cfg->blocking != 1) {
      *why = "config->blocking " + std::to_string(cfg->blocking) + " must be 0 or 1";
      return ncclInvalidArgument;
    }
    out->blocking = cfg->blocking == 1;
  }
  if (HAS(commName) && cfg->commName) out->commName = cfg->commName;
  // Tuning hints for NCCL's own kernels and network: nothing to map them to.
#define IGNORED_INT(f) \
  if (HAS(f) && cfg->f != NCCL_CONFIG_UNDEF_INT) note(&out->ignored, #f)
  IGNORED_INT(cgaClusterSize);
  IGNORED_INT(minCTAs);
  IGNORED_INT(maxCTAs);
  IGNORED_INT(splitShare);
  IGNORED_INT(trafficClass);
  IGNORED_INT(collnetEnable);
  IGNORED_INT(CTAPolicy);
  IGNORED_INT(shrinkShare);
  IGNORED_INT(nvlsCTAs);
  IGNORED_INT(nChannelsPerNetPeer);
  IGNORED_INT(nvlinkCentricSched);
#undef IGNORED_INT
  if (HAS(netName) && cfg->netName) note(&out->ignored, "netName");
  return ncclSuccess;
}

}  // namespace ncclx
