// --loom-lower-to-rt: bufferizes the entry function's nn ops into an
// rt.program (see Passes.td for before/after IR).

#include "passes/lowering/Passes.h"
#include "dialects/nn/KernelAttributes.h"

#include "dialects/dist/DistDialect.h"
#include "dialects/loom/LoomDialect.h"
#include "dialects/pipe/PipeDialect.h"
#include "dialects/nn/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cstring>
#include <map>

namespace loom {
#define GEN_PASS_DEF_LOWERTORT
#include "passes/lowering/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

MemRefType bufferTypeOf(Type t) {
  auto tensor = cast<RankedTensorType>(t);
  return MemRefType::get(tensor.getShape(), tensor.getElementType());
}

struct LowerToRtPass : public loom::impl::LowerToRtBase<LowerToRtPass> {
  using LowerToRtBase::LowerToRtBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // A pipelined step (--loom-pipeline-split) has one function per pipeline
    // rank, `pipe.rank = r`; each becomes that rank's program.
    SmallVector<std::pair<func::FuncOp, int64_t>> functions;
    for (auto f : module.getOps<func::FuncOp>())
      if (std::optional<int64_t> rank = pipe::getRank(f))
        functions.push_back({f, *rank});
    if (functions.empty()) {
      auto func = module.lookupSymbol<func::FuncOp>(entry);
      if (!func) {
        module.emitError("no function named '") << entry << "' to lower";
        return signalPassFailure();
      }
      functions.push_back({func, 0});
    }
    // An SPMD program (after --loom-spmd-partition): the mesh for the
    // runtime, and each split input's and parameter's layout.
    dist::MeshAttr mesh = module->getAttrOfType<dist::MeshAttr>(dist::kMeshAttrName);
    SmallVector<Operation *> programs;
    for (auto [func, rank] : functions) {
      rt::ProgramOp program = lowerFunction(module, func, rank);
      if (!program)
        return signalPassFailure();
      programs.push_back(program);
    }
    if (mesh) {
      Builder b(module.getContext());
      SmallVector<StringRef> names;
      for (StringAttr n : mesh.getNames())
        names.push_back(n.getValue());
      rt::setModuleMesh(module, names, mesh.getSizes());
      module->removeAttr(dist::kMeshAttrName);
      module->removeAttr(dist::kZero1AttrName);
    }
    // A pipelined step's schedule (--loom-pipeline-split) goes into the
    // executable as it is.
    if (StringAttr csv = pipe::takeScheduleCsv(module))
      rt::setScheduleCsv(module, csv);
    // Only the programs remain: the rt module is self-contained.
    for (Operation &op : llvm::make_early_inc_range(module.getBody()->getOperations()))
      if (!llvm::is_contained(programs, &op))
        op.erase();
  }

  int constantCount_ = 0;

