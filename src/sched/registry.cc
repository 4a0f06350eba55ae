// The algorithm registry: registry.yaml (yaml-cpp) and user folders.
#include "sched/registry.h"

#include <dlfcn.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>

#include "base/log.h"
#include "base/params.h"
#include "flagcx_paths.h"

namespace fs = std::filesystem;

namespace flagcx {

namespace {

bool hasRegistry(const std::string &dir) {
  std::error_code ec;
  return !dir.empty() && fs::exists(fs::path(dir) / "algos" / "registry.yaml", ec);
}

std::string yamlWhere(const std::string &file, const YAML::Mark &m) {
  if (m.line < 0) return file + ": ";
  return file + ":" + std::to_string(m.line + 1) + ": ";
}

}  // namespace

std::string dataDir() {
  if (paramIsSet(Param::DATA_DIR) && !paramStr(Param::DATA_DIR).empty())
    return paramStr(Param::DATA_DIR);
  Dl_info info{};
  if (dladdr(reinterpret_cast<void *>(&dataDir), &info) && info.dli_fname) {
    std::error_code ec;
    fs::path lib = fs::weakly_canonical(info.dli_fname, ec);
    // <prefix>/lib/libflagcx.so or <prefix>/lib/<multiarch>/libflagcx.so
    fs::path up = lib.parent_path().parent_path();
    for (int i = 0; !ec && i < 2; i++, up = up.parent_path()) {
      std::string d = (up / "share" / "flagcx").string();
      if (hasRegistry(d)) return d;
    }
  }
  if (hasRegistry(FLAGCX_INSTALL_DATADIR)) return FLAGCX_INSTALL_DATADIR;
  return FLAGCX_SOURCE_DIR;
}

bool Registry::add(AlgoInfo a, std::string *err) {
  for (auto &b : algos_) {
    if (b.op == a.op && b.name == a.name) {
      if (a.user && !b.user) {
        INFO(kTuning, "%s/%s: user script %s replaces %s", opName(a.op), a.name.c_str(),
             a.path.c_str(), b.path.c_str());
        b = std::move(a);
        return true;
      }
      if (a.user && b.user) {
        // Folders listed first in FLAGCX_ALGO_PATH win.
        return true;
      }
      *err = a.path + ": " + opName(a.op) + "/" + a.name + " is registered twice";
      return false;
    }
  }
  algos_.push_back(std::move(a));
  return true;
}

bool Registry::scanUserDir(const std::string &dir, std::string *err) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    *err = "FLAGCX_ALGO_PATH: " + dir + " is not a folder";
    return false;
  }
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it.depth() > 1) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file(ec) && it->path().extension() == ".lua") files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  fs::path top = fs::path(dir).lexically_normal();
  if (top.filename().empty()) top = top.parent_path();
  for (const fs::path &p : files) {
    fs::path parent = p.parent_path().lexically_normal();
    AlgoInfo a;
    a.user = true;
    a.path = p.string();
    OpKind op;
    if (parent != top && opFromName(parent.filename().string(), &op)) {
      a.op = op;
      a.name = p.stem().string();
    } else if (parent == top) {
      // A loose file: its own table says what it is.
      std::unique_ptr<Script> s;
      if (!Script::load(a.path, &s, err)) return false;
      a.op = s->op();
      a.name = s->name();
      a.summary = s->description();
    } else {
      continue;  // a folder that is not an op name: not ours
    }
    if (!add(std::move(a), err)) return false;
  }
  return true;
}

