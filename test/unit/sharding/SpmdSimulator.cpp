#include "SpmdSimulator.h"

#include "dialects/dist/DistDialect.h"
#include "dialects/nn/NNOps.h"
#include "frontend/common/ConstantEvaluator.h"
#include "passes/sharding/FactorSharding.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

using namespace mlir;
using loom::sharding::Layout;

namespace loom::test {

namespace {

using Shape = std::vector<int64_t>;

Shape shapeOf(RankedTensorType t) { return Shape(t.getShape().begin(), t.getShape().end()); }

std::vector<double> toDoubles(DenseElementsAttr attr) {
  std::vector<double> values;
  Type element = attr.getElementType();
  if (isa<FloatType>(element)) {
    for (APFloat v : attr.getValues<APFloat>()) {
      bool lost = false;
      v.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &lost);
      values.push_back(v.convertToDouble());
    }
  } else if (element.isInteger(1)) {
    for (bool v : attr.getValues<bool>())
      values.push_back(v);
  } else {
    for (APInt v : attr.getValues<APInt>())
      values.push_back(static_cast<double>(v.getSExtValue()));
  }
  if (attr.isSplat())
    values.resize(attr.getNumElements(), values.front());
  return values;
}

DenseElementsAttr fromDoubles(RankedTensorType type, const std::vector<double> &values) {
  Type element = type.getElementType();
  if (auto floatType = dyn_cast<FloatType>(element)) {
    SmallVector<APFloat> floats;
    for (double v : values) {
      APFloat f(v);
      bool lost = false;
      f.convert(floatType.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
      floats.push_back(f);
    }
    return DenseElementsAttr::get(type, floats);
  }
  if (element.isInteger(1)) {
    SmallVector<bool> bits;
    for (double v : values)
      bits.push_back(v != 0);
    return DenseElementsAttr::get(type, bits);
  }
  SmallVector<APInt> ints;
  for (double v : values)
    ints.push_back(APInt(element.getIntOrFloatBitWidth(), static_cast<int64_t>(v), true));
  return DenseElementsAttr::get(type, ints);
}

/// Copies the block [offset, offset + size) of `whole` out (extract) or in.
void copyBlock(std::vector<double> &whole, const Shape &wholeShape, std::vector<double> &block,
               const Shape &offset, const Shape &size, bool extract) {
  int64_t n = 1;
  for (int64_t s : size)
    n *= s;
  if (extract)
    block.assign(n, 0.0);
  Shape index(size.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t flat = 0;
    for (size_t d = 0; d < size.size(); ++d)
      flat = flat * wholeShape[d] + offset[d] + index[d];
    if (extract)
      block[i] = whole[flat];
    else
      whole[flat] = block[i];
    for (int64_t d = int64_t(size.size()) - 1; d >= 0; --d) {
      if (++index[d] < size[d])
        break;
      index[d] = 0;
    }
  }
}

double reduceValues(const std::vector<double> &xs, StringRef kind, bool f32) {
  double acc = xs.front();
  float accf = float(xs.front());
  for (size_t i = 1; i < xs.size(); ++i) {
    if (kind == "sum" || kind == "mean") {
      acc += xs[i];
      accf += float(xs[i]);
    } else if (kind == "max") {
      acc = std::max(acc, xs[i]);
      accf = std::max(accf, float(xs[i]));
    } else {
      acc = std::min(acc, xs[i]);
      accf = std::min(accf, float(xs[i]));
    }
  }
  if (kind == "mean") {
    acc /= double(xs.size());
    accf /= float(xs.size());
  }
  return f32 ? double(accf) : acc;
}

} // namespace

SpmdSimulator::SpmdSimulator(ModuleOp module) : module_(module) {
  if (auto mesh = module->getAttrOfType<dist::MeshAttr>(dist::kMeshAttrName)) {
    for (auto [name, size] : llvm::zip(mesh.getNames(), mesh.getSizes())) {
      axisNames_.push_back(name.str());
      axisSizes_.push_back(size);
      numRanks_ *= size;
    }
  }
}

const HostTensor *SpmdSimulator::parameter(const std::string &name) const {
  auto it = parameters_.find(name);
  return it == parameters_.end() ? nullptr : &it->second;
}

std::vector<std::string> SpmdSimulator::parameterNames() const {
  std::vector<std::string> names;
  for (const auto &[name, value] : parameters_)
    names.push_back(name);
  return names;
}

llvm::Expected<std::vector<HostTensor>>
SpmdSimulator::step(const std::vector<HostTensor> &arguments) {
  auto error = [](const Twine &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  auto coord = [&](int64_t rank, StringRef axis) -> int64_t {
    int64_t c = 0;
    for (int64_t i = int64_t(axisNames_.size()) - 1; i >= 0; --i) {
      c = rank % axisSizes_[i];
      rank /= axisSizes_[i];
      if (axisNames_[i] == axis)
        return c;
    }
    return 0;
  };
  auto axisSize = [&](StringRef axis) -> int64_t {
    for (size_t i = 0; i < axisNames_.size(); ++i)
      if (axisNames_[i] == axis)
        return axisSizes_[i];
    return 1;
  };
  // The block of a whole tensor a rank holds under a layout (major axis first).
  auto blockOf = [&](const Shape &whole, const Layout &layout, int64_t rank,
                     Shape &offset, Shape &size) {
    offset.assign(whole.size(), 0);
    size = whole;
    for (size_t d = 0; d < whole.size() && d < layout.dims.size(); ++d)
      for (StringRef axis : layout.dims[d]) {
        size[d] /= axisSize(axis);
        offset[d] += coord(rank, axis) * size[d];
      }
  };
  // The ranks sharing `rank`'s coordinates off `axes`, in group order.
  auto groupOf = [&](int64_t rank, ArrayRef<StringRef> axes) {
    std::vector<std::pair<int64_t, int64_t>> members; // (index in group, rank)
    for (int64_t q = 0; q < numRanks_; ++q) {
      bool same = true;
      for (const std::string &a : axisNames_)
        if (!llvm::is_contained(axes, StringRef(a)) && coord(q, a) != coord(rank, a))
          same = false;
      if (!same)
        continue;
      int64_t index = 0;
      for (StringRef a : axes)
        index = index * axisSize(a) + coord(q, a);
      members.push_back({index, q});
    }
    llvm::sort(members);
    return members;
  };
  auto axesOf = [](ArrayAttr attr) {
    SmallVector<StringRef> axes;
    for (Attribute a : attr)
      axes.push_back(cast<StringAttr>(a).getValue());
    return axes;
  };

  auto func = module_.lookupSymbol<func::FuncOp>("main");
  if (!func)
    return error("no @main");
  std::vector<llvm::DenseMap<Value, DenseElementsAttr>> values(numRanks_);
  auto cut = [&](HostTensor &whole, const Layout &layout, RankedTensorType localType,
                 Value into) {
    for (int64_t r = 0; r < numRanks_; ++r) {
      Shape offset, size;
      blockOf(shapeOf(whole.type), layout, r, offset, size);
      std::vector<double> local;
      copyBlock(whole.data, shapeOf(whole.type), local, offset, size, /*extract=*/true);
      values[r][into] = fromDoubles(localType, local);
    }
  };
  if (arguments.size() != func.getNumArguments())
    return error("wrong number of arguments");
  for (BlockArgument arg : func.getArguments()) {
    HostTensor whole = arguments[arg.getArgNumber()];
    Layout layout = sharding::getAnnotation(arg).value_or(
        Layout::replicated(whole.type.getRank()));
    cut(whole, layout, cast<RankedTensorType>(arg.getType()), arg);
  }

  std::vector<HostTensor> results;
  struct Write {
    std::string name;
    Layout layout;
    std::vector<DenseElementsAttr> shards;
  };
  std::vector<Write> writes;
  for (Operation &op : func.getBody().front()) {
    if (auto param = dyn_cast<nn::ParameterOp>(op)) {
      std::string name = param.getName().str();
      auto wholeType = param.getType();
      if (auto global = param->getAttrOfType<TypeAttr>("dist.global_type"))
        wholeType = cast<RankedTensorType>(global.getValue());
      if (!parameters_.count(name)) {
        HostTensor init{wholeType, {}};
        if (auto value = param.getValue())
          init.data = toDoubles(cast<DenseElementsAttr>(*value));
        else if (param.getInit() == nn::InitKind::zeros)
          init.data.assign(wholeType.getNumElements(), 0.0);
        else if (param.getInit() == nn::InitKind::ones)
          init.data.assign(wholeType.getNumElements(), 1.0);
        else
          return error("parameter '" + name + "' has no value to start from");
        parameters_[name] = init;
      }
      Layout layout = sharding::getAnnotation(param.getResult())
                          .value_or(Layout::replicated(wholeType.getRank()));
      cut(parameters_[name], layout, param.getType(), param.getResult());
      continue;
    }
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (Value v : ret.getOperands()) {
        std::vector<double> first = toDoubles(values[0][v]);
        for (int64_t r = 1; r < numRanks_; ++r)
          if (toDoubles(values[r][v]) != first)
            return error("rank " + Twine(r) + " returns another value than rank 0");
        results.push_back({cast<RankedTensorType>(v.getType()), first});
      }
      continue;
    }
    if (auto assign = dyn_cast<nn::AssignOp>(op)) {
      auto param = assign.getParameter().getDefiningOp<nn::ParameterOp>();
      if (!param)
        return error("nn.assign to something that is not a parameter");
      Write w{param.getName().str(),
              sharding::getAnnotation(param.getResult())
                  .value_or(Layout::replicated(param.getType().getRank())),
              {}};
      for (int64_t r = 0; r < numRanks_; ++r)
        w.shards.push_back(values[r][assign.getValue()]);
      writes.push_back(std::move(w));
      continue;
    }
    bool isF32 = op.getNumResults() == 1 &&
                 cast<RankedTensorType>(op.getResult(0).getType()).getElementType().isF32();
    if (auto ar = dyn_cast<dist::AllReduceOp>(op)) {
      SmallVector<StringRef> axes = axesOf(ar.getAxes());
      // A bucket reduces each of its inputs on its own.
      for (auto [input, result] : llvm::zip(ar.getInputs(), ar.getResults())) {
        auto type = cast<RankedTensorType>(result.getType());
        bool f32 = type.getElementType().isF32();
        std::vector<DenseElementsAttr> out(numRanks_);
        for (int64_t r = 0; r < numRanks_; ++r) {
          auto group = groupOf(r, axes);
          std::vector<std::vector<double>> xs;
          for (auto [index, q] : group)
            xs.push_back(toDoubles(values[q][input]));
          std::vector<double> y(xs[0].size());
          for (size_t i = 0; i < y.size(); ++i) {
            std::vector<double> column;
            for (auto &x : xs)
              column.push_back(x[i]);
            y[i] = reduceValues(column, dist::stringifyReduceKind(ar.getReduce()), f32);
          }
          out[r] = fromDoubles(type, y);
        }
        for (int64_t r = 0; r < numRanks_; ++r)
          values[r][result] = out[r];
      }
      continue;
    }
    if (auto ag = dyn_cast<dist::AllGatherOp>(op)) {
      SmallVector<StringRef> axes = axesOf(ag.getAxes());
      int64_t dim = ag.getDim();
      Shape outShape = shapeOf(ag.getType()), inShape = shapeOf(ag.getInput().getType());
      for (int64_t r = 0; r < numRanks_; ++r) {
        std::vector<double> y(ag.getType().getNumElements());
        for (auto [index, q] : groupOf(r, axes)) {
          std::vector<double> x = toDoubles(values[q][ag.getInput()]);
          Shape offset(outShape.size(), 0);
          offset[dim] = index * inShape[dim];
          copyBlock(y, outShape, x, offset, inShape, /*extract=*/false);
        }
        values[r][ag.getResult()] = fromDoubles(ag.getType(), y);
      }
      continue;
    }
    if (auto rs = dyn_cast<dist::ReduceScatterOp>(op)) {
      SmallVector<StringRef> axes = axesOf(rs.getAxes());
      int64_t dim = rs.getDim();
      for (auto [input, result] : llvm::zip(rs.getInputs(), rs.getResults())) {
        auto type = cast<RankedTensorType>(result.getType());
        bool f32 = type.getElementType().isF32();
        Shape inShape = shapeOf(cast<RankedTensorType>(input.getType())), outShape = shapeOf(type);
        std::vector<DenseElementsAttr> out(numRanks_);
        for (int64_t r = 0; r < numRanks_; ++r) {
          auto group = groupOf(r, axes);
          std::vector<std::vector<double>> xs;
          int64_t mine = 0;
          for (auto [index, q] : group) {
            xs.push_back(toDoubles(values[q][input]));
            if (q == r)
              mine = index;
          }
          std::vector<double> full(xs[0].size());
          for (size_t i = 0; i < full.size(); ++i) {
            std::vector<double> column;
            for (auto &x : xs)
              column.push_back(x[i]);
            full[i] = reduceValues(column, dist::stringifyReduceKind(rs.getReduce()), f32);
          }
          Shape offset(inShape.size(), 0);
          offset[dim] = mine * outShape[dim];
          std::vector<double> block;
          copyBlock(full, inShape, block, offset, outShape, /*extract=*/true);
          out[r] = fromDoubles(type, block);
        }
        for (int64_t r = 0; r < numRanks_; ++r)
          values[r][result] = out[r];
      }
      continue;
    }
    if (auto a2a = dyn_cast<dist::AllToAllOp>(op)) {
      // Rank i of the group sends block j of split_dim to rank j; what
      // arrives is concatenated along concat_dim in group order.
      SmallVector<StringRef> axes = axesOf(a2a.getAxes());
      int64_t split = a2a.getSplitDim(), concat = a2a.getConcatDim();
      Shape inShape = shapeOf(a2a.getInput().getType()), outShape = shapeOf(a2a.getType());
      Shape piece = inShape;
      piece[split] = outShape[split];
      std::vector<DenseElementsAttr> out(numRanks_);
      for (int64_t r = 0; r < numRanks_; ++r) {
        auto group = groupOf(r, axes);
        int64_t mine = 0;
        for (auto [index, q] : group)
          if (q == r)
            mine = index;
        std::vector<double> y(a2a.getType().getNumElements());
        for (auto [index, q] : group) {
          std::vector<double> x = toDoubles(values[q][a2a.getInput()]);
          Shape from(inShape.size(), 0), to(outShape.size(), 0);
          from[split] = mine * piece[split];
          to[concat] = index * piece[concat];
          std::vector<double> block;
          copyBlock(x, inShape, block, from, piece, /*extract=*/true);
          copyBlock(y, outShape, block, to, piece, /*extract=*/false);
        }
        out[r] = fromDoubles(a2a.getType(), y);
      }
      for (int64_t r = 0; r < numRanks_; ++r)
        values[r][a2a.getResult()] = out[r];
      continue;
    }
    if (op.getDialect() && op.getDialect()->getNamespace() == "dist")
      return error("the simulator does not run '" + op.getName().getStringRef() + "'");
    const bool byRank = op.hasAttr(dist::kRankOffsetsAttrName);
    DictionaryAttr attrs = op.getAttrDictionary();
    for (int64_t r = 0; r < numRanks_; ++r) {
      SmallVector<DenseElementsAttr> operands;
      for (Value v : op.getOperands())
        operands.push_back(values[r][v]);
      // Attributes that differ by rank (a block's start), as rank r has them.
      if (byRank) {
        op.setAttrs(attrs);
        auto index = [&](ArrayRef<std::string> names) {
          SmallVector<StringRef> axes(names.begin(), names.end());
          for (auto [i, q] : groupOf(r, axes))
            if (q == r)
              return i;
          return int64_t(0);
        };
        if (failed(dist::applyRankOffsets(&op, index)))
          return error("malformed rank offsets on '" + op.getName().getStringRef() + "'");
      }
      FailureOr<SmallVector<DenseElementsAttr>> out = evaluateOp(&op, operands);
      if (byRank)
        op.setAttrs(attrs);
      if (failed(out))
        return error("the CPU kernels cannot run '" + op.getName().getStringRef() + "'");
      for (auto [result, value] : llvm::zip(op.getResults(), *out))
        values[r][result] = value;
    }
  }
  // Parameters written this step: every rank's shard back into the whole.
  for (Write &w : writes) {
    HostTensor &whole = parameters_[w.name];
    std::map<Shape, std::vector<double>> written; // replicas must agree
    for (int64_t r = 0; r < numRanks_; ++r) {
      Shape offset, size;
      blockOf(shapeOf(whole.type), w.layout, r, offset, size);
      std::vector<double> local = toDoubles(w.shards[r]);
      auto [it, fresh] = written.try_emplace(offset, local);
      if (!fresh && it->second != local)
        return error("the replicas of parameter '" + w.name + "' differ after the step (rank " +
                     Twine(r) + ")");
      copyBlock(whole.data, shapeOf(whole.type), local, offset, size, /*extract=*/false);
    }
  }
  return results;
}

} // namespace loom::test