  rt::ProgramOp lowerFunction(ModuleOp module, func::FuncOp func, int64_t rank) {
    if (!func.getBody().hasOneBlock()) {
      func.emitError("the entry function must have a single block");
      return nullptr;
    }

    // Every value becomes a buffer of static size: check the signature first
    // (nn ops verify their own types).
    for (auto [kind, types] : {std::pair{"argument", func.getArgumentTypes()},
                               std::pair{"result", func.getResultTypes()}})
      for (auto [i, type] : llvm::enumerate(types)) {
        auto tensor = dyn_cast<RankedTensorType>(type);
        if (!tensor || !tensor.hasStaticShape()) {
          func.emitError("entry function ")
              << kind << " #" << i << " has type " << type
              << "; only statically shaped tensors can become buffers";
          return nullptr;
        }
      }
    // loom-run binds inputs and outputs by name: two of one name would
    // leave one unbound (reading zeros) or one unwritten.
    for (bool results : {false, true}) {
      std::map<std::string, unsigned> seen;
      unsigned count = results ? func.getNumResults() : func.getNumArguments();
      for (unsigned i = 0; i < count; ++i) {
        StringAttr n = results ? loom::getResultName(func, i) : loom::getArgName(func, i);
        std::string name = n ? n.str() : (results ? "output" : "input") + std::to_string(i);
        auto [it, fresh] = seen.emplace(name, i);
        if (!fresh) {
          func.emitError() << (results ? "results " : "arguments ") << it->second << " and " << i
                           << " are both named '" << name << "' (loom.name): "
                           << (results ? "outputs" : "inputs")
                           << " are bound by name, so each needs its own";
          return nullptr;
        }
      }
    }

    OpBuilder b(module.getContext());
    b.setInsertionPoint(func);
    // Streams: compute, and any an op was given upstream (loom.stream).
    SmallVector<StringRef> streams{"compute"};
    func.walk([&](Operation *op) {
      if (StringAttr s = loom::getStream(op))
        if (!llvm::is_contained(streams, s.getValue()))
          streams.push_back(s.getValue());
    });
    StringRef name = pipe::getRank(func) ? func.getName() : StringRef(entry);
    auto program = b.create<rt::ProgramOp>(func.getLoc(), b.getStringAttr(name),
                                           b.getI64IntegerAttr(rank), b.getStrArrayAttr(streams),
                                           DenseI64ArrayAttr(), IntegerAttr(), IntegerAttr());
    program.getBody().emplaceBlock();
    b.setInsertionPointToStart(&program.getBlock());

    IRMapping buffers;
    for (auto [i, arg] : llvm::enumerate(func.getArguments())) {
      std::string name = "input" + std::to_string(i);
      if (StringAttr n = loom::getArgName(func, i))
        name = n.str();
      auto input = b.create<rt::InputOp>(arg.getLoc(), bufferTypeOf(arg.getType()),
                                         b.getStringAttr(name), IntegerAttr());
      setShardingAttrs(input, dist::getArgSharding(func, i), dist::getArgGlobalType(func, i));
      if (auto groups = func.getArgAttrOfType<IntegerAttr>(i, loom::kRowGroupsAttrName);
          groups && input->hasAttr("global_shape"))
        input->setAttr(loom::kRowGroupsAttrName, groups);
      buffers.map(arg, input.getResult());
    }

    // Constants become frozen parameters named by one count over all
    // programs: the executable identifies parameters by name.
    int &constantCount = constantCount_;
    func::ReturnOp ret;
    SmallVector<nn::AssignOp> assigns;
    for (Operation &op : func.getBody().front()) {
      if (auto r = dyn_cast<func::ReturnOp>(op)) {
        ret = r;
        continue;
      }
      if (auto assign = dyn_cast<nn::AssignOp>(op)) {
        assigns.push_back(assign);
        continue;
      }
      if (failed(lowerOp(b, &op, buffers, constantCount)))
        return nullptr;
    }
    // Assignments take effect when the step ends: after every reader of the
    // old value. Those written in place by their producer need no copy.
    for (nn::AssignOp assign : assigns) {
      Value target = buffers.lookup(assign.getParameter());
      Value value = buffers.lookup(assign.getValue());
      if (value != target)
        b.create<rt::CopyOp>(assign.getLoc(), value, target, StringAttr());
    }
    if (ret)
      lowerReturn(b, func, ret, buffers);
    return program;
  }

  /// `sharding` (per global dim, the mesh axes splitting it) and
  /// `global_shape` on a split input or parameter; none on a replicated one.
  static void setShardingAttrs(Operation *op, dist::ShardingAttr sharding, TypeAttr global) {
    if (!sharding || !global || sharding.isReplicated())
      return;
    Builder b(op->getContext());
    SmallVector<Attribute> dims;
    for (unsigned d = 0; d < sharding.getDims().size(); ++d)
      dims.push_back(b.getStrArrayAttr(sharding.dimAxes(d)));
    op->setAttr("sharding", b.getArrayAttr(dims));
    op->setAttr("global_shape",
                b.getDenseI64ArrayAttr(cast<RankedTensorType>(global.getValue()).getShape()));
  }

  /// Tags a buffer with what it holds (loom.memory) and the microbatch
  /// whose value it is, from the op that writes it.
  static void tagMemory(Value buffer, Operation *writer, llvm::StringRef category = "") {
    auto alloc = buffer.getDefiningOp<rt::AllocOp>();
    if (!alloc)
      return;
    if (category.empty()) {
      std::optional<BackwardKind> backward = loom::getBackwardKind(writer);
      if (backward)
        category = *backward == BackwardKind::Weight ? "weight_grad" : "activation_grad";
      else if (loom::getMicrobatch(writer))
        category = "activation";
      else
        category = "step";
    }
    alloc->setAttr(kMemoryAttr, StringAttr::get(alloc.getContext(), category));
    if (std::optional<int64_t> mb = loom::getMicrobatch(writer))
      loom::setMicrobatch(alloc, *mb);
  }

