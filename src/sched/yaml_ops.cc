// Walking "op -> list" YAML files (registry.yaml, tuning.yaml).
#include "sched/yaml_ops.h"

#include <map>
#include <set>
#include <vector>

#include "base/base.h"

namespace flagcx {

namespace {

// yaml-cpp keeps every pair of a map with a repeated key, and node[key]
// answers with the first: a second "algo:" in a rule would be silently
// ignored.  Every map of the document is checked, without recursion (no C
// stack for deep nesting), and each container once: an alias is the anchored
// node itself (same place in the text), and revisiting aliases of aliases
// would take exponential time ("billion laughs").
bool noDuplicateKeys(const std::string &name, const YAML::Node &root, std::string *err) {
  std::vector<YAML::Node> todo{root};
  std::set<int> visited;  // text offsets of the containers walked
  while (!todo.empty()) {
    YAML::Node n = todo.back();
    todo.pop_back();
    if (!n.IsSequence() && !n.IsMap()) continue;
    if (n.Mark().pos >= 0 && !visited.insert(n.Mark().pos).second) continue;
    if (n.IsSequence()) {
      for (const auto &item : n) todo.push_back(item);
    } else if (n.IsMap()) {
      std::map<std::string, int> seen;  // key -> line
      for (const auto &kv : n) {
        if (kv.first.IsScalar()) {
          auto [it, fresh] = seen.emplace(kv.first.Scalar(), kv.first.Mark().line + 1);
          if (!fresh) {
            *err = yamlAt(name, kv.first.Mark()) + "duplicate key '" + kv.first.Scalar() +
                   "' (first at line " + std::to_string(it->second) + ")";
            return false;
          }
        }
        todo.push_back(kv.second);
      }
    }
  }
  return true;
}

}  // namespace

std::string yamlAt(const std::string &file, const YAML::Mark &m) {
  return m.line < 0 ? file + ": " : file + ":" + std::to_string(m.line + 1) + ": ";
}

bool yamlLoad(const std::string &name, const std::string *text, const std::string &missing,
              YAML::Node *out, std::string *err) {
  std::string fileText;
  if (!text) {
    if (!readConfigFile(name, &fileText, err)) {
      if (!missing.empty()) *err += " (" + missing + ")";
      return false;
    }
    text = &fileText;
  }
  try {
    *out = YAML::Load(*text);
  } catch (const YAML::Exception &e) {
    *err = yamlAt(name, e.mark) + e.msg;
    return false;
  }
  return noDuplicateKeys(name, *out, err);
}

bool forEachOpEntry(const std::string &name, const YAML::Node &root, const char *what,
                    const OpEntryFn &each, std::string *err) {
  if (root.IsNull()) return true;
  if (!root.IsMap()) {
    *err = yamlAt(name, root.Mark()) + "expected a map of op name to a list of " + what;
    return false;
  }
  try {
    for (const auto &kv : root) {
      std::string opname = kv.first.as<std::string>();
      OpKind op;
      if (!opFromName(opname, &op)) {
        *err = yamlAt(name, kv.first.Mark()) + "unknown op '" + opname + "'";
        return false;
      }
      if (!kv.second.IsSequence()) {
        *err = yamlAt(name, kv.second.Mark()) + "expected a list of " + what + " under '" +
               opname + "'";
        return false;
      }
      for (const auto &entry : kv.second)
        if (!each(op, opname, entry, err)) return false;
    }
  } catch (const YAML::Exception &e) {
    *err = yamlAt(name, e.mark) + e.msg;
    return false;
  }
  return true;
}

}  // namespace flagcx
