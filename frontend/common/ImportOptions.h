#ifndef LOOM_FRONTEND_COMMON_IMPORTOPTIONS_H
#define LOOM_FRONTEND_COMMON_IMPORTOPTIONS_H

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace loom {

/// What an importer needs besides the model file: values for symbolic
/// dimensions (Loom compiles static shapes).
struct ImportOptions {
  std::optional<int64_t> batch; // --batch: a symbolic dim named like a batch
  std::optional<int64_t> seq;   // --seq: a symbolic dim named like a sequence
  std::map<std::string, int64_t> dims; // --dim NAME=VALUE, by exact name
  /// Whether parameters carry the model file's weights into the program.
  /// Without them (large models), parameters start from a seeded initializer
  /// and `loom-run --weights` supplies the values.
  bool embedWeights = true;

  /// What the import used of `seq` and `dims`, filled in by the importer
  /// when set: a --seq or --dim that fixes no symbolic dimension of the
  /// model does nothing, and loom-compile refuses it.
  struct Usage {
    bool seq = false;
    std::set<std::string> dims;
  };
  Usage *usage = nullptr;
};

} // namespace loom

#endif