  /// A dist collective becomes rt.collective writing a new buffer per
  /// result (an exchange has any number, one per receive).
  LogicalResult lowerCollective(OpBuilder &b, Operation *op, IRMapping &buffers) {
    Location loc = op->getLoc();
    SmallVector<Value> inputs, outputs;
    for (Value operand : op->getOperands())
      inputs.push_back(buffers.lookup(operand));
    for (Value result : op->getResults()) {
      Value out = b.create<rt::AllocOp>(loc, bufferTypeOf(result.getType()), IntegerAttr(),
                                        StringAttr());
      tagMemory(out, op, "communication");
      outputs.push_back(out);
      buffers.map(result, out);
    }
    auto i64 = [&](std::optional<int64_t> v) { return v ? b.getI64IntegerAttr(*v) : IntegerAttr(); };
    // The runtime reduces by sum, max or avg (a mean); it has no min.
    rt::ReduceKindAttr reduce;
    auto setReduce = [&](dist::ReduceKind r) -> LogicalResult {
      std::optional<rt::ReduceKind> kind;
      switch (r) {
      case dist::ReduceKind::Sum: kind = rt::ReduceKind::Sum; break;
      case dist::ReduceKind::Mean: kind = rt::ReduceKind::Avg; break;
      case dist::ReduceKind::Max: kind = rt::ReduceKind::Max; break;
      case dist::ReduceKind::Min: break;
      }
      if (!kind)
        return op->emitOpError("reduces by ")
               << dist::stringifyReduceKind(r) << ", which the runtime has no collective for";
      reduce = rt::ReduceKindAttr::get(b.getContext(), *kind);
      return success();
    };
    ArrayAttr axes;
    std::optional<int64_t> dim, splitDim, concatDim, root, peer;
    DenseI64ArrayAttr sendPeers, recvPeers;
    rt::CollectiveKind kind = rt::CollectiveKind::AllReduce;
    if (auto c = dyn_cast<dist::AllReduceOp>(op)) {
      kind = rt::CollectiveKind::AllReduce;
      axes = c.getAxes();
      if (failed(setReduce(c.getReduce())))
        return failure();
    } else if (auto c = dyn_cast<dist::AllGatherOp>(op)) {
      kind = rt::CollectiveKind::AllGather;
      axes = c.getAxes();
      dim = c.getDim();
    } else if (auto c = dyn_cast<dist::ReduceScatterOp>(op)) {
      kind = rt::CollectiveKind::ReduceScatter;
      axes = c.getAxes();
      dim = c.getDim();
      if (failed(setReduce(c.getReduce())))
        return failure();
    } else if (auto c = dyn_cast<dist::AllToAllOp>(op)) {
      kind = rt::CollectiveKind::AllToAll;
      axes = c.getAxes();
      splitDim = c.getSplitDim();
      concatDim = c.getConcatDim();
    } else if (auto c = dyn_cast<dist::BroadcastOp>(op)) {
      kind = rt::CollectiveKind::Broadcast;
      axes = c.getAxes();
      root = c.getRoot();
    } else if (auto c = dyn_cast<dist::SendOp>(op)) {
      kind = rt::CollectiveKind::Send;
      peer = c.getPeer();
    } else if (auto c = dyn_cast<dist::RecvOp>(op)) {
      kind = rt::CollectiveKind::Recv;
      peer = c.getPeer();
    } else if (auto c = dyn_cast<dist::GatherRowsOp>(op)) {
      kind = rt::CollectiveKind::GatherRows;
      axes = c.getAxes();
    } else if (auto c = dyn_cast<dist::ScatterRowsOp>(op)) {
      kind = rt::CollectiveKind::ScatterRows;
      axes = c.getAxes();
    } else if (auto c = dyn_cast<dist::ExchangeOp>(op)) {
      kind = rt::CollectiveKind::Exchange;
      axes = c.getAxes();
      sendPeers = c.getSendPeersAttr();
      recvPeers = c.getRecvPeersAttr();
    } else {
      return op->emitOpError("has no rt collective");
    }
    b.create<rt::CollectiveOp>(loc, rt::CollectiveKindAttr::get(b.getContext(), kind), inputs,
                               outputs, axes, reduce,
                               i64(dim), i64(splitDim), i64(concatDim), i64(root), i64(peer),
                               sendPeers, recvPeers, StringAttr());
    return success();
  }

