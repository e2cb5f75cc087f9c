// Loom's semantic checks on an executable: everything the runtime relies on
// before it allocates arenas or launches a kernel. Each error is one line that
// names the rank, instruction, buffer or parameter at fault.

#include "runtime/executable/Executable.h"
#include "runtime/executable/ExecutableListing.h"
#include "runtime/abi/FusedBody.h"
#include "runtime/abi/KernelList.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string_view>

namespace loom {

namespace {

bool isValidDType(DType t) { return static_cast<int>(t) < kNumDTypes; }
bool isValidArena(ArenaKind k) { return static_cast<int>(k) < kNumArenas; }
bool isValidInstrKind(InstrKind k) {
  return k <= InstrKind::Collective;
}
bool isValidInitKind(InitKind k) { return k <= InitKind::Data; }

llvm::Error failure(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

std::string plural(uint64_t count, const char *noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}

// "what N (name)" or "what N" when unnamed.
std::string named(const char *what, size_t index, const std::string &name) {
  std::string text = std::string(what) + " " + std::to_string(index);
  if (!name.empty())
    text += " (" + name + ")";
  return text;
}

/// Checks a dtype and shape and computes the byte size; on failure returns a
/// message (without context) in `problem`.
bool checkTensor(DType dtype, const std::vector<int64_t> &shape,
                 uint64_t &bytes, std::string &problem) {
  if (!isValidDType(dtype)) {
    problem = "invalid dtype " + std::to_string(static_cast<int>(dtype));
    return false;
  }
  int64_t count = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      problem = "dimension " + std::to_string(d) + " is negative (" +
                std::to_string(shape[d]) + ")";
      return false;
    }
    if (__builtin_mul_overflow(count, shape[d], &count)) {
      problem = "element count of " + formatTensorType(dtype, shape) +
                " overflows int64";
      return false;
    }
  }
  if (__builtin_mul_overflow(static_cast<uint64_t>(count),
                             static_cast<uint64_t>(dtypeSize(dtype)),
                             &bytes)) {
    problem = "byte size of " + formatTensorType(dtype, shape) +
              " overflows uint64";
    return false;
  }
  return true;
}

class Verifier {
public:
  explicit Verifier(const Executable &exe) : exe(exe) {}

  llvm::Error run() {
    if (exe.formatVersion < kOldestReadableFormatVersion ||
        exe.formatVersion > kExecutableFormatVersion)
      return failure("unsupported format version " +
                     std::to_string(exe.formatVersion) +
                     " (this build reads versions " +
                     std::to_string(kOldestReadableFormatVersion) + " to " +
                     std::to_string(kExecutableFormatVersion) + ")");
    if (llvm::Error err = checkMesh())
      return err;
    if (llvm::Error err = checkSchedule())
      return err;
    if (exe.vocabSize < 0)
      return failure("negative vocabulary size " + std::to_string(exe.vocabSize));
    parameterBytes.resize(exe.parameters.size());
    for (size_t i = 0; i < exe.parameters.size(); ++i)
      if (llvm::Error err = checkParameter(i))
        return err;
    std::set<uint32_t> rankIds;
    for (const RankProgram &program : exe.ranks) {
      if (!rankIds.insert(program.rank).second)
        return failure("rank " + std::to_string(program.rank) +
                       " appears more than once");
      if (hasMesh && program.rank >= numRanks)
        return failure("rank " + std::to_string(program.rank) +
                       " is outside the mesh of " + plural(numRanks, "rank"));
      if (llvm::Error err = checkRank(program))
        return err;
    }
    if (hasMesh && exe.ranks.size() != numRanks)
      return failure("the mesh has " + plural(numRanks, "rank") +
                     " but the executable holds " +
                     plural(exe.ranks.size(), "rank program"));
    return llvm::Error::success();
  }

private:
  llvm::Error checkMesh() {
    const Mesh &mesh = exe.mesh;
    hasMesh = !mesh.axes.empty() || !mesh.shape.empty();
    if (!hasMesh)
      return llvm::Error::success();
    if (mesh.axes.size() != mesh.shape.size())
      return failure("the mesh names " + std::to_string(mesh.axes.size()) +
                     " axes but has " + plural(mesh.shape.size(), "size"));
    std::set<std::string> names;
    uint64_t ranks = 1;
    for (size_t a = 0; a < mesh.axes.size(); ++a) {
      if (mesh.axes[a].empty() || !names.insert(mesh.axes[a]).second)
        return failure("mesh axis " + std::to_string(a) + " ('" +
                       mesh.axes[a] + "') is empty or repeated");
      if (mesh.shape[a] < 1 || mesh.shape[a] > (1 << 20) ||
          __builtin_mul_overflow(ranks, uint64_t(mesh.shape[a]), &ranks) ||
          ranks > (1u << 20))
        return failure("mesh axis '" + mesh.axes[a] + "' has size " +
                       std::to_string(mesh.shape[a]) +
                       " (the mesh must hold 1 to 2^20 ranks)");
    }
    numRanks = ranks;
    return llvm::Error::success();
  }

