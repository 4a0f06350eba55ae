// Walking "op -> list" YAML files (registry.yaml, tuning.yaml).
#include "sched/yaml_ops.h"

namespace flagcx {

std::string yamlAt(const std::string &file, const YAML::Mark &m) {
  return m.line < 0 ? file + ": " : file + ":" + std::to_string(m.line + 1) + ": ";
}

bool yamlLoad(const std::string &name, const std::string *text, const std::string &missing,
              YAML::Node *out, std::string *err) {
  try {
    *out = text ? YAML::Load(*text) : YAML::LoadFile(name);
  } catch (const YAML::BadFile &) {
    *err = name + ": " + missing;
    return false;
  } catch (const YAML::Exception &e) {
    *err = yamlAt(name, e.mark) + e.msg;
    return false;
  }
  return true;
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
