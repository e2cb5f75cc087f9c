#include "passes/lowering/ExecutableEmitter.h"

#include "dialects/dist/DistDialect.h"
#include "dialects/loom/LoomDialect.h"
#include "dialects/rt/RtDialect.h"
#include "dialects/nn/KernelAttributes.h"
#include "runtime/abi/Mesh.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSwitch.h"

#include <cstring>
#include <map>

using namespace mlir;
using namespace loom;

namespace {

/// A parameter's stored value in the executable's form.
FailureOr<std::vector<uint8_t>> rawBytes(Operation *op, ElementsAttr value, DType dtype) {
  auto dense = dyn_cast<DenseElementsAttr>(value);
  if (!dense)
    return op->emitOpError("only dense values can be stored in an executable"), failure();
  return runtimeBytes(dense, dtype);
}

NamedAttr toNamedAttr(NamedAttribute attr) {
  Attribute v = attr.getValue();
  NamedAttr out{attr.getName().str(), int64_t(0)};
  if (auto i = dyn_cast<IntegerAttr>(v))
    out.value = i.getInt();
  else if (auto f = dyn_cast<FloatAttr>(v))
    out.value = f.getValueAsDouble();
  else if (auto s = dyn_cast<StringAttr>(v))
    out.value = s.str();
  else if (auto a = dyn_cast<DenseI64ArrayAttr>(v))
    out.value = std::vector<int64_t>(a.asArrayRef().begin(), a.asArrayRef().end());
  else if (auto a = dyn_cast<DenseF64ArrayAttr>(v))
    out.value = std::vector<double>(a.asArrayRef().begin(), a.asArrayRef().end());
  return out;
}

std::string locationString(Location loc) {
  if (auto fused = dyn_cast<FusedLoc>(loc); fused && !fused.getLocations().empty())
    loc = fused.getLocations().front();
  if (auto file = dyn_cast<FileLineColLoc>(loc))
    return (file.getFilename().str() + ":" + std::to_string(file.getLine()) + ":" +
            std::to_string(file.getColumn()));
  std::string s;
  llvm::raw_string_ostream os(s);
  loc.print(os);
  return s;
}

} // namespace

