// The algorithm registry: registry.yaml (yaml-cpp) and user folders.
#include "sched/registry.h"

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>

#include "base/base.h"
#include "flagcx_paths.h"
#include "sched/yaml_ops.h"

namespace fs = std::filesystem;

namespace flagcx {

namespace {

bool hasRegistry(const std::string &dir) {
  std::error_code ec;
  return !dir.empty() && fs::exists(fs::path(dir) / "algos" / "registry.yaml", ec);
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
    // Anything named *.lua but a folder is taken: a FIFO, a device or a
    // dangling link is then refused by name when it is loaded, not skipped
    // in silence.
    if (!it->is_directory(ec) && it->path().extension() == ".lua") files.push_back(it->path());
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
  if (!yamlLoad(registryYaml, nullptr, "cannot open (set FLAGCX_DATA_DIR to the folder holding algos/)",
                &root, err))
    return false;
  // An entry names a script and nothing else: what it does is the script's
  // own `description` (flagcx-algo list shows it).
  auto entry = [&](OpKind op, const std::string &opname, const YAML::Node &n, std::string *e) {
    if (!n.IsMap() || !n["name"]) {
      *e = yamlAt(registryYaml, n.Mark()) + "each algorithm needs a 'name'";
      return false;
    }
    for (const auto &f : n) {
      std::string key = f.first.as<std::string>();
      if (key != "name" && key != "file") {
        *e = yamlAt(registryYaml, f.first.Mark()) + "unknown key '" + key +
             "' (name, file; a description belongs in the script)";
        return false;
      }
    }
    AlgoInfo a;
    a.op = op;
    a.name = n["name"].as<std::string>();
    std::string file = n["file"] ? n["file"].as<std::string>() : opname + "/" + a.name + ".lua";
    a.path = (base / file).string();
    if (r.find(op, a.name) && r.find(op, a.name)->user) return true;  // replaced by the user
    if (!r.add(std::move(a), e)) {
      *e = yamlAt(registryYaml, n.Mark()) + *e;
      return false;
    }
    return true;
  };
  if (!forEachOpEntry(registryYaml, root, "algorithms", entry, err)) return false;
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

std::unique_ptr<Script> ScriptCache::take(const AlgoInfo &a) {
  for (auto it = scripts_.begin(); it != scripts_.end(); ++it) {
    if (it->first != &a) continue;
    std::unique_ptr<Script> s = std::move(it->second);
    scripts_.erase(it);
    return s;
  }
  return nullptr;
}

}  // namespace flagcx