  /// The runtime does not read the schedule; loom-inspect parses and verifies
  /// it. Here only that it belongs to these ranks: one CSV row (a line that
  /// is not a `#` comment, as importCsv counts them) per pipeline rank.
  llvm::Error checkSchedule() {
    const std::string &csv = exe.scheduleCsv;
    if (csv.empty())
      return llvm::Error::success();
    auto pp = std::find(exe.mesh.axes.begin(), exe.mesh.axes.end(), "pp");
    if (pp == exe.mesh.axes.end())
      return failure("the executable holds a pipeline schedule but its mesh has no "
                     "'pp' axis");
    int64_t pipelineRanks = exe.mesh.shape[pp - exe.mesh.axes.begin()];
    llvm::SmallVector<llvm::StringRef> lines;
    llvm::StringRef(csv).split(lines, '\n');
    if (lines.back().empty())
      lines.pop_back(); // the final newline
    int64_t rows = llvm::count_if(
        lines, [](llvm::StringRef line) { return !line.trim().starts_with("#"); });
    if (rows != pipelineRanks)
      return failure("the pipeline schedule has " + plural(rows, "row") +
                     " but the mesh's 'pp' axis has " + plural(pipelineRanks, "rank"));
    return llvm::Error::success();
  }

  /// A sharding's problem with a tensor of `shape`, or "".
  std::string shardingProblem(const Sharding &sharding,
                              const std::vector<int64_t> &shape) {
    if (sharding.empty())
      return "";
    if (!hasMesh && !isReplicated(sharding))
      return "is sharded " + formatSharding(sharding) +
             " but the executable has no mesh";
    auto block = shardBlock(exe.mesh, 0, sharding, shape);
    if (!block)
      return llvm::toString(block.takeError());
    return "";
  }

  /// The shape `rank` holds of a tensor of `shape` split by `sharding`.
  std::vector<int64_t> localShape(const Sharding &sharding,
                                  const std::vector<int64_t> &shape,
                                  uint32_t rank) {
    if (sharding.empty() || !hasMesh)
      return shape;
    auto block = shardBlock(exe.mesh, rank, sharding, shape);
    if (!block) {
      llvm::consumeError(block.takeError());
      return shape; // reported by checkParameter / checkIOBinding
    }
    return block->shape;
  }

