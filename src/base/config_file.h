// Reading the files a user points the library at: algorithm scripts, the
// tuning policy, the tuning rules and the algorithm registry (YAML).  Each is
// read whole into memory, so each must be a regular file of bounded size;
// anything else is refused at once with a message that names the path and
// what it is, instead of blocking (a FIFO), reading forever (/dev/zero) or
// silently taking something else (a directory).
//
// Symbolic links are followed: pointing a variable at a link to the real
// file is ordinary (config kept in a versioned folder, /etc/alternatives),
// and the user who sets the variable could name the target directly anyway.
// The rule is checked on what was actually opened (fstat of the open file),
// so a link swapped between a check and the open cannot slip past it.
#pragma once
#include <cstddef>
#include <string>

namespace flagcx {

constexpr size_t kMaxConfigFileBytes = size_t(16) << 20;

// Reads `path` into *text.  On failure *err reads "PATH: why" (cannot open:
// ENOENT text; not a regular file (a directory); N bytes, more than the
// 16 MiB a configuration or script file may have).
bool readConfigFile(const std::string &path, std::string *text, std::string *err,
                    size_t maxBytes = kMaxConfigFileBytes);

}  // namespace flagcx