  LogicalResult lowerOp(OpBuilder &b, Operation *op, IRMapping &buffers,
                        int &constantCount) {
    Location loc = op->getLoc();
    if (isa_and_nonnull<dist::DistDialect>(op->getDialect()))
      return lowerCollective(b, op, buffers);
    if (auto param = dyn_cast<nn::ParameterOp>(op)) {
      auto p = b.create<rt::ParamOp>(
          loc, bufferTypeOf(param.getType()), param.getNameAttr(),
          param.getFrozenAttr(),
          b.getStringAttr(nn::stringifyInitKind(param.getInit())),
          param.getInitScaleAttr(), param.getValueAttr(), IntegerAttr());
      if (auto all = param->getAttrOfType<ArrayAttr>(dist::kShardingAttrName); all && all.size() == 1)
        setShardingAttrs(p, dyn_cast<dist::ShardingAttr>(all[0]),
                         dist::getGlobalType(param));
      buffers.map(param.getResult(), p.getResult());
      return success();
    }
    if (auto constant = dyn_cast<nn::ConstantOp>(op)) {
      // Constants are frozen parameters whose value travels in the executable.
      auto p = b.create<rt::ParamOp>(
          loc, bufferTypeOf(constant.getType()),
          b.getStringAttr("constant." + std::to_string(constantCount++)),
          b.getUnitAttr(), b.getStringAttr("zeros"), b.getF64FloatAttr(0.0),
          constant.getValue(), IntegerAttr());
      buffers.map(constant.getResult(), p.getResult());
      return success();
    }
    if (auto fused = dyn_cast<nn::FusedOp>(op))
      return lowerFused(b, fused, buffers);
    if (auto reshape = dyn_cast<nn::ReshapeOp>(op)) {
      buffers.map(reshape.getResult(),
                  b.create<rt::AliasOp>(loc, bufferTypeOf(reshape.getType()),
                                        buffers.lookup(reshape.getInput()))
                      .getResult());
      return success();
    }
    // An offloaded activation: a copy to a host buffer, and back to the
    // device for its backward, both on the host-copy stream.
    if (isa<nn::OffloadOp, nn::ReloadOp>(op)) {
      Value result = op->getResult(0);
      auto out = b.create<rt::AllocOp>(loc, bufferTypeOf(result.getType()), IntegerAttr(),
                                       StringAttr());
      if (isa<nn::OffloadOp>(op))
        out.setHost(true);
      tagMemory(out, op, isa<nn::OffloadOp>(op) ? "activation" : "");
      auto copy = b.create<rt::CopyOp>(loc, buffers.lookup(op->getOperand(0)), out.getResult(),
                                       StringAttr());
      copy->setAttr(kHostCopyAttr, b.getUnitAttr());
      buffers.map(result, out.getResult());
      return success();
    }
    // Unregistered ops have no dialect.
    Dialect *dialect = op->getDialect();
    if (!dialect || dialect->getNamespace() != "nn")
      return op->emitOpError("cannot be lowered to rt: only nn ops are");

    std::string kernel = op->getName().getStringRef().str();
    if (!rt::lookupKernel(kernel))
      return op->emitOpError("has no runtime kernel");
    SmallVector<Value> inputs, outputs;
    for (Value operand : op->getOperands())
      inputs.push_back(buffers.lookup(operand));
    for (Value result : op->getResults()) {
      Value out = inPlaceTarget(op, result, buffers);
      if (!out) {
        out = b.create<rt::AllocOp>(loc, bufferTypeOf(result.getType()),
                                    IntegerAttr(), StringAttr());
        tagMemory(out, op);
      }
      outputs.push_back(out);
      buffers.map(result, out);
    }
    // Working memory for the call (a chunk's logits): one more output, which
    // the memory planner places like any buffer.
    if (auto scratch = dyn_cast<nn::KernelScratchOpInterface>(op)) {
      outputs.push_back(b.create<rt::AllocOp>(loc, bufferTypeOf(scratch.getKernelScratchType()),
                                              IntegerAttr(), StringAttr()));
      tagMemory(outputs.back(), op, "workspace");
    }
    // A stream chosen upstream (the backward half of a pipeline's
    // overlapped F&B pair) is kept; --loom-assign-streams adds the events.
    auto call = b.create<rt::KernelOp>(loc, b.getStringAttr(kernel), inputs, outputs,
                                       kernelAttrsFor(op),
                                       loom::getStream(op));
    // Attributes that differ by rank (a block's start) go along for the
    // emitter, which writes each rank's values.
    if (Attribute offsets = op->getAttr(dist::kRankOffsetsAttrName))
      call->setAttr(dist::kRankOffsetsAttrName, offsets);
    return success();
  }

