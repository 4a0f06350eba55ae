// FLAGCX_IB_HCA: which HCAs and ports the verbs transport may use, with
// FlagCX's (and NCCL's) syntax: a comma-separated list of `name[:port]`;
// names match as prefixes unless the list starts with `=` (exact names);
// a leading `^` turns the list into exclusions (`^=` excludes exact names).
// An empty list allows every device.
#pragma once
#include <string>
#include <vector>

namespace flagcx::rdma {

struct HcaList {
  struct Entry {
    std::string name;
    int port = -1;  // -1: any port
  };
  bool exclude = false;
  bool exact = false;
  std::vector<Entry> entries;

  // False (with *err naming the bad entry) when the text cannot be parsed.
  static bool parse(const std::string &text, HcaList *out, std::string *err);
  bool allows(const std::string &device, int port) const;
};

}  // namespace flagcx::rdma
