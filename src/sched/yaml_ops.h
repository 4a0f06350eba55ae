// The shape both YAML files of the engine share (algos/registry.yaml,
// config/tuning.yaml): a map from op name to a list of entries.  One walker,
// one set of messages, "file:line: message".
#pragma once
#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>

#include "base/base.h"

namespace flagcx {

// "file:line: " for a node's mark ("file: " when the mark has no line).
std::string yamlAt(const std::string &file, const YAML::Mark &m);

// Parses `text` (or reads the file `name` when text is null); an empty
// document is a null node.  `missing` is what a file that cannot be read
// says after its name.
bool yamlLoad(const std::string &name, const std::string *text, const std::string &missing,
              YAML::Node *out, std::string *err);

// Calls each(op, entry, err) for every entry of every op's list, in order.
// `what` names the entries in messages ("algorithms", "rules").  Errors from
// `each` are returned as they are; yaml-cpp's conversion errors get the place.
using OpEntryFn = std::function<bool(OpKind op, const std::string &opname,
                                     const YAML::Node &entry, std::string *err)>;
bool forEachOpEntry(const std::string &name, const YAML::Node &root, const char *what,
                    const OpEntryFn &each, std::string *err);

}  // namespace flagcx
