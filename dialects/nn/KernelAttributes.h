#ifndef LOOM_DIALECTS_NN_KERNELATTRIBUTES_H
#define LOOM_DIALECTS_NN_KERNELATTRIBUTES_H

#include "runtime/abi/DType.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"

#include <optional>
#include <vector>

namespace loom {

/// The attributes an nn op's kernel reads (runtime/abi/Kernels.def):
/// enums as strings, flags as 0/1 integers, defaults made explicit, so the
/// runtime never needs the op's defaults. Used by --loom-lower-to-rt and by
/// the constant evaluator, which runs the same kernels at compile time.
mlir::DictionaryAttr kernelAttrsFor(mlir::Operation *op);

/// The runtime's element type for an MLIR element type, if it has one.
std::optional<DType> runtimeDType(mlir::Type elementType);

/// A dense constant's elements as the runtime stores them: little-endian,
/// one byte per i1, splats expanded.
std::vector<uint8_t> runtimeBytes(mlir::DenseElementsAttr value, DType dtype);

} // namespace loom

#endif
