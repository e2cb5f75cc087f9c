// --loom-rebatch: re-infers a function's shapes for another batch size (see
// Passes.td). Models exported with a fixed batch carry it in every shape;
// this follows the batch dimension from the arguments through the ops.

#include "passes/training/Passes.h"

#include "dialects/nn/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"

namespace loom {
#define GEN_PASS_DEF_REBATCH
#include "passes/training/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

/// Constants larger than this are not re-made for a new batch.
constexpr int64_t kMaxRebuiltConstant = int64_t(1) << 24;

RankedTensorType tensorTypeOf(Value v) { return dyn_cast<RankedTensorType>(v.getType()); }

int64_t product(ArrayRef<int64_t> dims) {
  int64_t p = 1;
  for (int64_t d : dims)
    p *= d;
  return p;
}

/// "node 'view_3' (nn.reshape)" when the importer named the op's node.
std::string describe(Operation *op) {
  std::string name;
  op->getLoc()->walk([&](Location loc) {
    if (auto named = dyn_cast<NameLoc>(loc)) {
      name = named.getName().str();
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  std::string opName = op->getName().getStringRef().str();
  return name.empty() ? "'" + opName + "'" : "node '" + name + "' (" + opName + ")";
}

std::optional<SmallVector<int64_t>> broadcastAll(ArrayRef<SmallVector<int64_t>> shapes) {
  size_t rank = 0;
  for (const auto &s : shapes)
    rank = std::max(rank, s.size());
  SmallVector<int64_t> out(rank, 1);
  for (const auto &s : shapes) {
    size_t offset = rank - s.size();
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t &o = out[offset + d];
      if (s[d] == o || s[d] == 1)
        continue;
      if (o != 1)
        return std::nullopt;
      o = s[d];
    }
  }
  return out;
}

/// Where a value holds the batch: dim `dim`, of size outer * batch * inner.
struct BatchDim {
  int64_t dim = 0;
  int64_t outer = 1;
};

class Rebatcher {
public:
  Rebatcher(int64_t oldBatch, int64_t newBatch) : B(oldBatch), N(newBatch) {}

  LogicalResult run(func::FuncOp func) {
    Block &body = func.getBody().front();
    for (BlockArgument arg : body.getArguments()) {
      RankedTensorType type = tensorTypeOf(arg);
      if (!type || type.getRank() == 0 || type.getDimSize(0) != B)
        continue;
      SmallVector<int64_t> shape(type.getShape());
      shape[0] = N;
      setType(arg, type.clone(shape));
      batched[arg] = {0, 1};
    }
    for (Operation &op : llvm::make_early_inc_range(body)) {
      if (op.hasTrait<OpTrait::IsTerminator>())
        continue;
      if (llvm::none_of(op.getOperands(), [&](Value v) { return batched.count(v); }))
        continue;
      if (failed(rebatch(&op)))
        return failure();
    }
    SmallVector<Type> results(body.getTerminator()->getOperandTypes());
    func.setFunctionType(
        FunctionType::get(func.getContext(), body.getArgumentTypes(), results));
    return success();
  }

private:
  int64_t B, N;
  llvm::DenseMap<Value, BatchDim> batched;
  /// The types values had before the pass changed them.
  llvm::DenseMap<Value, RankedTensorType> oldTypes;
  llvm::DenseMap<std::pair<Value, int64_t>, Value> remade;

  RankedTensorType oldType(Value v) const {
    auto it = oldTypes.find(v);
    return it != oldTypes.end() ? it->second : tensorTypeOf(v);
  }
  SmallVector<int64_t> oldShape(Value v) const {
    RankedTensorType t = oldType(v);
    return t ? SmallVector<int64_t>(t.getShape()) : SmallVector<int64_t>();
  }
  void setType(Value v, RankedTensorType type) {
    if (!oldTypes.count(v))
      oldTypes[v] = tensorTypeOf(v);
    v.setType(type);
  }
  /// The size dim `d` of a batched value has for the new batch.
  int64_t scaled(int64_t size) const { return size / B * N; }

  /// Old result shapes are the broadcast of the old operand shapes.
  bool isBroadcastingElementwise(Operation *op) const {
    if (op->getNumOperands() == 0 || op->getNumResults() == 0)
      return false;
    SmallVector<SmallVector<int64_t>> shapes;
    for (Value v : op->getOperands()) {
      if (!tensorTypeOf(v))
        return false;
      shapes.push_back(oldShape(v));
    }
    std::optional<SmallVector<int64_t>> out = broadcastAll(shapes);
    if (!out)
      return false;
    return llvm::all_of(op->getResults(), [&](Value r) {
      RankedTensorType t = tensorTypeOf(r);
      return t && t.getShape() == ArrayRef<int64_t>(*out);
    });
  }

  LogicalResult fail(Operation *op, const Twine &why) {
    return op->emitError(describe(op) + ": " + why);
  }

  LogicalResult rebatch(Operation *op) {
    OpBuilder builder(op);
    SmallVector<std::optional<BatchDim>> known(op->getNumResults());
    SmallVector<RankedTensorType> newTypes;
    for (Value r : op->getResults())
      newTypes.push_back(tensorTypeOf(r));

    if (auto reshape = dyn_cast<nn::ReshapeOp>(op)) {
      int64_t dim = 0, outer = 1;
      SmallVector<int64_t> shape;
      if (failed(followReshape(reshape, dim, outer, shape)))
        return failure();
      newTypes[0] = reshape.getType().clone(shape);
      known[0] = BatchDim{dim, outer};
    } else if (auto broadcast = dyn_cast<nn::BroadcastOp>(op)) {
      BatchDim in = batched.lookup(broadcast.getInput());
      SmallVector<int64_t> inOld = oldShape(broadcast.getInput());
      SmallVector<int64_t> shape(broadcast.getType().getShape());
      int64_t j = in.dim + int64_t(shape.size()) - int64_t(inOld.size());
      if (j < 0 || shape[j] != inOld[in.dim])
        return fail(op, "broadcasts the batch dim (" + Twine(inOld[in.dim]) + " -> " +
                            Twine(j < 0 ? 0 : shape[j]) + "), so its size cannot follow a new batch");
      shape[j] = tensorTypeOf(broadcast.getInput()).getDimSize(in.dim);
      newTypes[0] = broadcast.getType().clone(shape);
      known[0] = BatchDim{j, in.outer};
    } else if (auto slice = dyn_cast<nn::SliceOp>(op)) {
      BatchDim in = batched.lookup(slice.getInput());
      int64_t d = in.dim;
      if (slice.getStarts()[d] != 0 || slice.getStrides()[d] != 1 ||
          slice.getLimits()[d] != oldShape(slice.getInput())[d])
        return fail(op, "takes some of the batch's sequences (a slice of dim " + Twine(d) +
                            "), which a new batch cannot follow");
      SmallVector<int64_t> limits(slice.getLimits());
      limits[d] = tensorTypeOf(slice.getInput()).getDimSize(d);
      slice.setLimits(limits);
      SmallVector<int64_t> shape(slice.getType().getShape());
      shape[d] = limits[d];
      newTypes[0] = slice.getType().clone(shape);
      known[0] = in;
    } else if (auto split = dyn_cast<nn::SplitOp>(op)) {
      BatchDim in = batched.lookup(split.getInput());
      int64_t rank = tensorTypeOf(split.getInput()).getRank();
      int64_t axis = split.getDim() < 0 ? split.getDim() + rank : split.getDim();
      if (axis == in.dim)
        return fail(op, "splits the batch dim, which a new batch cannot follow");
      for (auto [i, r] : llvm::enumerate(op->getResults())) {
        SmallVector<int64_t> shape(tensorTypeOf(r).getShape());
        shape[in.dim] = tensorTypeOf(split.getInput()).getDimSize(in.dim);
        newTypes[i] = tensorTypeOf(r).clone(shape);
        known[i] = in;
      }
    } else {
      if (auto gather = dyn_cast<nn::GatherOp>(op); gather && failed(remakeGatherIndices(gather)))
        return failure();
      if ((isBroadcastingElementwise(op) || isa<nn::ConcatOp, nn::MatmulOp>(op)) &&
          failed(remakeUnbatchedOperands(op)))
        return failure();
      if (failed(inferResultTypes(op, newTypes)))
        return failure();
    }

    for (auto [i, result] : llvm::enumerate(op->getResults())) {
      RankedTensorType before = tensorTypeOf(result);
      if (!before || newTypes[i] == before)
        continue;
      setType(result, newTypes[i]);
      if (known[i]) {
        batched[result] = *known[i];
        continue;
      }
      SmallVector<int64_t> changed;
      for (int64_t d = 0; d < before.getRank(); ++d)
        if (before.getDimSize(d) != newTypes[i].getDimSize(d))
          changed.push_back(d);
      if (changed.size() != 1)
        return fail(op, "its result's shape changes in " + Twine(changed.size()) +
                            " dims for a new batch; Loom follows one batch dim");
      // The batch factor keeps its place within the dim when the dim is an
      // operand's batch dim unchanged.
      int64_t outer = 1;
      for (Value v : op->getOperands())
        if (auto it = batched.find(v); it != batched.end() &&
                                       oldShape(v)[it->second.dim] == before.getDimSize(changed[0]))
          outer = it->second.outer;
      batched[result] = {changed[0], outer};
    }
    return verifyOp(op);
  }

  LogicalResult inferResultTypes(Operation *op, SmallVectorImpl<RankedTensorType> &newTypes) {
    if (auto infer = dyn_cast<InferTypeOpInterface>(op)) {
      SmallVector<Type> inferred;
      if (failed(infer.inferReturnTypes(op->getContext(), std::nullopt, op->getOperands(),
                                        op->getAttrDictionary(), op->getPropertiesStorage(),
                                        op->getRegions(), inferred)) ||
          inferred.size() != newTypes.size())
        return fail(op, "its result types cannot be inferred for a new batch (an operand "
                        "still has the old batch of " + Twine(B) + ")");
      for (auto [i, type] : llvm::enumerate(inferred))
        newTypes[i] = cast<RankedTensorType>(type);
      return success();
    }
    if (op->hasTrait<OpTrait::SameOperandsAndResultType>()) {
      for (RankedTensorType &type : newTypes)
        type = tensorTypeOf(op->getOperand(0));
      return success();
    }
    if (isBroadcastingElementwise(op)) {
      SmallVector<SmallVector<int64_t>> shapes;
      for (Value v : op->getOperands())
        shapes.push_back(SmallVector<int64_t>(tensorTypeOf(v).getShape()));
      std::optional<SmallVector<int64_t>> out = broadcastAll(shapes);
      if (!out)
        return fail(op, "its operands no longer broadcast for a new batch");
      for (RankedTensorType &type : newTypes)
        type = type.clone(*out);
      return success();
    }
    return fail(op, "Loom cannot re-infer its result shape for a new batch (the op neither "
                    "infers its types nor broadcasts its operands)");
  }

  /// An operand of a broadcasting op, a concat or a matmul that has no
  /// batch but the batch's size in a dim aligned with an operand's batch dim
  /// (or that dim's size, the batch merged with other dims there: BLOOM's
  /// ALiBi bias, [B * heads, 1, S], folded beside scores [B * heads, S, S];
  /// the zeros a static export's pooling window starts from, concatenated
  /// beside the batch's values along another dim): made again at the new
  /// size, if it is the same for every sequence.
  /// A gather whose data has the batch in the gathered dim (the rows of
  /// every sequence, flattened: `mask[arange(B)[:, None], kv]` taken as
  /// positions b * S + kv) through indices made without the batch but with
  /// a dim of its size: the indices made again at the new batch, if they
  /// count along that dim (countedAlongBatch).
  LogicalResult remakeGatherIndices(nn::GatherOp gather) {
    auto it = batched.find(gather.getData());
    Value indices = gather.getIndices();
    if (it == batched.end() || it->second.dim != gather.getAxis() || batched.count(indices))
      return success();
    SmallVector<int64_t> shape = oldShape(indices);
    for (int64_t q = 0; q < int64_t(shape.size()); ++q) {
      if (shape[q] != B)
        continue;
      FailureOr<Value> again = remake(indices, q, gather, 0, 1);
      if (failed(again))
        return failure();
      gather.getIndicesMutable().assign(*again);
      batched[*again] = {q, 1};
      return success();
    }
    return success();
  }

  LogicalResult remakeUnbatchedOperands(Operation *op) {
    auto concat = dyn_cast<nn::ConcatOp>(op);
    bool matmul = isa<nn::MatmulOp>(op);
    int64_t rank = 0;
    for (Value v : op->getOperands())
      rank = std::max<int64_t>(rank, oldShape(v).size());
    // Aligned from the right: the batch dim's old size and its outer factor.
    llvm::SmallDenseMap<int64_t, std::pair<int64_t, int64_t>> batchDims;
    for (Value v : op->getOperands())
      if (auto it = batched.find(v); it != batched.end())
        batchDims.try_emplace(it->second.dim + rank - int64_t(oldShape(v).size()),
                              oldShape(v)[it->second.dim], it->second.outer);
    for (OpOperand &operand : op->getOpOperands()) {
      Value v = operand.get();
      if (batched.count(v))
        continue;
      SmallVector<int64_t> shape = oldShape(v);
      int64_t offset = rank - int64_t(shape.size());
      for (auto [p, sizeAndOuter] : batchDims) {
        auto [size, outer] = sizeAndOuter;
        int64_t q = p - offset;
        // A dim of 1 where the batch alone was 1 broadcasts against any batch.
        if (q < 0 || shape[q] != size || (size == 1 && B == 1))
          continue;
        // Sequences joined along the batch dim itself stay as they are; a
        // matmul's batch dims are all but its last two (a state of zeros of
        // the export's batch that a chunked scan multiplies: Qwen3-Next).
        if ((concat && q == concat.getDim()) || (matmul && q >= int64_t(shape.size()) - 2))
          continue;
        FailureOr<Value> again = remake(v, q, op, 0, outer);
        if (failed(again))
          return failure();
        operand.set(*again);
        batched[*again] = {q, outer};
        break;
      }
    }
    return success();
  }

  /// An integer constant that counts along the batch dim, the same step for
  /// every position of the other dims (`arange(B)` as an advanced index of
  /// every sequence: `mask[arange(B)[:, None], kv]`, as positions of the
  /// batch's rows, b * S + kv), counted on over the new batch; nullopt when
  /// it does not count so.
  std::optional<DenseElementsAttr> countedAlongBatch(DenseElementsAttr dense,
                                                     RankedTensorType type,
                                                     RankedTensorType newType, int64_t dim,
                                                     int64_t dimOuter, int64_t dimInner) {
    if (B < 2 || !isa<IntegerType>(type.getElementType()) ||
        type.getElementType().isInteger(1))
      return std::nullopt;
    SmallVector<APInt> old(dense.getValues<APInt>());
    int64_t inner = product(type.getShape().drop_front(dim + 1)) * dimInner;
    int64_t outer = product(type.getShape().take_front(dim)) * dimOuter;
    auto at = [&](int64_t o, int64_t b, int64_t i) -> const APInt & {
      return old[(o * B + b) * inner + i];
    };
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        APInt step = at(o, 1, i) - at(o, 0, i);
        if (step.isZero())
          return std::nullopt; // the same for every sequence: the caller's case
        for (int64_t b = 2; b < B; ++b)
          if (at(o, b, i) - at(o, b - 1, i) != step)
            return std::nullopt;
      }
    SmallVector<APInt> fresh;
    fresh.reserve(outer * N * inner);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t b = 0; b < N; ++b)
        for (int64_t i = 0; i < inner; ++i) {
          APInt step = at(o, 1, i) - at(o, 0, i);
          fresh.push_back(at(o, 0, i) + step * APInt(step.getBitWidth(), b));
        }
    return DenseElementsAttr::get(newType, fresh);
  }

  /// `v` made again with dim `dim` (outer * B * inner elements) at outer *
  /// N * inner.
  FailureOr<Value> remake(Value v, int64_t dim, Operation *user, int depth,
                          int64_t dimOuter = 1) {
    if (auto it = remade.find({v, dim}); it != remade.end())
      return it->second;
    RankedTensorType type = tensorTypeOf(v);
    SmallVector<int64_t> shape(type.getShape());
    const int64_t dimInner = shape[dim] / (dimOuter * B);
    shape[dim] = dimOuter * N * dimInner;
    RankedTensorType newType = type.clone(shape);
    Operation *def = v.getDefiningOp();
    auto baked = [&]() {
      Operation *where = def ? def : user;
      return fail(where, "the batch (" + Twine(B) + ") is baked into this value (" +
                             Twine(std::to_string(type.getNumElements())) +
                             " elements, dim " + Twine(dim) + "), which differs between "
                             "sequences or is not a constant; re-export with a dynamic batch "
                             "(torch.export.Dim) or at the batch you compile for");
    };
    if (!def)
      return baked();
    OpBuilder builder(def);
    builder.setInsertionPointAfter(def);
    Value result;
    // Constants, and parameters imported with their value (ONNX
    // initializers): made again as constants. A parameter sized by the batch
    // is no weight (weights do not depend on the batch) but data, such as a
    // mask an exporter folded.
    DenseElementsAttr dense;
    if (auto constant = dyn_cast<nn::ConstantOp>(def))
      dense = dyn_cast<DenseElementsAttr>(constant.getValue());
    else if (auto parameter = dyn_cast<nn::ParameterOp>(def);
             parameter && parameter.getValue())
      dense = dyn_cast<DenseElementsAttr>(*parameter.getValue());
    if (dense) {
      if (newType.getNumElements() > kMaxRebuiltConstant)
        return baked();
      DenseElementsAttr values;
      if (dense.isSplat()) {
        values = DenseElementsAttr::get(newType, dense.getSplatValue<Attribute>());
      } else if (std::optional<DenseElementsAttr> counted =
                     countedAlongBatch(dense, type, newType, dim, dimOuter, dimInner)) {
        values = *counted;
      } else {
        SmallVector<Attribute> old(dense.getValues<Attribute>());
        int64_t inner = product(ArrayRef<int64_t>(type.getShape()).drop_front(dim + 1)) *
                        dimInner;
        int64_t outer = product(ArrayRef<int64_t>(type.getShape()).take_front(dim)) * dimOuter;
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t b = 1; b < B; ++b)
            for (int64_t i = 0; i < inner; ++i)
              if (old[(o * B + b) * inner + i] != old[o * B * inner + i])
                return baked();
        SmallVector<Attribute> fresh;
        fresh.reserve(outer * N * inner);
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t b = 0; b < N; ++b)
            for (int64_t i = 0; i < inner; ++i)
              fresh.push_back(old[o * B * inner + i]);
        values = DenseElementsAttr::get(newType, fresh);
      }
      result = builder.create<nn::ConstantOp>(def->getLoc(), values);
    } else if (auto broadcast = dyn_cast<nn::BroadcastOp>(def)) {
      ArrayRef<int64_t> in = tensorTypeOf(broadcast.getInput()).getShape();
      int64_t q = dim - (type.getRank() - int64_t(in.size()));
      Value input = broadcast.getInput();
      if (q >= 0 && in[q] != 1) {
        // The batch was there before the broadcast: made again there.
        if (in[q] != type.getDimSize(dim) || depth >= 16)
          return baked();
        FailureOr<Value> again = remake(input, q, def, depth + 1, dimOuter);
        if (failed(again))
          return failure();
        input = *again;
      }
      result = builder.create<nn::BroadcastOp>(def->getLoc(), newType, input);
    } else if (auto iota = dyn_cast<nn::IotaOp>(def)) {
      // Along the batch dim alone, it counts over the new batch as it did
      // over the old (an index of every sequence).
      if (iota.getDim() == dim && (dimOuter != 1 || dimInner != 1))
        return baked();
      Operation *clone = builder.clone(*def);
      clone->getResult(0).setType(newType);
      result = clone->getResult(0);
    } else if (depth < 16 && def->getNumResults() == 1 && isBroadcastingElementwise(def)) {
      // Computed from constants: made again from its operands made again.
      Operation *clone = builder.clone(*def);
      for (OpOperand &operand : clone->getOpOperands()) {
        RankedTensorType t = tensorTypeOf(operand.get());
        int64_t q = dim - (type.getRank() - t.getRank());
        if (q < 0 || t.getDimSize(q) != type.getDimSize(dim))
          continue;
        FailureOr<Value> again = remake(operand.get(), q, def, depth + 1, dimOuter);
        if (failed(again)) {
          clone->erase();
          return failure();
        }
        operand.set(*again);
      }
      clone->getResult(0).setType(newType);
      result = clone->getResult(0);
    } else {
      return baked();
    }
    if (failed(verifyOp(result.getDefiningOp())))
      return failure();
    remade[{v, dim}] = result;
    return result;
  }

  /// Finds the batch in a reshape's result by the elements above and below
  /// it in the row-major order, which a reshape keeps.
  LogicalResult followReshape(nn::ReshapeOp reshape, int64_t &dim, int64_t &outer,
                              SmallVector<int64_t> &shape) {
    BatchDim in = batched.lookup(reshape.getInput());
    SmallVector<int64_t> inOld = oldShape(reshape.getInput());
    ArrayRef<int64_t> out = reshape.getType().getShape();
    int64_t inner = inOld[in.dim] / (in.outer * B);
    int64_t above = product(ArrayRef<int64_t>(inOld).take_front(in.dim)) * in.outer;
    int64_t below = inner * product(ArrayRef<int64_t>(inOld).drop_front(in.dim + 1));
    SmallVector<std::pair<int64_t, int64_t>> candidates; // (dim, outer)
    for (int64_t j = 0; j < int64_t(out.size()); ++j) {
      int64_t p = product(out.take_front(j)), q = product(out.drop_front(j + 1));
      if (p == 0 || q == 0 || above % p != 0 || below % q != 0)
        continue;
      int64_t o = above / p, i = below / q;
      if (out[j] == o * B * i)
        candidates.push_back({j, o});
    }
    if (candidates.empty())
      return fail(reshape, "mixes the batch dim with others (" + Twine(typeString(oldType(reshape.getInput()))) +
                               " -> " + typeString(reshape.getType()) +
                               "), so its shape cannot follow a new batch");
    // Several places only when dims of size 1 surround the batch (a batch of
    // 1): the same dim counted from the front, then from the back.
    auto pick = candidates.front();
    int64_t fromBack = int64_t(out.size()) - (int64_t(inOld.size()) - in.dim);
    for (auto c : llvm::reverse(candidates))
      if (c.first == fromBack)
        pick = c;
    for (auto c : llvm::reverse(candidates))
      if (c.first == in.dim)
        pick = c;
    dim = pick.first;
    outer = pick.second;
    shape.assign(out.begin(), out.end());
    shape[dim] = scaled(out[dim] / outer) * outer;
    return success();
  }

  static std::string typeString(Type type) {
    std::string s;
    llvm::raw_string_ostream os(s);
    type.print(os);
    return os.str();
  }

  LogicalResult verifyOp(Operation *op) {
    std::string message;
    LogicalResult result = success();
    {
      ScopedDiagnosticHandler capture(op->getContext(), [&](Diagnostic &diagnostic) {
        if (message.empty())
          message = diagnostic.str();
        return success();
      });
      result = mlir::verify(op, /*verifyRecursively=*/false);
    }
    if (succeeded(result))
      return success();
    return fail(op, "does not verify for a new batch: " + message);
  }
};

struct RebatchPass : public loom::impl::RebatchBase<RebatchPass> {
  using RebatchBase::RebatchBase;

  void runOnOperation() override {
    if (batch == 0)
      return;
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>(function);
    if (!func || func.isExternal()) {
      module.emitError("no function @") << function << " to re-batch";
      return signalPassFailure();
    }
    if (batch < 0) {
      func.emitError("the batch must be positive, got ") << batch;
      return signalPassFailure();
    }
    RankedTensorType first =
        func.getNumArguments() ? tensorTypeOf(func.getArgument(0)) : RankedTensorType();
    if (!first || first.getRank() == 0) {
      func.emitError("@") << function
                          << "'s first argument has no batch dim (a tensor of rank 1 or more)";
      return signalPassFailure();
    }
    int64_t old = first.getDimSize(0);
    if (old == batch)
      return;
    if (old <= 0) {
      func.emitError("@") << function << "'s batch dim has no static size";
      return signalPassFailure();
    }
    if (failed(Rebatcher(old, batch).run(func)))
      return signalPassFailure();
  }
};

} // namespace