bool Registry::loadFrom(const std::string &registryYaml, const std::string &userPath,
                        Registry *out, std::string *err) {
  Registry r;
  // User folders first, so that their scripts take precedence.
  size_t pos = 0;
  while (pos <= userPath.size() && !userPath.empty()) {
    size_t next = userPath.find(':', pos);
    std::string dir = userPath.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    if (!dir.empty() && !r.scanUserDir(dir, err)) return false;
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  fs::path base = fs::path(registryYaml).parent_path();
  YAML::Node root;
  try {
    root = YAML::LoadFile(registryYaml);
  } catch (const YAML::BadFile &) {
    *err = registryYaml + ": cannot open (set FLAGCX_DATA_DIR to the folder holding algos/)";
    return false;
  } catch (const YAML::Exception &e) {
    *err = yamlWhere(registryYaml, e.mark) + e.msg;
    return false;
  }
  if (!root.IsMap()) {
    *err = yamlWhere(registryYaml, root.Mark()) + "expected a map of op name to algorithm list";
    return false;
  }
  try {
    for (const auto &kv : root) {
      std::string opname = kv.first.as<std::string>();
      OpKind op;
      if (!opFromName(opname, &op)) {
        *err = yamlWhere(registryYaml, kv.first.Mark()) + "unknown op '" + opname + "'";
        return false;
      }
      if (!kv.second.IsSequence()) {
        *err = yamlWhere(registryYaml, kv.second.Mark()) + "expected a list of algorithms";
        return false;
      }
      for (const auto &n : kv.second) {
        if (!n.IsMap() || !n["name"]) {
          *err = yamlWhere(registryYaml, n.Mark()) + "each algorithm needs a 'name'";
          return false;
        }
        AlgoInfo a;
        a.op = op;
        a.name = n["name"].as<std::string>();
        std::string file = n["file"] ? n["file"].as<std::string>() : opname + "/" + a.name + ".lua";
        a.path = (base / file).string();
        if (n["summary"]) a.summary = n["summary"].as<std::string>();
        if (r.find(op, a.name) && r.find(op, a.name)->user) continue;  // replaced by the user
        if (!r.add(std::move(a), err)) {
          *err = yamlWhere(registryYaml, n.Mark()) + *err;
          return false;
        }
      }
    }
  } catch (const YAML::Exception &e) {
    *err = yamlWhere(registryYaml, e.mark) + e.msg;
    return false;
  }
  *out = std::move(r);
  return true;
}

bool Registry::load(Registry *out, std::string *err) {
  std::string yaml = (fs::path(dataDir()) / "algos" / "registry.yaml").string();
  return loadFrom(yaml, paramStr(Param::ALGO_PATH), out, err);
}

const AlgoInfo *Registry::find(OpKind op, const std::string &name) const {
  for (const auto &a : algos_)
    if (a.op == op && a.name == name) return &a;
  return nullptr;
}

std::vector<const AlgoInfo *> Registry::forOp(OpKind op) const {
  std::vector<const AlgoInfo *> v;
  for (const auto &a : algos_)
    if (a.op == op) v.push_back(&a);
  return v;
}

const AlgoInfo *Registry::lookup(const std::string &s, std::string *err) const {
  size_t slash = s.find('/');
  OpKind op;
  if (slash == std::string::npos || !opFromName(s.substr(0, slash), &op)) {
    *err = "'" + s + "': expected op/name, e.g. allreduce/ring";
    return nullptr;
  }
  const AlgoInfo *a = find(op, s.substr(slash + 1));
  if (!a) {
    std::string names;
    for (const AlgoInfo *b : forOp(op)) names += (names.empty() ? "" : ", ") + b->name;
    *err = "unknown algorithm '" + s + "' (" + opName(op) + " has: " + names + ")";
  }
  return a;
}

Script *ScriptCache::get(const AlgoInfo &a, std::string *err) {
  for (auto &[info, s] : scripts_)
    if (info == &a) return s.get();
  std::unique_ptr<Script> s;
  if (!Script::load(a.path, &s, err)) return nullptr;
  if (s->op() != a.op || s->name() != a.name) {
    *err = a.path + ": the script declares " + opName(s->op()) + "/" + s->name() +
           " but is registered as " + opName(a.op) + "/" + a.name;
    return nullptr;
  }
  scripts_.emplace_back(&a, std::move(s));
  return scripts_.back().second.get();
}

}  // namespace flagcx