  llvm::Error checkParameter(size_t index) {
    const ParameterDesc &param = exe.parameters[index];
    std::string context = named("parameter", index, param.name) + ": ";
    std::string problem;
    if (!checkTensor(param.dtype, param.shape, parameterBytes[index], problem))
      return failure(context + problem);
    if (!isValidInitKind(param.init))
      return failure(context + "invalid init kind " +
                     std::to_string(static_cast<int>(param.init)));
    if (param.init == InitKind::Data) {
      if (param.data.size() != parameterBytes[index])
        return failure(context + "init data has " +
                       plural(param.data.size(), "byte") + ", " +
                       formatTensorType(param.dtype, param.shape) + " needs " +
                       std::to_string(parameterBytes[index]));
    } else if (!param.data.empty()) {
      return failure(context + "init is " + initKindName(param.init) +
                     " but carries " + plural(param.data.size(), "byte") +
                     " of data");
    }
    if ((param.init == InitKind::Normal || param.init == InitKind::Uniform) &&
        !(std::isfinite(param.initScale) && param.initScale >= 0))
      return failure(context + "init scale " + std::to_string(param.initScale) +
                     " must be finite and non-negative");
    std::string shardingIssue = shardingProblem(param.sharding, param.shape);
    if (!shardingIssue.empty())
      return failure(context + "sharding " + shardingIssue);
    return llvm::Error::success();
  }

  llvm::Error checkRank(const RankProgram &program) {
    std::string rankContext = "rank " + std::to_string(program.rank);
    bufferBytes.assign(program.buffers.size(), 0);
    for (size_t b = 0; b < program.buffers.size(); ++b)
      if (llvm::Error err = checkBuffer(program, b, rankContext))
        return err;
    for (size_t i = 0; i < program.instructions.size(); ++i)
      if (llvm::Error err = checkInstruction(program, i, rankContext))
        return err;
    for (size_t p = 0; p < program.params.size(); ++p)
      if (llvm::Error err = checkParamBinding(program, p, rankContext))
        return err;
    for (size_t i = 0; i < program.inputs.size(); ++i)
      if (llvm::Error err = checkIOBinding(program, program.inputs[i], "input",
                                           i, rankContext))
        return err;
    for (size_t i = 0; i < program.outputs.size(); ++i)
      if (llvm::Error err = checkIOBinding(program, program.outputs[i],
                                           "output", i, rankContext))
        return err;
    return llvm::Error::success();
  }

  llvm::Error checkBuffer(const RankProgram &program, size_t index,
                          const std::string &rankContext) {
    const BufferDesc &buffer = program.buffers[index];
    std::string context =
        rankContext + ", " + named("buffer", index, buffer.name) + ": ";
    if (!isValidArena(buffer.arena))
      return failure(context + "invalid arena kind " +
                     std::to_string(static_cast<int>(buffer.arena)));
    if (static_cast<uint8_t>(buffer.category) > kMaxMemoryCategory)
      return failure(context + "invalid memory category " +
                     std::to_string(static_cast<int>(buffer.category)));
    if (buffer.microbatch < -1)
      return failure(context + "invalid microbatch " + std::to_string(buffer.microbatch));
    std::string problem;
    if (!checkTensor(buffer.dtype, buffer.shape, bufferBytes[index], problem))
      return failure(context + problem);
    uint64_t arenaSize = program.arenaSize[static_cast<int>(buffer.arena)];
    uint64_t end = 0;
    if (__builtin_add_overflow(buffer.offset, bufferBytes[index], &end) ||
        end > arenaSize)
      return failure(context + "bytes [" + std::to_string(buffer.offset) +
                     ", +" + std::to_string(bufferBytes[index]) +
                     ") exceed the " + arenaKindName(buffer.arena) +
                     " arena (" + plural(arenaSize, "byte") + ")");
    if (buffer.aliasOf != -1) {
      // Targets come first, so their sizes are already known here.
      if (buffer.aliasOf < 0 || static_cast<uint64_t>(buffer.aliasOf) >= index)
        return failure(context + "aliases buffer " + std::to_string(buffer.aliasOf) +
                       "; a view must follow the buffer it views");
      const BufferDesc &target = program.buffers[buffer.aliasOf];
      if (target.aliasOf != -1 || target.arena != buffer.arena ||
          target.offset != buffer.offset ||
          bufferBytes[buffer.aliasOf] < bufferBytes[index])
        return failure(context + "is not a view of buffer " +
                       std::to_string(buffer.aliasOf) +
                       " (a view needs a non-view target at the same arena "
                       "and offset, at least as large)");
    }
    return llvm::Error::success();
  }

