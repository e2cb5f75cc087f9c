// Executable -> flatbuffers bytes (runtime/schema/executable.fbs).

#include "runtime/executable/Executable.h"
#include "runtime/schema/executable_generated.h"

#include <type_traits>

namespace loom {

// The schema's enums are the C++ enums on disk: same numbering, same width.
#define LOOM_SAME_ENUM(CPP, FB)                                                \
  static_assert(static_cast<int>(CPP) == static_cast<int>(FB),                 \
                #CPP " and " #FB " differ")
LOOM_SAME_ENUM(DType::F32, fb::DType::F32);
LOOM_SAME_ENUM(DType::F16, fb::DType::F16);
LOOM_SAME_ENUM(DType::BF16, fb::DType::BF16);
LOOM_SAME_ENUM(DType::F8E4M3FN, fb::DType::F8E4M3FN);
LOOM_SAME_ENUM(DType::F8E5M2, fb::DType::F8E5M2);
LOOM_SAME_ENUM(DType::I64, fb::DType::I64);
LOOM_SAME_ENUM(DType::I32, fb::DType::I32);
LOOM_SAME_ENUM(DType::I1, fb::DType::I1);
LOOM_SAME_ENUM(DType::F64, fb::DType::F64);
LOOM_SAME_ENUM(kNumDTypes - 1, fb::DType::MAX);
LOOM_SAME_ENUM(ArenaKind::Persistent, fb::ArenaKind::Persistent);
LOOM_SAME_ENUM(ArenaKind::Scratch, fb::ArenaKind::Scratch);
LOOM_SAME_ENUM(kNumArenas - 1, fb::ArenaKind::MAX);
LOOM_SAME_ENUM(InstrKind::Kernel, fb::InstrKind::Kernel);
LOOM_SAME_ENUM(InstrKind::Copy, fb::InstrKind::Copy);
LOOM_SAME_ENUM(InstrKind::RecordEvent, fb::InstrKind::RecordEvent);
LOOM_SAME_ENUM(InstrKind::WaitEvent, fb::InstrKind::WaitEvent);
LOOM_SAME_ENUM(InstrKind::Collective, fb::InstrKind::Collective);
LOOM_SAME_ENUM(InstrKind::Collective, fb::InstrKind::MAX);
LOOM_SAME_ENUM(CollectiveKind::AllReduce, fb::CollectiveKind::AllReduce);
LOOM_SAME_ENUM(CollectiveKind::AllGather, fb::CollectiveKind::AllGather);
LOOM_SAME_ENUM(CollectiveKind::ReduceScatter, fb::CollectiveKind::ReduceScatter);
LOOM_SAME_ENUM(CollectiveKind::AllToAll, fb::CollectiveKind::AllToAll);
LOOM_SAME_ENUM(CollectiveKind::Broadcast, fb::CollectiveKind::Broadcast);
LOOM_SAME_ENUM(CollectiveKind::Send, fb::CollectiveKind::Send);
LOOM_SAME_ENUM(CollectiveKind::Recv, fb::CollectiveKind::Recv);
LOOM_SAME_ENUM(CollectiveKind::Exchange, fb::CollectiveKind::Exchange);
LOOM_SAME_ENUM(CollectiveKind::GatherRows, fb::CollectiveKind::GatherRows);
LOOM_SAME_ENUM(CollectiveKind::ScatterRows, fb::CollectiveKind::ScatterRows);
LOOM_SAME_ENUM(kNumCollectiveKinds - 1, fb::CollectiveKind::MAX);
LOOM_SAME_ENUM(ReduceOp::Sum, fb::ReduceOp::Sum);
LOOM_SAME_ENUM(ReduceOp::Max, fb::ReduceOp::Max);
LOOM_SAME_ENUM(ReduceOp::Avg, fb::ReduceOp::Avg);
LOOM_SAME_ENUM(kNumReduceOps - 1, fb::ReduceOp::MAX);
LOOM_SAME_ENUM(InitKind::Zeros, fb::InitKind::Zeros);
LOOM_SAME_ENUM(InitKind::Ones, fb::InitKind::Ones);
LOOM_SAME_ENUM(InitKind::Normal, fb::InitKind::Normal);
LOOM_SAME_ENUM(InitKind::Uniform, fb::InitKind::Uniform);
LOOM_SAME_ENUM(InitKind::Data, fb::InitKind::Data);
LOOM_SAME_ENUM(InitKind::Data, fb::InitKind::MAX);
#undef LOOM_SAME_ENUM
static_assert(std::is_same_v<std::underlying_type_t<DType>,
                             std::underlying_type_t<fb::DType>>);
static_assert(std::variant_size_v<AttrValue> == 5,
              "a new AttrValue alternative needs a table in executable.fbs");

namespace {

// Alignment of parameter data inside the file (the schema's force_align).
constexpr size_t kParameterDataAlignment = 16;

class Serializer {
public:
  std::vector<uint8_t> run(const Executable &exe) {
    std::vector<flatbuffers::Offset<fb::Parameter>> parameters;
    for (const ParameterDesc &param : exe.parameters)
      parameters.push_back(parameter(param));
    std::vector<flatbuffers::Offset<fb::RankProgram>> ranks;
    for (const RankProgram &program : exe.ranks)
      ranks.push_back(rankProgram(program));
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>>
        meshAxes;
    flatbuffers::Offset<flatbuffers::Vector<int64_t>> meshShape;
    if (!exe.mesh.axes.empty() || !exe.mesh.shape.empty()) {
      meshAxes = builder.CreateVectorOfStrings(exe.mesh.axes);
      meshShape = builder.CreateVector(exe.mesh.shape);
    }
    // Absent when not pipelined, so such files are as before the field.
    flatbuffers::Offset<flatbuffers::String> scheduleCsv;
    if (!exe.scheduleCsv.empty())
      scheduleCsv = builder.CreateString(exe.scheduleCsv);
    auto root = fb::CreateExecutable(
        builder, exe.formatVersion, builder.CreateString(exe.modelName),
        builder.CreateString(exe.mode), builder.CreateString(exe.compileFlags),
        builder.CreateVector(parameters), builder.CreateVector(ranks), meshAxes,
        meshShape, scheduleCsv, exe.vocabSize);
    fb::FinishExecutableBuffer(builder, root);
    const uint8_t *bytes = builder.GetBufferPointer();
    return std::vector<uint8_t>(bytes, bytes + builder.GetSize());
  }

private:
  /// Absent (offset 0) for an unsharded tensor, as in version 1.
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::DimSharding>>>
  sharding(const Sharding &dims) {
    if (dims.empty())
      return 0;
    std::vector<flatbuffers::Offset<fb::DimSharding>> offsets;
    for (const std::vector<std::string> &axes : dims)
      offsets.push_back(
          fb::CreateDimSharding(builder, builder.CreateVectorOfStrings(axes)));
    return builder.CreateVector(offsets);
  }

  flatbuffers::Offset<fb::Parameter> parameter(const ParameterDesc &param) {
    auto name = builder.CreateString(param.name);
    auto shape = builder.CreateVector(param.shape);
    auto shardingVector = sharding(param.sharding);
    builder.ForceVectorAlignment(param.data.size(), sizeof(uint8_t),
                                 kParameterDataAlignment);
    auto data = builder.CreateVector(param.data);
    return fb::CreateParameter(builder, name, static_cast<fb::DType>(param.dtype),
                               shape, param.trainable,
                               static_cast<fb::InitKind>(param.init),
                               param.initScale, data, shardingVector);
  }

  flatbuffers::Offset<fb::Buffer> buffer(const BufferDesc &desc) {
    return fb::CreateBuffer(builder, builder.CreateString(desc.name),
                            static_cast<fb::ArenaKind>(desc.arena), desc.offset,
                            static_cast<fb::DType>(desc.dtype),
                            builder.CreateVector(desc.shape), desc.aliasOf,
                            static_cast<fb::MemoryCategory>(desc.category), desc.microbatch);
  }

  flatbuffers::Offset<fb::NamedAttr> namedAttr(const NamedAttr &attr) {
    auto name = builder.CreateString(attr.name);
    fb::AttrValue type = fb::AttrValue::NONE;
    flatbuffers::Offset<void> value;
    if (auto *i = std::get_if<int64_t>(&attr.value)) {
      type = fb::AttrValue::IntAttr;
      value = fb::CreateIntAttr(builder, *i).Union();
    } else if (auto *f = std::get_if<double>(&attr.value)) {
      type = fb::AttrValue::FloatAttr;
      value = fb::CreateFloatAttr(builder, *f).Union();
    } else if (auto *s = std::get_if<std::string>(&attr.value)) {
      type = fb::AttrValue::StringAttr;
      value = fb::CreateStringAttr(builder, builder.CreateString(*s)).Union();
    } else if (auto *is = std::get_if<std::vector<int64_t>>(&attr.value)) {
      type = fb::AttrValue::IntListAttr;
      value = fb::CreateIntListAttr(builder, builder.CreateVector(*is)).Union();
    } else {
      const auto &fs = std::get<std::vector<double>>(attr.value);
      type = fb::AttrValue::FloatListAttr;
      value = fb::CreateFloatListAttr(builder, builder.CreateVector(fs)).Union();
    }
    return fb::CreateNamedAttr(builder, name, type, value);
  }

  flatbuffers::Offset<fb::Instruction> instruction(const Instruction &instr) {
    auto kernel = builder.CreateString(instr.kernel);
    auto inputs = builder.CreateVector(instr.inputs);
    auto outputs = builder.CreateVector(instr.outputs);
    std::vector<flatbuffers::Offset<fb::NamedAttr>> attrs;
    for (const NamedAttr &attr : instr.attrs)
      attrs.push_back(namedAttr(attr));
    auto attrVector = builder.CreateVector(attrs);
    auto location = builder.CreateString(instr.location);
    flatbuffers::Offset<fb::Collective> collective;
    if (instr.kind == InstrKind::Collective) {
      const CollectiveDesc &c = instr.collective;
      // Absent unless there are peers, so other collectives stay as before.
      flatbuffers::Offset<flatbuffers::Vector<int64_t>> sendPeers, recvPeers;
      if (!c.sendPeers.empty())
        sendPeers = builder.CreateVector(c.sendPeers);
      if (!c.recvPeers.empty())
        recvPeers = builder.CreateVector(c.recvPeers);
      collective = fb::CreateCollective(
          builder, static_cast<fb::CollectiveKind>(c.kind),
          builder.CreateVectorOfStrings(c.axes),
          static_cast<fb::ReduceOp>(c.reduce), c.dim, c.splitDim, c.concatDim,
          c.root, c.peer, sendPeers, recvPeers);
    }
    return fb::CreateInstruction(builder, static_cast<fb::InstrKind>(instr.kind),
                                 kernel, instr.stream, instr.event, inputs,
                                 outputs, attrVector, location, collective, instr.refresh);
  }

  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::IOBinding>>>
  ioBindings(const std::vector<IOBinding> &bindings) {
    std::vector<flatbuffers::Offset<fb::IOBinding>> offsets;
    for (const IOBinding &binding : bindings) {
      auto name = builder.CreateString(binding.name);
      flatbuffers::Offset<flatbuffers::Vector<int64_t>> globalShape;
      if (!binding.globalShape.empty())
        globalShape = builder.CreateVector(binding.globalShape);
      auto shardingVector = sharding(binding.sharding);
      offsets.push_back(fb::CreateIOBinding(builder, name, binding.buffer, globalShape,
                                            shardingVector, binding.rowGroups));
    }
    return builder.CreateVector(offsets);
  }

  flatbuffers::Offset<fb::RankProgram> rankProgram(const RankProgram &program) {
    std::vector<flatbuffers::Offset<fb::Buffer>> buffers;
    for (const BufferDesc &desc : program.buffers)
      buffers.push_back(buffer(desc));
    auto bufferVector = builder.CreateVector(buffers);
    auto streams = builder.CreateVectorOfStrings(program.streams);
    std::vector<fb::ParamBinding> params;
    for (const ParamBinding &binding : program.params)
      params.emplace_back(binding.parameter, binding.buffer);
    auto paramVector = builder.CreateVectorOfStructs(params);
    auto inputs = ioBindings(program.inputs);
    auto outputs = ioBindings(program.outputs);
    std::vector<flatbuffers::Offset<fb::Instruction>> instructions;
    for (const Instruction &instr : program.instructions)
      instructions.push_back(instruction(instr));
    auto instructionVector = builder.CreateVector(instructions);
    return fb::CreateRankProgram(
        builder, program.rank,
        program.arenaSize[static_cast<int>(ArenaKind::Persistent)],
        program.arenaSize[static_cast<int>(ArenaKind::Scratch)], bufferVector,
        streams, program.numEvents, paramVector, inputs, outputs,
        instructionVector, program.arenaSize[static_cast<int>(ArenaKind::Host)]);
  }

  flatbuffers::FlatBufferBuilder builder{16 * 1024};
};

} // namespace

std::vector<uint8_t> serializeExecutable(const Executable &exe) {
  return Serializer().run(exe);
}

} // namespace loom
