#ifndef LOOM_FRONTEND_ONNX_ONNXNODEIMPORTER_H
#define LOOM_FRONTEND_ONNX_ONNXNODEIMPORTER_H

// What the per-operator import functions share: the node being imported, its
// inputs as nn values, its attributes, and helpers that build nn ops without
// ever crashing on shapes that do not fit (a failure becomes the node's one
// diagnostic).

#include "dialects/nn/NNOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringMap.h"

#include <string>

#ifndef ONNX_ML
#define ONNX_ML 1
#endif
#ifndef ONNX_NAMESPACE
#define ONNX_NAMESPACE onnx
#endif
#include "onnx/onnx_pb.h"

namespace loom::onnx_import {

/// The MLIR element type of an ONNX TensorProto data type, or null where
/// Loom has none (strings, unsigned and small integers, complex).
mlir::Type elementTypeOf(mlir::MLIRContext *context, int onnxDataType);

/// The name ONNX gives a data type (for messages).
std::string dataTypeName(int onnxDataType);

/// Host-side element access for constants (shape arithmetic, masks).
std::vector<int64_t> elementsAsInts(mlir::DenseElementsAttr attr);
std::vector<double> elementsAsDoubles(mlir::DenseElementsAttr attr);
/// Elements of `type` from int64 values (integer and bool types) or doubles
/// (float types); each converts to the other kind as needed.
mlir::DenseElementsAttr elementsFromInts(mlir::RankedTensorType type,
                                         llvm::ArrayRef<int64_t> values);
mlir::DenseElementsAttr elementsFromDoubles(mlir::RankedTensorType type,
                                            llvm::ArrayRef<double> values);

/// Imports one node. The functions in Onnx*Ops.cpp each handle one operator
/// and report problems through fail(); the driver turns them into one
/// diagnostic naming the node, its operator and the opset.
class NodeImporter {
public:
  using TensorReader = llvm::function_ref<mlir::FailureOr<mlir::DenseElementsAttr>(
      const onnx::TensorProto &, llvm::StringRef what)>;

  NodeImporter(mlir::OpBuilder &builder, mlir::Location loc,
               const onnx::NodeProto &node, int64_t opset,
               llvm::StringMap<mlir::Value> &values, TensorReader readTensor)
      : b(builder), loc(loc), node(node), opset(opset), readTensor(readTensor),
        values(values) {}

  mlir::OpBuilder &b;
  mlir::Location loc;
  const onnx::NodeProto &node;
  int64_t opset;
  /// Converts a TensorProto (a Constant's value) as initializers are.
  TensorReader readTensor;

  /// Why the node failed; set by fail().
  std::string error;
  mlir::LogicalResult fail(const llvm::Twine &message) {
    if (error.empty())
      error = message.str();
    return mlir::failure();
  }

  // --- inputs ---------------------------------------------------------------
  bool hasInput(int index) const {
    return index < node.input_size() && !node.input(index).empty();
  }
  int numInputs() const { return node.input_size(); }
  mlir::FailureOr<mlir::Value> input(int index);
  /// The value of a constant input (an initializer, a Constant node, or a
  /// subgraph of constants); an error naming the input otherwise.
  mlir::FailureOr<mlir::DenseElementsAttr> constantInput(int index,
                                                        llvm::StringRef role);
  mlir::FailureOr<std::vector<int64_t>> constantInts(int index,
                                                     llvm::StringRef role);
  /// Whether the input is an nn.constant (its value is known now).
  bool isConstantInput(int index);

  // --- outputs --------------------------------------------------------------
  bool wantsOutput(int index) const {
    return index < node.output_size() && !node.output(index).empty();
  }
  int numOutputs() const { return node.output_size(); }
  mlir::LogicalResult setOutput(int index, mlir::Value value);

  // --- attributes -----------------------------------------------------------
  const onnx::AttributeProto *attribute(llvm::StringRef name) const;
  mlir::FailureOr<int64_t> intAttr(llvm::StringRef name, int64_t defaultValue);
  mlir::FailureOr<float> floatAttr(llvm::StringRef name, float defaultValue);
  mlir::FailureOr<std::string> stringAttr(llvm::StringRef name,
                                          llvm::StringRef defaultValue);
  /// An ints attribute; nullopt when absent.
  mlir::FailureOr<std::optional<std::vector<int64_t>>>
  intsAttr(llvm::StringRef name);

  // --- building -------------------------------------------------------------
  /// Builds OpTy (an op that infers its result type) with a placeholder type,
  /// then infers the real one; a shape mismatch fails the node instead of
  /// aborting in the generated builder.
  template <typename OpTy, typename... Args>
  mlir::FailureOr<mlir::Value> inferred(Args &&...args) {
    auto op = b.create<OpTy>(loc, placeholderType(), std::forward<Args>(args)...);
    llvm::SmallVector<mlir::Type> types;
    if (mlir::failed(OpTy::inferReturnTypes(
            b.getContext(), loc, op->getOperands(), op->getAttrDictionary(),
            op->getPropertiesStorage(), op->getRegions(), types)) ||
        types.size() != 1) {
      op->erase();
      return fail("the operand shapes do not fit");
    }
    op->getResult(0).setType(types.front());
    return op->getResult(0);
  }

  mlir::Value constant(mlir::DenseElementsAttr value);
  /// A rank-0 constant of `elementType`.
  mlir::Value scalar(mlir::Type elementType, double value);
  mlir::FailureOr<mlir::Value> reshape(mlir::Value value,
                                       llvm::ArrayRef<int64_t> shape);
  mlir::FailureOr<mlir::Value> broadcastTo(mlir::Value value,
                                           llvm::ArrayRef<int64_t> shape);
  /// `axis` in [-rank, rank) (or [-rank, rank] with `inclusiveEnd`) as a
  /// non-negative dim.
  mlir::FailureOr<int64_t> normalizeAxis(int64_t axis, int64_t rank,
                                         llvm::StringRef what,
                                         bool inclusiveEnd = false);
  mlir::LogicalResult requireSameElementType(mlir::Value a, mlir::Value b);

  static mlir::RankedTensorType typeOf(mlir::Value v) {
    return mlir::cast<mlir::RankedTensorType>(v.getType());
  }

private:
  mlir::Type placeholderType() {
    return mlir::RankedTensorType::get({}, b.getF32Type());
  }
  llvm::StringMap<mlir::Value> &values;
};

using OpImportFn = mlir::LogicalResult (*)(NodeImporter &);
using OpTable = llvm::StringMap<OpImportFn>;

/// Each operator family registers its import functions by ONNX op type.
void addElementwiseOps(OpTable &table);
void addShapeOps(OpTable &table);
void addMathOps(OpTable &table);
void addConstantOps(OpTable &table);
void addRoutingOps(OpTable &table);

} // namespace loom::onnx_import

#endif