  llvm::Error checkBufferIndices(const RankProgram &program,
                                 const std::vector<uint32_t> &indices,
                                 const char *role, const std::string &context) {
    for (uint32_t index : indices)
      if (index >= program.buffers.size())
        return failure(context + role + " buffer " + std::to_string(index) +
                       " out of range (" +
                       plural(program.buffers.size(), "buffer") + ")");
    return llvm::Error::success();
  }

  static std::string arityText(int count, const char *noun) {
    return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
  }

  llvm::Error checkInstruction(const RankProgram &program, size_t index,
                               const std::string &rankContext) {
    const Instruction &instr = program.instructions[index];
    std::string label = instr.kind == InstrKind::Kernel
                            ? instr.kernel
                            : instrKindName(instr.kind);
    std::string context = rankContext + ", instruction " +
                          std::to_string(index) + " (" + label + "): ";
    if (!isValidInstrKind(instr.kind))
      return failure(context + "invalid instruction kind " +
                     std::to_string(static_cast<int>(instr.kind)));
    if (instr.stream >= program.streams.size())
      return failure(context + "stream " + std::to_string(instr.stream) +
                     " out of range (" +
                     plural(program.streams.size(), "stream") + ")");
    if (llvm::Error err =
            checkBufferIndices(program, instr.inputs, "input", context))
      return err;
    if (llvm::Error err =
            checkBufferIndices(program, instr.outputs, "output", context))
      return err;

    // Host buffers (offloaded activations) are only copied to and from.
    if (instr.kind != InstrKind::Copy)
      for (const std::vector<uint32_t> *list : {&instr.inputs, &instr.outputs})
        for (uint32_t b : *list)
          if (program.buffers[b].arena == ArenaKind::Host)
            return failure(context + "buffer " + std::to_string(b) +
                           " lives in the host arena, which only copies may touch");
    size_t numInputs = instr.inputs.size();
    size_t numOutputs = instr.outputs.size();
    switch (instr.kind) {
    case InstrKind::Kernel: {
      std::optional<KernelId> id = findKernel(instr.kernel);
      if (!id)
        return failure(context + "unknown kernel '" + instr.kernel + "'");
      const KernelInfo *kernel = &kernelInfo(*id);
      bool inputsOk =
          numInputs >= static_cast<size_t>(kernel->minInputs) &&
          (kernel->maxInputs < 0 ||
           numInputs <= static_cast<size_t>(kernel->maxInputs));
      if (!inputsOk) {
        std::string expected =
            kernel->maxInputs < 0
                ? "at least " + arityText(kernel->minInputs, "input")
            : kernel->minInputs == kernel->maxInputs
                ? arityText(kernel->minInputs, "input")
                : std::to_string(kernel->minInputs) + " to " +
                      arityText(kernel->maxInputs, "input");
        return failure(context + "expects " + expected + ", has " +
                       std::to_string(numInputs));
      }
      // The FP8 scale epilogue's outputs (KernelList.h) come after the
      // kernel's own: one rank-0 f32 each, for an output it names.
      Fp8ScaleEpilogueAttrs epilogue;
      if (std::string problem = splitFp8ScaleEpilogue(instr.attrs, numOutputs, epilogue);
          !problem.empty())
        return failure(context + instr.kernel + ": " + problem);
      const size_t own = numOutputs - epilogue.outputs.size();
      for (size_t j = own; j < numOutputs; ++j) {
        const BufferDesc &scale = program.buffers[instr.outputs[j]];
        if (scale.dtype != DType::F32 || !scale.shape.empty())
          return failure(context + instr.kernel + ": an FP8 scale output must be a rank-0 f32");
      }
      numOutputs = own;
      bool outputsOk = kernel->numOutputs < 0
                           ? numOutputs >= 1
                           : numOutputs ==
                                 static_cast<size_t>(kernel->numOutputs);
      if (!outputsOk)
        return failure(context + "expects " +
                       (kernel->numOutputs < 0
                            ? std::string("at least 1 output")
                            : arityText(kernel->numOutputs, "output")) +
                       ", has " + std::to_string(numOutputs));
      // The attributes the kernel reads must be of their kind (its ODS
      // contract); others are skipped, as a reader skips unknown fields.
      if (std::string problem = checkKernelAttrs(*id, instr.attrs, /*ignoreUnknown=*/true);
          !problem.empty())
        return failure(context + instr.kernel + ": " + problem);
      if (*id == KernelId::Fused)
        if (llvm::Error err = checkFusedCallInstr(program, instr, context))
          return err;
      break;
    }
    case InstrKind::Copy: {
      if (numInputs != 1 || numOutputs != 1)
        return failure(context + "expects 1 input and 1 output, has " +
                       std::to_string(numInputs) + " and " +
                       std::to_string(numOutputs));
      uint64_t from = bufferBytes[instr.inputs[0]];
      uint64_t to = bufferBytes[instr.outputs[0]];
      if (from != to)
        return failure(context + "copies " + plural(from, "byte") +
                       " from buffer " + std::to_string(instr.inputs[0]) +
                       " into " + plural(to, "byte") + " of buffer " +
                       std::to_string(instr.outputs[0]));
      break;
    }
    case InstrKind::Collective:
      if (llvm::Error err = checkCollective(program, instr, context))
        return err;
      break;
    case InstrKind::RecordEvent:
    case InstrKind::WaitEvent:
      if (instr.event >= program.numEvents)
        return failure(context + "event " + std::to_string(instr.event) +
                       " out of range (" + plural(program.numEvents, "event") +
                       ")");
      if (numInputs != 0 || numOutputs != 0)
        return failure(context + "takes no buffers, has " +
                       plural(numInputs, "input") + " and " +
                       plural(numOutputs, "output"));
      break;
    }
    return llvm::Error::success();
  }

