#ifndef LOOM_FRONTEND_TORCH_EXPORT_GRAPHIMPORTER_H
#define LOOM_FRONTEND_TORCH_EXPORT_GRAPHIMPORTER_H

// Converts the nodes of a serialized torch.export graph into nn ops inside
// the function being built. Values are looked up by the names the graph
// gives them; every result's type comes from the graph's tensor_values, so
// converters only decide which nn ops compute it.

#include "frontend/torch_export/TorchTypes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringSet.h"

#include <map>
#include <tuple>

namespace loom::torch_export {

class GraphImporter;

/// One graph's names: its tensors, symbolic ints and their types.
struct GraphScope {
  const llvm::json::Object *tensorValues = nullptr;
  const llvm::json::Object *symIntValues = nullptr;
  llvm::StringMap<mlir::Value> tensors;
  llvm::StringMap<int64_t> symInts;
  llvm::StringMap<bool> symBools;
  /// Names whose value Loom does not compute (e.g. argmax indices), with why.
  llvm::StringMap<std::string> unavailable;

  /// How an aliasing name was made from the tensor it shares storage with:
  /// its parent's name and the view node that made it, or no node when it
  /// is the parent itself under another name (an in-place op's result,
  /// detach, alias). In-place ops are functionalized through these.
  struct Alias {
    std::string parent;
    const llvm::json::Object *node = nullptr;
  };
  llvm::StringMap<Alias> aliases;
  /// Aliases whose storage was mutated through another name since they were
  /// computed: recomputed from their parent when next read.
  llvm::StringSet<> stale;
};

/// A node being converted: typed access to its named arguments and results.
class NodeContext {
public:
  NodeContext(GraphImporter &importer, const llvm::json::Object &node);

  llvm::StringRef target() const { return target_; }
  GraphImporter &importer() { return importer_; }
  mlir::OpBuilder &builder();
  mlir::Location loc() const;

  /// The argument named `name` (or, for unnamed ones, at `position`); null
  /// when absent.
  const llvm::json::Object *arg(llvm::StringRef name, int position) const;
  /// Present and not None.
  bool has(llvm::StringRef name, int position) const;
  /// A Python number (as_int/as_float/as_bool/sym) rather than a tensor.
  bool isNumber(llvm::StringRef name, int position) const;

  llvm::Expected<mlir::Value> tensor(llvm::StringRef name, int position);
  llvm::Expected<std::optional<mlir::Value>> optionalTensor(llvm::StringRef name, int position);
  /// as_tensors or as_optional_tensors; None entries are empty.
  llvm::Expected<llvm::SmallVector<std::optional<mlir::Value>>>
  tensorList(llvm::StringRef name, int position);
  llvm::Expected<int64_t> integer(llvm::StringRef name, int position,
                                  std::optional<int64_t> fallback = std::nullopt) const;
  /// An int that may be None (slice bounds).
  llvm::Expected<std::optional<int64_t>> optionalInteger(llvm::StringRef name, int position) const;
  llvm::Expected<double> number(llvm::StringRef name, int position,
                                std::optional<double> fallback = std::nullopt) const;
  llvm::Expected<std::optional<double>> optionalNumber(llvm::StringRef name, int position) const;
  llvm::Expected<bool> boolean(llvm::StringRef name, int position,
                               std::optional<bool> fallback = std::nullopt) const;
  llvm::Expected<llvm::SmallVector<int64_t>> integers(llvm::StringRef name, int position) const;
  llvm::Expected<std::string> string(llvm::StringRef name, int position,
                                     std::optional<std::string> fallback = std::nullopt) const;
  /// A tensor argument, or a number made a rank-0 constant of `elementType`.
  llvm::Expected<mlir::Value> tensorOrNumber(llvm::StringRef name, int position,
                                             mlir::Type elementType);

