// Which algorithm scripts exist: the shipped ones listed in
// <data>/algos/registry.yaml, and a user's folder(s) from FLAGCX_ALGO_PATH
// (searched first; a user script with the same op and name replaces the
// shipped one).  User folders hold <op>/<name>.lua files, or .lua files at
// their top level whose op and name are read from the script itself.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "sched/ir.h"
#include "sched/script.h"

namespace flagcx {

// Where the shipped algos/ and config/ live: FLAGCX_DATA_DIR, else
// <libdir>/../share/flagcx next to the loaded library, else the install
// prefix's share/flagcx, else the source tree.
std::string dataDir();

struct AlgoInfo {
  OpKind op = OpKind::Count;
  std::string name;
  std::string path;     // the .lua file (its `description` says what it does)
  bool user = false;    // from FLAGCX_ALGO_PATH
};

class Registry {
 public:
  // The shipped registry plus FLAGCX_ALGO_PATH.  Errors: "file:line: message".
  static bool load(Registry *out, std::string *err);
  // Same from explicit places (userPath may be empty, or several folders
  // separated by ':').
  static bool loadFrom(const std::string &registryYaml, const std::string &userPath,
                       Registry *out, std::string *err);

  const std::vector<AlgoInfo> &all() const { return algos_; }
  const AlgoInfo *find(OpKind op, const std::string &name) const;
  std::vector<const AlgoInfo *> forOp(OpKind op) const;
  // "allreduce/ring" -> its entry; nullptr (and *err) when unknown.
  const AlgoInfo *lookup(const std::string &opSlashName, std::string *err) const;

 private:
  bool add(AlgoInfo a, std::string *err);
  bool scanUserDir(const std::string &dir, std::string *err);
  std::vector<AlgoInfo> algos_;
};

// Loaded scripts, one per registry entry, opened on first use.
class ScriptCache {
 public:
  explicit ScriptCache(const Registry &r) : reg_(r) {}
  // Loads the script and checks that it declares the op and name it is
  // registered under.
  Script *get(const AlgoInfo &a, std::string *err);
  // Hands a loaded script over to the caller (nullptr when not loaded); a
  // later get() loads it again.
  std::unique_ptr<Script> take(const AlgoInfo &a);

 private:
  const Registry &reg_;
  std::vector<std::pair<const AlgoInfo *, std::unique_ptr<Script>>> scripts_;
};

}  // namespace flagcx