  /// A fusion group's call: its body parses, and its buffers are the types
  /// the body reads and yields.
  llvm::Error checkFusedCallInstr(const RankProgram &program, const Instruction &instr,
                                  const std::string &context) {
    const std::string *text = nullptr;
    for (const NamedAttr &attr : instr.attrs)
      if (attr.name == "body")
        text = std::get_if<std::string>(&attr.value);
    if (!text)
      return failure(context + "nn.fused: no body (string attribute 'body')");
    llvm::Expected<FusedBody> body = parseFusedBody(*text);
    if (!body)
      return failure(context + "nn.fused: body: " + llvm::toString(body.takeError()));
    auto typesOf = [&](const std::vector<uint32_t> &indices) {
      std::vector<FusedTensorType> types;
      for (uint32_t b : indices)
        types.push_back({program.buffers[b].dtype, program.buffers[b].shape});
      return types;
    };
    if (std::string problem = checkFusedCall(*body, typesOf(instr.inputs), typesOf(instr.outputs));
        !problem.empty())
      return failure(context + "nn.fused: " + problem);
    return llvm::Error::success();
  }

  llvm::Error checkCollective(const RankProgram &program,
                              const Instruction &instr,
                              const std::string &context) {
    const CollectiveDesc &desc = instr.collective;
    if (desc.kind == CollectiveKind::Exchange)
      return checkExchangeInstr(program, instr, context);
    if (desc.kind == CollectiveKind::GatherRows || desc.kind == CollectiveKind::ScatterRows)
      return checkGatherRowsInstr(program, instr, context);
    // A bucket (all_reduce, reduce_scatter): input i pairs with output i.
    // Readers from before buckets refuse one here, as they should.
    size_t pairs = std::max(instr.inputs.size(), instr.outputs.size());
    if (pairs > 1 && (!isBucketable(desc.kind) ||
                      instr.inputs.size() != instr.outputs.size()))
      return failure(context + "a collective takes at most one input and one "
                               "output (all_reduce and reduce_scatter a bucket "
                               "of one output per input), has " +
                     plural(instr.inputs.size(), "input") + " and " +
                     plural(instr.outputs.size(), "output"));
    int64_t groupSize = 0;
    if (static_cast<int>(desc.kind) < kNumCollectiveKinds &&
        desc.kind != CollectiveKind::Send && desc.kind != CollectiveKind::Recv) {
      Mesh oneRank; // no mesh: every group is the rank alone
      auto group = groupOf(hasMesh ? exe.mesh : oneRank,
                           hasMesh ? program.rank : 0, desc.axes);
      if (!group)
        return failure(context + llvm::toString(group.takeError()));
      groupSize = group->size();
    }
    if (desc.kind == CollectiveKind::Send || desc.kind == CollectiveKind::Recv) {
      uint64_t ranks = hasMesh ? numRanks : exe.ranks.size();
      if (desc.peer < 0 || static_cast<uint64_t>(desc.peer) >= ranks ||
          static_cast<uint64_t>(desc.peer) == program.rank)
        return failure(context + "peer " + std::to_string(desc.peer) +
                       " is not another rank (of " + plural(ranks, "rank") +
                       ")");
    }
    for (size_t i = 0; i < std::max<size_t>(pairs, 1); ++i) {
      const BufferDesc *in =
          i < instr.inputs.size() ? &program.buffers[instr.inputs[i]] : nullptr;
      const BufferDesc *out =
          i < instr.outputs.size() ? &program.buffers[instr.outputs[i]] : nullptr;
      std::string problem = checkCollectiveTypes(
          desc, groupSize, in ? &in->dtype : nullptr, in ? &in->shape : nullptr,
          out ? &out->dtype : nullptr, out ? &out->shape : nullptr);
      if (!problem.empty())
        return failure(context + (pairs > 1 ? "bucket entry " + std::to_string(i) + ": " : "") +
                       problem);
    }
    return llvm::Error::success();
  }

