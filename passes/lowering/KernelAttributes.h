#ifndef LOOM_PASSES_LOWERING_KERNELATTRIBUTES_H
#define LOOM_PASSES_LOWERING_KERNELATTRIBUTES_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"

namespace loom {

/// The attributes an nn op's kernel reads (runtime/executable/Kernels.def):
/// enums as strings, flags as 0/1 integers, defaults made explicit, so the
/// runtime never needs the op's defaults. Used by --loom-lower-to-rt and by
/// the constant evaluator, which runs the same kernels at compile time.
mlir::DictionaryAttr kernelAttrsFor(mlir::Operation *op);

} // namespace loom

#endif
