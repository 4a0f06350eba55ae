// Making a collective's tag, ordering two calls' sequence numbers, and how a
// tag reads in a log line (tags.h).
#include "net/tags.h"

#include <cstdio>

#include "base/base.h"

namespace flagcx {

namespace {
constexpr uint64_t kCollMark = 0x6ull << 61;
constexpr uint64_t kOrderedBit = 1ull << 60;
constexpr uint64_t kSeqMask = 0xFFFFF;
}  // namespace

uint64_t collTag(uint64_t seq, OpKind op, flagcxDataType_t dt, int root, size_t count,
                 bool ordered) {
  return kCollMark | (ordered ? kOrderedBit : 0) | ((seq & kSeqMask) << 40) |
         (static_cast<uint64_t>(op) << 36) |
         (static_cast<uint64_t>(dt) << 32) | ((static_cast<uint64_t>(root) & 0xFFF) << 20) |
         (count & 0xFFFFF);
}

bool isCollTag(uint64_t tag) { return (tag >> 61) == (kCollMark >> 61); }
uint64_t tagSeq(uint64_t tag) { return (tag >> 40) & kSeqMask; }

bool laterCall(uint64_t theirs, uint64_t cur) {
  if (!isCollTag(theirs) || !isCollTag(cur)) return false;
  uint64_t d = (tagSeq(theirs) - tagSeq(cur)) & kSeqMask;
  return d != 0 && d < (kSeqMask + 1) / 2;
}

std::string tagText(uint64_t tag) {
  if (tag == kP2PTag) return "send/recv";
  if (!isCollTag(tag)) {
    char b[40];
    snprintf(b, sizeof(b), "tag 0x%llx", static_cast<unsigned long long>(tag));
    return b;
  }
  unsigned op = (tag >> 36) & 0xF;
  unsigned root = (tag >> 20) & 0xFFF;  // all ones: the op has no root
  char rootText[24] = "";
  if (root != 0xFFF) snprintf(rootText, sizeof(rootText), ", root %u", root);
  char b[160];
  snprintf(b, sizeof(b), "%s #%llu (%s, count %llu%s%s)",
           op < static_cast<unsigned>(OpKind::Count) ? opName(static_cast<OpKind>(op)) : "?",
           static_cast<unsigned long long>(tagSeq(tag)),
           dtypeName(static_cast<flagcxDataType_t>((tag >> 32) & 0xF)),
           static_cast<unsigned long long>(tag & 0xFFFFF), rootText,
           tag & kOrderedBit ? ", deterministic" : "");
  return b;
}

}  // namespace flagcx
