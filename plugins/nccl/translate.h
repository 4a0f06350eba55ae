// NCCL <-> flagcx translation: result codes, datatypes, reduction operations,
// unique ids and ncclConfig_t.  Pure functions (no communicator, no device),
// so that the unit tests run them on any machine.
#pragma once
#include <flagcx.h>
#include <nccl.h>

#include <string>

namespace ncclx {

// Result codes.  0..7 have the same meaning on both sides; flagcx's
// UnhandledCCLError and NotSupported have no NCCL twin.
inline ncclResult_t toNccl(flagcxResult_t r) {
  if (static_cast<unsigned>(r) <= static_cast<unsigned>(flagcxInProgress))
    return static_cast<ncclResult_t>(r);
  if (r == flagcxNotSupported) return ncclInvalidUsage;
  return ncclInternalError;  // UnhandledCCLError and anything unknown
}

const char *ncclErrorText(ncclResult_t r);

// What a datatype is used for: plain movement (send, gather, …), a
// reduction, or the PreMulSum scaling before one.  Every ncclDataType_t maps
// to the flagcx type of the same value (float8 included: flagcx reduces it
// in float32 and rounds once); only the scaling has no float8 kernel.
enum class Use { Move, Reduce, Scale };

// ncclSuccess and *out set, or ncclInvalidArgument and *why says what.
ncclResult_t mapType(ncclDataType_t t, Use use, flagcxDataType_t *out, const char **why);
inline bool fastType(ncclDataType_t t) {
  return static_cast<unsigned>(t) <= static_cast<unsigned>(ncclBfloat16);
}
inline bool float8Type(ncclDataType_t t) { return t == ncclFloat8e4m3 || t == ncclFloat8e5m2; }

// Built-in reduction operations map 1:1 (sum, prod, max, min, avg).
inline bool builtinOp(ncclRedOp_t op) {
  return static_cast<unsigned>(op) < static_cast<unsigned>(ncclNumOps);
}

// User-defined PreMulSum operations are numbered from ncclNumOps upwards
// (NCCL does the same); the index into a communicator's table.
constexpr int kMaxUserOps = 4096;
inline int userOpIndex(ncclRedOp_t op) {
  int v = static_cast<int>(op);
  return v >= static_cast<int>(ncclNumOps) && v < static_cast<int>(ncclNumOps) + kMaxUserOps
             ? v - static_cast<int>(ncclNumOps)
             : -1;
}
inline ncclRedOp_t userOp(int index) {
  return static_cast<ncclRedOp_t>(static_cast<int>(ncclNumOps) + index);
}

// ncclUniqueId (128 bytes) carries a flagcxUniqueId (256 bytes) whose used
// part fits in 128: the tail must be zero.
ncclResult_t packId(const flagcxUniqueId &in, ncclUniqueId *out, std::string *why);
void unpackId(const ncclUniqueId &in, flagcxUniqueId *out);

struct Config {
  bool blocking = true;
  std::string commName;
  std::string ignored;  // fields set by the caller that flagcx ignores (for one INFO line)
};
// Read the fields of `cfg` that its `size` covers.  NULL: defaults (and
// NCCL_COMM_BLOCKING from `envBlocking`, which may be NULL).
ncclResult_t parseConfig(const ncclConfig_t *cfg, const char *envBlocking, Config *out,
                         std::string *why);

}  // namespace ncclx
