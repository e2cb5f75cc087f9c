#ifndef LOOM_FRONTEND_TORCH_EXPORT_PT2PAYLOADS_H
#define LOOM_FRONTEND_TORCH_EXPORT_PT2PAYLOADS_H

// The tensors a .pt2 archive stores beside its program: parameters and
// buffers under data/weights, lifted constants under data/constants, each
// listed by fully-qualified name in a model_*_config.json with its
// TensorMeta and file.

#include "frontend/torch_export/Pt2Archive.h"
#include "frontend/torch_export/TorchTypes.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringMap.h"

namespace loom::torch_export {

class Pt2Payloads {
public:
  /// Reads the weights and constants configs (either may be absent).
  static llvm::Expected<Pt2Payloads> load(const Pt2Archive &archive);

  /// The value stored for `fqn`, typed as `expected` (the program's view of
  /// it); errors when it is missing, pickled, not contiguous, of another
  /// shape or dtype, or its file is too short.
  llvm::Expected<mlir::DenseElementsAttr> tensor(llvm::StringRef fqn,
                                                 mlir::RankedTensorType expected) const;

  /// Where `fqn`'s bytes are: its file and its view of it (sizes, strides,
  /// offset). Names with the same key are one tensor saved under several
  /// names (tied weights: an embedding and the output projection); nullopt
  /// when `fqn` is not listed.
  std::optional<std::string> storageKey(llvm::StringRef fqn) const;

private:
  struct Entry {
    std::string file;    // archive entry
    llvm::json::Value meta = nullptr;
    bool pickled = false;
  };
  explicit Pt2Payloads(const Pt2Archive &archive) : archive_(&archive) {}
  llvm::Error addConfig(llvm::StringRef folder);

  const Pt2Archive *archive_;
  llvm::StringMap<Entry> entries_;
};

} // namespace loom::torch_export

#endif
