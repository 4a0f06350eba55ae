// What the schedule-engine tests share: the source tree, a scoped set of
// FLAGCX_* variables, a temporary folder.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/params.h"
#include "flagcx_paths.h"

namespace schedtest {

namespace fs = std::filesystem;

inline const std::string kSrc = FLAGCX_SOURCE_DIR;

// Sets FLAGCX_* variables for one test and restores a clean environment.
class Env {
 public:
  Env() {
    clear();
    set("FLAGCX_DATA_DIR", kSrc);
  }
  ~Env() {
    clear();
    flagcx::paramsReload();
  }
  void set(const char *k, const std::string &v) {
    setenv(k, v.c_str(), 1);
    flagcx::paramsReload();
  }

 private:
  static void clear() {
    for (const char *k : {"FLAGCX_ALGO_PATH", "FLAGCX_ALGO", "FLAGCX_TUNING_FILE",
                          "FLAGCX_TUNING_POLICY", "FLAGCX_DATA_DIR"})
      unsetenv(k);
  }
};

// A fresh temporary folder, removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/flagcx-sched-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string &rel, const std::string &text) const {
    fs::path p = path / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
};

}  // namespace schedtest
