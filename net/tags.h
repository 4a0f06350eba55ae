// The tag of a message names the call it belongs to, so that a receiver
// can tell mismatched calls apart on the first message and both sides can
// be named in the log.  Layout (64 bits):
//   point-to-point:  kP2PTag
//   collective:      0b110 | ordered:1 | seq:20 | op:4 | dtype:4 | root:12 | count:20 (low bits)
// `ordered`: the call folds in rank order (deterministic mode), so that a
// rank in that mode and a peer not in it fail as mismatched calls instead of
// computing different orders.
// The executor makes tags; the transports only compare and print them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/base.h"
#include "flagcx.h"

namespace flagcx {

constexpr uint64_t kP2PTag = 0x5032500000000000ull;

uint64_t collTag(uint64_t seq, OpKind op, flagcxDataType_t dt, int root, size_t count,
                 bool ordered);
bool isCollTag(uint64_t tag);
uint64_t tagSeq(uint64_t tag);  // the collective's sequence number (20 bits)
// Is `theirs` a collective issued after `cur` (sequence numbers wrap at 2^20)?
bool laterCall(uint64_t theirs, uint64_t cur);
// How a tag reads in a log line: "allreduce #12 (float32, count 1000, root 0)"
// (", deterministic" added for an ordered call),
// "send/recv", or "tag 0x..." for anything else.
std::string tagText(uint64_t tag);

}  // namespace flagcx