  /// A fusion group becomes one call of the nn.fused kernel, its body as
  /// text; its members' values that it does not yield get no buffer.
  LogicalResult lowerFused(OpBuilder &b, nn::FusedOp fused, IRMapping &buffers) {
    llvm::Expected<FusedBody> body = fused.kernelBody();
    if (!body)
      return fused.emitOpError("cannot become an nn.fused call: ")
             << llvm::toString(body.takeError());
    Location loc = fused.getLoc();
    SmallVector<Value> inputs, outputs;
    for (Value input : fused.getInputs())
      inputs.push_back(buffers.lookup(input));
    for (Value result : fused.getResults()) {
      Value out = b.create<rt::AllocOp>(loc, bufferTypeOf(result.getType()), IntegerAttr(),
                                        StringAttr());
      tagMemory(out, fused);
      outputs.push_back(out);
      buffers.map(result, out);
    }
    // A stream chosen upstream is on the members (--loom-fuse groups only
    // ops that agree on it).
    StringAttr stream = loom::getStream(fused);
    if (!stream && !fused.getBodyBlock().without_terminator().empty())
      stream = loom::getStream(&fused.getBodyBlock().front());
    Builder attrs(fused.getContext());
    b.create<rt::KernelOp>(loc, b.getStringAttr(kernelName(KernelId::Fused)), inputs, outputs,
                           attrs.getDictionaryAttr(attrs.getNamedAttr(
                               "body", attrs.getStringAttr(printFusedBody(*body)))),
                           stream);
    return success();
  }

  /// The parameter buffer an elementwise update may write directly: when
  /// `result` only feeds `nn.assign` of a parameter that nothing reads after
  /// `op` (the optimizer update is the parameter's last reader).
  static Value inPlaceTarget(Operation *op, Value result, IRMapping &buffers) {
    if (!isa<nn::AdamWOp>(op) || !result.hasOneUse())
      return {};
    auto assign = dyn_cast<nn::AssignOp>(*result.getUsers().begin());
    if (!assign || assign.getValue() != result)
      return {};
    Value param = assign.getParameter();
    for (Operation *user : param.getUsers())
      if (user != op && !isa<nn::AssignOp>(user) && !user->isBeforeInBlock(op))
        return {};
    return buffers.lookup(param);
  }

  void lowerReturn(OpBuilder &b, func::FuncOp func, func::ReturnOp ret,
                   IRMapping &buffers) {
    llvm::SmallPtrSet<Value, 4> returned;
    for (auto [i, value] : llvm::enumerate(ret.getOperands())) {
      std::string name = "output" + std::to_string(i);
      if (StringAttr n = loom::getResultName(func, i))
        name = n.str();
      Value buffer = buffers.lookup(value);
      // An output must be a scratch buffer of its own: copy inputs,
      // parameters and values returned twice.
      Value root = buffer;
      while (auto alias = root.getDefiningOp<rt::AliasOp>())
        root = alias.getSource();
      if (!root.getDefiningOp<rt::AllocOp>() || !returned.insert(root).second) {
        Value copy = b.create<rt::AllocOp>(ret.getLoc(),
                                           cast<MemRefType>(buffer.getType()),
                                           IntegerAttr(), StringAttr());
        b.create<rt::CopyOp>(ret.getLoc(), buffer, copy, StringAttr());
        buffer = copy;
      }
      b.create<rt::OutputOp>(ret.getLoc(), b.getStringAttr(name), buffer);
    }
  }
};

} // namespace
