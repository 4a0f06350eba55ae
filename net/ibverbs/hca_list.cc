// Parsing and matching of FLAGCX_IB_HCA lists (hca_list.h).
#include "net/ibverbs/hca_list.h"

#include <cstdlib>

namespace flagcx::rdma {

bool HcaList::parse(const std::string &text, HcaList *out, std::string *err) {
  *out = HcaList{};
  size_t i = 0;
  if (i < text.size() && text[i] == '^') out->exclude = true, i++;
  if (i < text.size() && text[i] == '=') out->exact = true, i++;
  while (i < text.size()) {
    size_t comma = text.find(',', i);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(i, comma - i);
    i = comma + 1;
    if (item.empty()) continue;
    Entry e;
    size_t colon = item.find(':');
    e.name = item.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string p = item.substr(colon + 1);
      char *end = nullptr;
      long v = strtol(p.c_str(), &end, 10);
      if (p.empty() || *end != 0 || v < 1 || v > 255) {
        *err = "bad port in '" + item + "' (expected name:port, port 1..255)";
        return false;
      }
      e.port = static_cast<int>(v);
    }
    if (e.name.empty()) {
      *err = "empty device name in '" + item + "'";
      return false;
    }
    out->entries.push_back(e);
  }
  return true;
}

bool HcaList::allows(const std::string &device, int port) const {
  if (entries.empty()) return true;
  bool hit = false;
  for (const Entry &e : entries) {
    bool name = exact ? device == e.name : device.compare(0, e.name.size(), e.name) == 0;
    if (name && (e.port < 0 || e.port == port)) hit = true;
  }
  return exclude ? !hit : hit;
}

}  // namespace flagcx::rdma