  /// An exchange: a peer per input and per output, each an index in the
  /// group over its axes, element types that collectives move.
  llvm::Error checkExchangeInstr(const RankProgram &program,
                                 const Instruction &instr,
                                 const std::string &context) {
    const CollectiveDesc &desc = instr.collective;
    Mesh oneRank; // no mesh: every group is the rank alone
    auto group = groupOf(hasMesh ? exe.mesh : oneRank,
                         hasMesh ? program.rank : 0, desc.axes);
    if (!group)
      return failure(context + llvm::toString(group.takeError()));
    std::vector<DType> sendTypes, recvTypes;
    for (uint32_t b : instr.inputs)
      sendTypes.push_back(program.buffers[b].dtype);
    for (uint32_t b : instr.outputs)
      recvTypes.push_back(program.buffers[b].dtype);
    std::string problem =
        checkExchange(desc, group->size(), sendTypes, recvTypes);
    if (!problem.empty())
      return failure(context + problem);
    return llvm::Error::success();
  }

  /// A gather_rows: x, rows and ranges in, one output.
  llvm::Error checkGatherRowsInstr(const RankProgram &program, const Instruction &instr,
                                   const std::string &context) {
    const CollectiveDesc &desc = instr.collective;
    if (instr.inputs.size() != 3 || instr.outputs.size() != 1)
      return failure(context + collectiveKindName(desc.kind) +
                     " takes three inputs (rows of data, their indices, ranges) and one "
                     "output, has " +
                     plural(instr.inputs.size(), "input") + " and " +
                     plural(instr.outputs.size(), "output"));
    Mesh oneRank; // no mesh: every group is the rank alone
    auto group = groupOf(hasMesh ? exe.mesh : oneRank, hasMesh ? program.rank : 0, desc.axes);
    if (!group)
      return failure(context + llvm::toString(group.takeError()));
    auto type = [&](uint32_t b) {
      return OperandType{program.buffers[b].dtype, program.buffers[b].shape};
    };
    std::string problem =
        checkGatherRows(desc, group->size(), type(instr.inputs[0]), type(instr.inputs[1]),
                        type(instr.inputs[2]), type(instr.outputs[0]));
    if (!problem.empty())
      return failure(context + problem);
    return llvm::Error::success();
  }