  /// The node's results, flattened (a list result counts each tensor).
  size_t numResults() const { return results_.size(); }
  /// The graph's name of result `index` (empty when it has none).
  llvm::StringRef resultName(size_t index) const {
    return index < results_.size() ? llvm::StringRef(results_[index].name) : llvm::StringRef();
  }
  /// The type tensor_values gives result `index`.
  llvm::Expected<mlir::RankedTensorType> resultType(size_t index) const;
  /// Binds result `index` to `value`; the types must agree.
  llvm::Error setResult(size_t index, mlir::Value value);
  llvm::Error setSymIntResult(size_t index, int64_t value);
  llvm::Error setSymBoolResult(size_t index, bool value);
  /// Marks result `index` as not computed, saying why if something uses it.
  void setUnavailable(size_t index, const llvm::Twine &reason);

  /// Whether every tensor argument read so far is an nn.constant.
  bool inputsAreConstant() const { return inputsConstant_; }

private:
  friend class GraphImporter;
  struct Result {
    enum Kind { None, Tensor, SymInt, SymBool } kind = None;
    std::string name;
  };
  llvm::Expected<mlir::Value> lookup(llvm::StringRef name);
  llvm::Expected<int64_t> symInt(const llvm::json::Value &argument) const;
  llvm::Error argumentError(llvm::StringRef name, int position, llvm::StringRef expected) const;

  GraphImporter &importer_;
  const llvm::json::Object &node_;
  std::string target_;
  const llvm::json::Array *inputsJson_ = nullptr;
  llvm::SmallVector<Result> results_;
  bool inputsConstant_ = true;
};

class GraphImporter {
public:
  GraphImporter(mlir::OpBuilder &builder, mlir::Location loc, const SymbolValues &symbols)
      : builder_(builder), loc_(loc), fileLoc_(loc), symbols_(symbols) {}

  mlir::OpBuilder &builder() { return builder_; }
  mlir::Location loc() const { return loc_; }
  mlir::MLIRContext *context() const { return builder_.getContext(); }
  const SymbolValues &symbols() const { return symbols_; }
  GraphScope &scope() { return scopes_.back(); }

  /// Converts `graph`'s nodes in the current scope (pushed by the caller,
  /// with the graph's inputs bound) and returns the values of its outputs.
  llvm::Expected<llvm::SmallVector<mlir::Value>> importGraph(const llvm::json::Object &graph);
  void pushScope(const llvm::json::Object &graph);
  void popScope() { scopes_.pop_back(); }

  /// The current value of tensor `name`: a view whose storage was mutated
  /// through another name since is recomputed first.
  llvm::Expected<mlir::Value> valueOf(llvm::StringRef name);
  /// Recomputes `name` (and its stale parents) if a mutation made it stale.
  llvm::Error refresh(llvm::StringRef name);

  /// The type tensor_values gives `name` in the current graph.
  llvm::Expected<mlir::RankedTensorType> typeOf(llvm::StringRef name) const;

