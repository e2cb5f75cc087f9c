#ifndef LOOM_FRONTEND_COMMON_IMPORTOPTIONS_H
#define LOOM_FRONTEND_COMMON_IMPORTOPTIONS_H

#include <cstdint>
#include <map>
#include <optional>
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
};

} // namespace loom

#endif