  llvm::Error checkParamBinding(const RankProgram &program, size_t index,
                                const std::string &rankContext) {
    const ParamBinding &binding = program.params[index];
    std::string context =
        rankContext + ", parameter binding " + std::to_string(index);
    if (binding.parameter >= exe.parameters.size())
      return failure(context + ": parameter " +
                     std::to_string(binding.parameter) + " out of range (" +
                     plural(exe.parameters.size(), "parameter") + ")");
    const ParameterDesc &param = exe.parameters[binding.parameter];
    if (!param.name.empty())
      context += " (" + param.name + ")";
    context += ": ";
    if (binding.buffer >= program.buffers.size())
      return failure(context + "buffer " + std::to_string(binding.buffer) +
                     " out of range (" +
                     plural(program.buffers.size(), "buffer") + ")");
    const BufferDesc &buffer = program.buffers[binding.buffer];
    // A sharded parameter's buffer holds this rank's block.
    std::vector<int64_t> local = localShape(param.sharding, param.shape, program.rank);
    if (buffer.dtype != param.dtype || buffer.shape != local)
      return failure(context + "buffer " + std::to_string(binding.buffer) +
                     " is " + formatTensorType(buffer.dtype, buffer.shape) +
                     " but the parameter" +
                     (local != param.shape ? "'s block on this rank" : "") +
                     " is " + formatTensorType(param.dtype, local));
    return llvm::Error::success();
  }

  llvm::Error checkIOBinding(const RankProgram &program,
                             const IOBinding &binding, const char *role,
                             size_t index, const std::string &rankContext) {
    if (binding.rowGroups < 1 ||
        (binding.rowGroups > 1 &&
         (binding.globalShape.empty() || binding.globalShape[0] % binding.rowGroups != 0)))
      return failure(rankContext + ", " + named(role, index, binding.name) + ": row groups " +
                     std::to_string(binding.rowGroups) +
                     " must be at least 1 and, above 1, divide the global rows");
    if (binding.buffer >= program.buffers.size())
      return failure(rankContext + ", " + named(role, index, binding.name) +
                     ": buffer " + std::to_string(binding.buffer) +
                     " out of range (" +
                     plural(program.buffers.size(), "buffer") + ")");
    if (binding.globalShape.empty() && binding.sharding.empty())
      return llvm::Error::success();
    std::string context = rankContext + ", " + named(role, index, binding.name) + ": ";
    if (binding.globalShape.empty())
      return failure(context + "is sharded but has no global shape");
    std::string problem = shardingProblem(binding.sharding, binding.globalShape);
    if (!problem.empty())
      return failure(context + "sharding " + problem);
    const BufferDesc &buffer = program.buffers[binding.buffer];
    std::vector<int64_t> local =
        localShape(binding.sharding, binding.globalShape, program.rank);
    if (buffer.shape != local)
      return failure(context + "buffer " + std::to_string(binding.buffer) +
                     " is " + formatTensorType(buffer.dtype, buffer.shape) +
                     " but its block of the global " +
                     formatTensorType(buffer.dtype, binding.globalShape) +
                     " is " + formatTensorType(buffer.dtype, local));
    return llvm::Error::success();
  }

  const Executable &exe;
  bool hasMesh = false;
  uint64_t numRanks = 1;
  std::vector<uint64_t> parameterBytes; // by parameter index
  std::vector<uint64_t> bufferBytes;    // by buffer index, current rank
};

} // namespace

llvm::Error verifyExecutable(const Executable &exe) {
  return Verifier(exe).run();
}

} // namespace loom
