#ifndef LOOM_FRONTEND_TORCH_EXPORT_TORCHTYPES_H
#define LOOM_FRONTEND_TORCH_EXPORT_TORCHTYPES_H

// torch.export's serialized types: ScalarType codes (torch/_export/serde/
// schema.py), TensorMeta, and SymInt sizes given as sympy expressions
// ("s0", "2*s1 + 1") that Loom fixes to numbers before compiling.

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <optional>
#include <string>

namespace loom::torch_export {

llvm::Error importError(const llvm::Twine &message);

/// A type printed as MLIR prints it, for messages.
std::string typeString(mlir::Type type);

/// The MLIR element type of a torch ScalarType code, if Loom has one.
std::optional<mlir::Type> elementTypeOf(mlir::MLIRContext *context, int64_t scalarType);
/// The torch name of a ScalarType code ("float32", "complex64"), for messages.
std::string scalarTypeName(int64_t scalarType);
/// Byte size of one element as torch stores it (bool: 1 byte).
int64_t storageBytesOf(mlir::Type elementType);

/// Values of the symbols in symbolic sizes.
class SymbolValues {
public:
  void bind(llvm::StringRef symbol, int64_t value) { values_[symbol] = value; }
  std::optional<int64_t> lookup(llvm::StringRef symbol) const;
  /// Evaluates a sympy expression over integers: numbers, bound symbols,
  /// + - * // % **, parentheses, Max/Min/FloorDiv/Mod/CeilDiv calls, and
  /// sympy's srepr (Symbol('s0', ...), Integer, Add, Mul, Pow).
  llvm::Expected<int64_t> evaluate(llvm::StringRef expression) const;

private:
  llvm::StringMap<int64_t> values_;
};

/// The symbol a size expression is, if it is one: "s0", or sympy's srepr
/// "Symbol('s0', positive=True, integer=True)".
std::optional<llvm::StringRef> symbolNameOf(llvm::StringRef expression);

/// A serialized SymInt ({"as_int": n} or {"as_expr": {"expr_str": ...}}).
llvm::Expected<int64_t> symIntValue(const llvm::json::Value &symInt,
                                    const SymbolValues &symbols);

/// The largest tensor Loom imports (2^48 elements).
constexpr int64_t kMaxTensorElements = int64_t(1) << 48;

/// The tensor type a TensorMeta describes, sizes fixed by `symbols`.
llvm::Expected<mlir::RankedTensorType>
tensorTypeOf(mlir::MLIRContext *context, const llvm::json::Value &meta,
             const SymbolValues &symbols);

/// The ScalarType code of a TensorMeta.
llvm::Expected<int64_t> scalarTypeOfMeta(const llvm::json::Value &meta);
/// complex32, complex64, complex128: imported as their real view, the
/// component type (complexComponentType) with a trailing dim of 2.
bool isComplexScalarType(int64_t scalarType);
int64_t complexComponentType(int64_t scalarType);

} // namespace loom::torch_export

#endif
