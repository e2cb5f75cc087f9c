#ifndef LOOM_FRONTEND_TORCH_EXPORT_PT2ARCHIVE_H
#define LOOM_FRONTEND_TORCH_EXPORT_PT2ARCHIVE_H

// Reading the zip archive torch.export.save writes: `<root>/models/*.json`
// (the serialized ExportedProgram) beside `<root>/data/...` payloads.

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <string>
#include <vector>

struct zip;

namespace loom::torch_export {

class Pt2Archive {
public:
  /// Opens `path`; fails with a one-line reason when it is not a readable zip
  /// or holds no `models/*.json`.
  static llvm::Expected<std::unique_ptr<Pt2Archive>> open(llvm::StringRef path);
  ~Pt2Archive();

  /// The archive's top folder with a trailing '/', e.g. "model/".
  llvm::StringRef root() const { return root_; }
  /// The entry holding the serialized program, e.g. "model/models/model.json".
  llvm::StringRef programEntry() const { return programEntry_; }
  bool contains(llvm::StringRef entry) const;
  /// The bytes of `entry` (a full name inside the archive).
  llvm::Expected<std::string> read(llvm::StringRef entry) const;

private:
  Pt2Archive() = default;
  zip *archive_ = nullptr;
  std::string root_;
  std::string programEntry_;
  std::vector<std::string> entries_;
};

} // namespace loom::torch_export

#endif