FailureOr<Executable> loom::emitExecutable(ModuleOp module,
                                           const ExecutableMetadata &meta) {
  Executable exe;
  exe.modelName = meta.modelName;
  exe.mode = meta.mode;
  exe.compileFlags = meta.compileFlags;
  llvm::StringMap<uint32_t> parameterIndex;
  if (rt::hasModuleMesh(module)) {
    std::optional<Mesh> mesh = rt::moduleMesh(module);
    if (!mesh)
      return module.emitError("malformed rt.mesh_axes / rt.mesh_shape"), failure();
    exe.mesh = std::move(*mesh);
  }
  if (StringAttr csv = rt::getScheduleCsv(module))
    exe.scheduleCsv = csv.str();
  // The training step's vocabulary (--loom-build-training-step).
  if (auto vocab = module->getAttrOfType<IntegerAttr>(loom::kVocabSizeAttr))
    exe.vocabSize = vocab.getInt();
  auto shardingOf = [](Attribute attr) -> Sharding {
    return rt::parseSharding(attr).value_or(Sharding{});
  };

  // Per program (by its rank), the instructions whose attributes differ by
  // rank: resolved once every rank has its copy of a program.
  std::map<uint32_t, std::vector<std::pair<size_t, dist::RankOffset>>> rankOffsets;
  for (auto program : module.getOps<rt::ProgramOp>()) {
    RankProgram rank;
    rank.rank = program.getRank();
    if (!program.getArenaSizes() || !program.getNumEvents())
      return program.emitOpError("is not ready to emit: run --loom-plan-memory "
                                 "and --loom-assign-streams first"),
             failure();
    for (auto [a, size] : llvm::enumerate(*program.getArenaSizes()))
      if (a < size_t(kNumArenas))
        rank.arenaSize[a] = size;
    rank.numEvents = *program.getNumEvents();
    for (Attribute s : program.getStreams())
      rank.streams.push_back(cast<StringAttr>(s).str());
    auto streamId = [&](StringRef name) -> uint32_t {
      return llvm::find(rank.streams, name) - rank.streams.begin();
    };

    llvm::DenseMap<Value, uint32_t> bufferIndex;
    auto addBuffer = [&](Operation *op, Value v, StringRef name) -> LogicalResult {
      auto type = cast<MemRefType>(v.getType());
      std::optional<DType> dtype = runtimeDType(type.getElementType());
      if (!dtype)
        return op->emitOpError("buffer element type ")
               << type.getElementType() << " has no runtime equivalent";
      Value root = rt::rootBuffer(v);
      std::optional<int64_t> offset = rt::plannedOffset(root);
      if (!offset)
        return op->emitOpError("buffer has no planned offset");
      BufferDesc desc;
      desc.name = name.str();
      desc.arena = rt::isPersistent(root) ? ArenaKind::Persistent
                   : rt::isHost(root)     ? ArenaKind::Host
                                          : ArenaKind::Scratch;
      desc.offset = *offset;
      desc.dtype = *dtype;
      desc.shape.assign(type.getShape().begin(), type.getShape().end());
      if (root != v)
        desc.aliasOf = bufferIndex.lookup(root);
      if (isa<rt::InputOp>(op))
        desc.category = MemoryCategory::Input;
      if (auto category = op->getAttrOfType<StringAttr>(kMemoryAttr))
        desc.category = llvm::StringSwitch<MemoryCategory>(category.getValue())
                            .Case("activation", MemoryCategory::Activation)
                            .Case("activation_grad", MemoryCategory::ActivationGrad)
                            .Case("weight_grad", MemoryCategory::WeightGrad)
                            .Case("workspace", MemoryCategory::Workspace)
                            .Case("communication", MemoryCategory::Communication)
                            .Default(MemoryCategory::Step);
      if (std::optional<int64_t> mb = loom::getMicrobatch(op))
        desc.microbatch = int32_t(*mb);
      bufferIndex[v] = rank.buffers.size();
      rank.buffers.push_back(std::move(desc));
      return success();
    };
    auto indices = [&](ValueRange values) {
      std::vector<uint32_t> out;
      for (Value v : values)
        out.push_back(bufferIndex.lookup(v));
      return out;
    };

    for (Operation &op : program.getBlock()) {
      LogicalResult ok = success();
      if (auto input = dyn_cast<rt::InputOp>(op)) {
        ok = addBuffer(&op, input.getResult(), input.getName());
        IOBinding binding{input.getName().str(), bufferIndex[input.getResult()], {}, {}};
        if (std::optional<ArrayRef<int64_t>> global = input.getGlobalShape()) {
          binding.globalShape.assign(global->begin(), global->end());
          binding.sharding = shardingOf(input.getShardingAttr());
        }
        if (auto groups = input->getAttrOfType<IntegerAttr>(loom::kRowGroupsAttrName))
          binding.rowGroups = groups.getInt();
        rank.inputs.push_back(std::move(binding));
      } else if (auto alloc = dyn_cast<rt::AllocOp>(op)) {
        ok = addBuffer(&op, alloc.getResult(), alloc.getName().value_or(""));
      } else if (auto alias = dyn_cast<rt::AliasOp>(op)) {
        ok = addBuffer(&op, alias.getResult(), "");
      } else if (auto param = dyn_cast<rt::ParamOp>(op)) {
        if (failed(addBuffer(&op, param.getResult(), param.getName())))
          return failure();
        auto [it, inserted] =
            parameterIndex.try_emplace(param.getName(), exe.parameters.size());
        if (inserted) {
          ParameterDesc desc;
          desc.name = param.getName().str();
          const BufferDesc &buffer = rank.buffers.back();
          desc.dtype = buffer.dtype;
          desc.shape = buffer.shape;
          if (std::optional<ArrayRef<int64_t>> global = param.getGlobalShape()) {
            desc.shape.assign(global->begin(), global->end());
            desc.sharding = shardingOf(param.getShardingAttr());
          }
          desc.trainable = !param.getFrozen();
          desc.init = llvm::StringSwitch<InitKind>(param.getInit())
                          .Case("ones", InitKind::Ones)
                          .Case("normal", InitKind::Normal)
                          .Case("uniform", InitKind::Uniform)
                          .Default(InitKind::Zeros);
          desc.initScale = param.getInitScale().convertToDouble();
          if (std::optional<ElementsAttr> value = param.getValue()) {
            FailureOr<std::vector<uint8_t>> bytes =
                rawBytes(&op, *value, desc.dtype);
            if (failed(bytes))
              return failure();
            desc.init = InitKind::Data;
            desc.data = std::move(*bytes);
          }
          exe.parameters.push_back(std::move(desc));
        }
        rank.params.push_back({it->second, bufferIndex[param.getResult()]});
      } else if (auto output = dyn_cast<rt::OutputOp>(op)) {
        rank.outputs.push_back({output.getName().str(), bufferIndex.lookup(output.getBuffer())});
      } else if (auto kernel = dyn_cast<rt::KernelOp>(op)) {
        Instruction instr;
        instr.kind = InstrKind::Kernel;
        instr.kernel = kernel.getKernel().str();
        instr.stream = streamId(kernel.getStream().value_or("compute"));
        instr.inputs = indices(kernel.getInputs());
        instr.outputs = indices(kernel.getOutputs());
        for (NamedAttribute attr : kernel.getAttrs())
          instr.attrs.push_back(toNamedAttr(attr));
        instr.location = locationString(op.getLoc());
        instr.refresh = kernel.getRefresh();
        FailureOr<SmallVector<dist::RankOffset>> offsets = dist::getRankOffsets(&op);
        if (failed(offsets))
          return failure();
        for (dist::RankOffset &o : *offsets)
          rankOffsets[rank.rank].push_back({rank.instructions.size(), std::move(o)});
        rank.instructions.push_back(std::move(instr));
      } else if (auto collective = dyn_cast<rt::CollectiveOp>(op)) {
        Instruction instr;
        instr.kind = InstrKind::Collective;
        instr.collective = rt::collectiveDesc(collective);
        if (!collective.getStream())
          return collective.emitOpError("has no stream: run --loom-assign-streams first"),
                 failure();
        instr.stream = streamId(*collective.getStream());
        instr.inputs = indices(collective.getInputs());
        instr.outputs = indices(collective.getOutputs());
        instr.location = locationString(op.getLoc());
        rank.instructions.push_back(std::move(instr));
      } else if (auto copy = dyn_cast<rt::CopyOp>(op)) {
        Instruction instr;
        instr.kind = InstrKind::Copy;
        instr.stream = streamId(copy.getStream().value_or("compute"));
        instr.inputs = indices(copy.getSource());
        instr.outputs = indices(copy.getTarget());
        instr.location = locationString(op.getLoc());
        rank.instructions.push_back(std::move(instr));
      } else if (auto record = dyn_cast<rt::RecordEventOp>(op)) {
        Instruction instr;
        instr.kind = InstrKind::RecordEvent;
        instr.stream = streamId(record.getStream());
        instr.event = record.getEvent();
        rank.instructions.push_back(std::move(instr));
      } else if (auto wait = dyn_cast<rt::WaitEventOp>(op)) {
        Instruction instr;
        instr.kind = InstrKind::WaitEvent;
        instr.stream = streamId(wait.getStream());
        instr.event = wait.getEvent();
        rank.instructions.push_back(std::move(instr));
      }
      if (failed(ok))
        return failure();
    }
    exe.ranks.push_back(std::move(rank));
  }
  if (exe.ranks.empty())
    return module.emitError("no rt.program to emit"), failure();
  int64_t numRanks = exe.mesh.numRanks();
  std::vector<uint32_t> sourceOf; // the program each rank's copy came from
  for (const RankProgram &p : exe.ranks)
    sourceOf.push_back(p.rank);
  if (exe.ranks.size() == 1 && numRanks > 1) {
    // SPMD: every rank runs the one program.
    if (exe.ranks[0].rank != 0)
      return module.emitError("the one program of an SPMD module must be rank 0, got rank ")
                 << exe.ranks[0].rank,
             failure();
    for (int64_t r = 1; r < numRanks; ++r) {
      exe.ranks.push_back(exe.ranks[0]);
      exe.ranks.back().rank = r;
      sourceOf.push_back(sourceOf[0]);
    }
  } else if (auto pp = llvm::find(exe.mesh.axes, "pp");
             pp != exe.mesh.axes.end() && exe.mesh.axes.size() > 1 &&
             int64_t(exe.ranks.size()) == exe.mesh.shape[pp - exe.mesh.axes.begin()]) {
    // A pipeline combined with other axes (--pp with --dp/--tp): program p
    // is pipeline rank p's SPMD program, run by every rank whose "pp"
    // coordinate is p.
    size_t axis = pp - exe.mesh.axes.begin();
    std::vector<RankProgram> perStage = std::move(exe.ranks);
    exe.ranks.clear();
    sourceOf.clear();
    for (int64_t r = 0; r < numRanks; ++r) {
      int64_t stage = exe.mesh.coordinates(r)[axis];
      auto it = llvm::find_if(perStage, [&](const RankProgram &p) { return p.rank == stage; });
      if (it == perStage.end())
        return module.emitError("no program for pipeline rank ") << stage, failure();
      exe.ranks.push_back(*it);
      exe.ranks.back().rank = r;
      sourceOf.push_back(uint32_t(stage));
    }
  } else if (!exe.mesh.axes.empty() && int64_t(exe.ranks.size()) != numRanks) {
    return module.emitError("the mesh has ")
               << numRanks << " ranks but the module has " << exe.ranks.size()
               << " rt.program ops (one for SPMD, or one per rank)",
           failure();
  }
  // Each rank's values of the attributes that differ by rank.
  for (auto [rank, source] : llvm::zip(exe.ranks, sourceOf)) {
    for (const auto &[index, offset] : rankOffsets[source]) {
      llvm::Expected<Group> group = groupOf(exe.mesh, rank.rank, offset.axes);
      if (!group)
        return module.emitError("rank offset of '")
                   << offset.attr << "': " << llvm::toString(group.takeError()),
               failure();
      int64_t delta = group->index * offset.stride;
      bool applied = false;
      for (NamedAttr &attr : rank.instructions[index].attrs) {
        if (attr.name != offset.attr)
          continue;
        if (auto *i = std::get_if<int64_t>(&attr.value); i && offset.element < 0) {
          *i += delta;
          applied = true;
        } else if (auto *list = std::get_if<std::vector<int64_t>>(&attr.value);
                   list && offset.element >= 0 && offset.element < int64_t(list->size())) {
          (*list)[offset.element] += delta;
          applied = true;
        }
      }
      if (!applied)
        return module.emitError("a rank offset names attribute '")
                   << offset.attr << "' (element " << offset.element << ") that instruction "
                   << index << " (" << rank.instructions[index].kernel << ") does not have",
               failure();
    }
  }
  return exe;
}