  // Building blocks for the operator converters.
  mlir::Value constant(mlir::DenseElementsAttr value);
  /// A rank-0 constant (`value` converted to `elementType`).
  mlir::Value scalar(mlir::Type elementType, double value);
  /// A constant of `type` with every element `value`.
  mlir::Value splat(mlir::RankedTensorType type, double value);
  /// Creates an op, verifies it, and returns its first result.
  template <typename OpT, typename... Args>
  llvm::Expected<mlir::Value> create(Args &&...args) {
    auto op = builder_.create<OpT>(loc_, std::forward<Args>(args)...);
    if (llvm::Error err = verify(op.getOperation()))
      return std::move(err);
    return op->getNumResults() ? op->getResult(0) : mlir::Value();
  }
  llvm::Error verify(mlir::Operation *op);
  /// Whether the graph gives `name` a complex dtype (imported as its real
  /// view, a trailing dim of 2).
  bool isComplex(llvm::StringRef name) const;
  /// `value` with element type `elementType` (an nn.cast when it differs).
  llvm::Expected<mlir::Value> castTo(mlir::Value value, mlir::Type elementType);
  /// `value` reshaped to `shape` (no op when it already has it).
  llvm::Expected<mlir::Value> reshapeTo(mlir::Value value, llvm::ArrayRef<int64_t> shape);
  /// `value` broadcast NumPy-style to `shape`.
  llvm::Expected<mlir::Value> broadcastTo(mlir::Value value, llvm::ArrayRef<int64_t> shape);
  /// Rows [begin, end) of `value` along `axis` (itself when that is all).
  llvm::Expected<mlir::Value> rowsAlong(mlir::Value value, int64_t axis, int64_t begin,
                                        int64_t end);
  /// `base` with rows [begin, limit) along `axis` replaced by `rows` (their
  /// shape): the parts of `base` before and after, concatenated around them.
  llvm::Expected<mlir::Value> placeAlong(mlir::Value base, mlir::Value rows, int64_t axis,
                                         int64_t begin, int64_t limit);
  /// The value of `value` if it is a compile-time constant.
  std::optional<mlir::DenseElementsAttr> constantValue(mlir::Value value) const;
  /// Attention masks already read, by (mask, queries, keys): whether each
  /// is causal and whether it attends everywhere. Reading one is O(S^2), and
  /// every layer of a model passes the same constant.
  std::map<std::tuple<const void *, int64_t, int64_t>, std::pair<bool, bool>> maskKinds;

private:
  llvm::Error convertNode(const llvm::json::Object &node);
  llvm::Error convertHigherOrderWrap(NodeContext &node, int graphPosition);
  llvm::Error convertSymbolicOperator(NodeContext &node, llvm::StringRef op);
  llvm::Error foldConstantResults(NodeContext &node);
  /// `x.op_(...)`: the functional `op` computes the new value, which then
  /// replaces `x` and everything that shares its storage.
  llvm::Error convertInPlace(NodeContext &node, const llvm::json::Object &object,
                             llvm::StringRef functional);
  /// Records the results of a view node as aliases of its input.
  void recordAliases(NodeContext &node, const llvm::json::Object &object);
  /// Gives tensor `name` the value `value` and its storage's other names
  /// theirs: the base is rewritten where the view covers it, the other
  /// views become stale.
  llvm::Error mutate(llvm::StringRef name, mlir::Value value);
  /// Whether the TensorMeta of `name` has row-major contiguous strides.
  bool isContiguous(llvm::StringRef name) const;
  bool touchesComplex(const llvm::json::Object &node) const;
  /// The base of `chain` (name, its parent, ..., the base) with the
  /// elements the view `chain.front()` covers replaced by `value`.
  llvm::Expected<mlir::Value> scatterIntoBase(llvm::ArrayRef<std::string> chain,
                                              mlir::Value value);

  friend class NodeContext;
  mlir::OpBuilder &builder_;
  /// The node being converted (a NameLoc of its name), and the file.
  mlir::Location loc_, fileLoc_;
  const SymbolValues &symbols_;
  /// Replaying views on index tensors: results keep shapes, not dtypes.
  bool replaying_ = false;
  std::vector<GraphScope> scopes_;
};

/// "torch.ops.aten.add_.Tensor" -> "torch.ops.aten.add.Tensor" (and
/// __iand__ -> __and__): the functional form of an in-place operator, by
/// ATen's naming convention; none for other operators.
std::optional<std::string> functionalCounterpart(llvm::StringRef target);

/// Converts one ATen operator node; the registry is in AtenOps.cpp.
using OperatorConverter = llvm::Error (*)(NodeContext &node);
/// The converter for `target` ("torch.ops.aten.add.Tensor"), looked up by
/// full name, then by name without overload; null when unsupported.
OperatorConverter findOperatorConverter(llvm::StringRef target);
/// A node that reads or makes a complex tensor (AtenOps.cpp).
llvm::Error convertComplexNode(NodeContext &node);
/// The dims a reduction node's `dim` argument (position 1: an int, a list,
/// or absent or empty for every dim) names, normalized and sorted.
llvm::Expected<llvm::SmallVector<int64_t>> reductionDims(NodeContext &node, int64_t rank);
/// div(self, other, rounding_mode='floor' or 'trunc') of integers
/// (AtenRoutingOps.cpp).
llvm::Error convertRoundedDivide(NodeContext &node, llvm::StringRef mode);

} // namespace loom::torch_export

#endif
