#include "runtime/executable/ExecutableListing.h"

#include "runtime/abi/FusedBody.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <map>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>
#include <utility>

namespace loom {

namespace {

constexpr uint64_t kInvalidSize = std::numeric_limits<uint64_t>::max();

uint64_t saturatingAdd(uint64_t a, uint64_t b) {
  uint64_t sum;
  return __builtin_add_overflow(a, b, &sum) ? kInvalidSize : sum;
}


std::string quotedString(const std::string &s) {
  std::string result;
  llvm::raw_string_ostream os(result);
  os << '"';
  llvm::printEscapedString(s, os);
  os << '"';
  return result;
}

std::string formatAttrValue(const AttrValue &value) {
  if (auto *i = std::get_if<int64_t>(&value))
    return std::to_string(*i);
  if (auto *f = std::get_if<double>(&value))
    return formatAttrDouble(*f);
  if (auto *s = std::get_if<std::string>(&value))
    return quotedString(*s);
  std::string result = "[";
  if (auto *is = std::get_if<std::vector<int64_t>>(&value)) {
    for (size_t k = 0; k < is->size(); ++k)
      result += (k ? ", " : "") + std::to_string((*is)[k]);
  } else {
    const auto &fs = std::get<std::vector<double>>(value);
    for (size_t k = 0; k < fs.size(); ++k)
      result += (k ? ", " : "") + formatAttrDouble(fs[k]);
  }
  return result + "]";
}

const char *attrTypeName(const AttrValue &value) {
  switch (value.index()) {
  case 0:
    return "i64";
  case 1:
    return "f64";
  case 2:
    return "string";
  case 3:
    return "i64[]";
  default:
    return "f64[]";
  }
}

std::string formatBytes(uint64_t bytes) {
  if (bytes == kInvalidSize)
    return "invalid";
  std::string text = std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
  if (bytes < 1024)
    return text;
  const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
  double scaled = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (scaled >= 1024 && unit < 3) {
    scaled /= 1024;
    ++unit;
  }
  char human[32];
  std::snprintf(human, sizeof(human), " (%.2f %s)", scaled, units[unit]);
  return text + human;
}

std::string formatInit(const ParameterDesc &param) {
  std::string text = initKindName(param.init);
  if (param.init == InitKind::Normal || param.init == InitKind::Uniform)
    text += "(scale " + formatAttrDouble(param.initScale) + ")";
  else if (param.init == InitKind::Data)
    text += "(" + std::to_string(param.data.size()) + " bytes)";
  return text;
}

std::string describeParameter(const ParameterDesc &param) {
  std::string text = formatTensorType(param.dtype, param.shape) + ", init " +
                     formatInit(param) + ", " +
                     (param.trainable ? "trainable" : "frozen");
  if (!isReplicated(param.sharding))
    text += ", sharded " + formatSharding(param.sharding);
  return text;
}

std::string streamLabel(const RankProgram &program, uint32_t stream) {
  if (stream < program.streams.size())
    return program.streams[stream];
  return "s" + std::to_string(stream) + "?";
}

std::string bufferList(const std::vector<uint32_t> &indices) {
  std::string text = "(";
  for (size_t k = 0; k < indices.size(); ++k)
    text += (k ? ", b" : "b") + std::to_string(indices[k]);
  return text + ")";
}

std::string bufferType(const RankProgram &program, uint32_t index) {
  if (index >= program.buffers.size())
    return "<no such buffer>";
  const BufferDesc &buffer = program.buffers[index];
  return formatTensorType(buffer.dtype, buffer.shape);
}

/// `all_reduce(sum) over ["tp"]`, `all_gather(dim 1) over ["dp"]`,
/// `send to rank 3`, `exchange over ["pp"]`.
std::string formatCollective(const CollectiveDesc &c) {
  std::string text = collectiveKindName(c.kind);
  switch (c.kind) {
  case CollectiveKind::AllReduce:
    text += "(" + reduceOpName(c.reduce) + ")";
    break;
  case CollectiveKind::AllGather:
    text += "(dim " + std::to_string(c.dim) + ")";
    break;
  case CollectiveKind::ReduceScatter:
    text += "(" + reduceOpName(c.reduce) + ", dim " + std::to_string(c.dim) + ")";
    break;
  case CollectiveKind::AllToAll:
    text += "(split " + std::to_string(c.splitDim) + ", concat " +
            std::to_string(c.concatDim) + ")";
    break;
  case CollectiveKind::Broadcast:
    text += "(root " + std::to_string(c.root) + ")";
    break;
  case CollectiveKind::Send:
    return text + " to rank " + std::to_string(c.peer);
  case CollectiveKind::Recv:
    return text + " from rank " + std::to_string(c.peer);
  case CollectiveKind::Exchange:
  case CollectiveKind::GatherRows:
  case CollectiveKind::ScatterRows:
    break;
  }
  std::string axes;
  for (const std::string &axis : c.axes)
    axes += (axes.empty() ? "\"" : ", \"") + axis + "\"";
  return text + " over [" + axes + "]";
}

/// An exchange's transfers after formatCollective's text: `send b12 -> 1
/// (rank 3), recv b13 <- 1 (rank 3)`, each with its buffer's type when
/// `withTypes`; the peer is an index in the group, then the rank it is.
std::string formatExchangeTransfers(const Executable &exe, const RankProgram &program,
                                    const Instruction &instr, bool withTypes) {
  const CollectiveDesc &c = instr.collective;
  std::optional<Group> group;
  if (!exe.mesh.axes.empty()) {
    auto found = groupOf(exe.mesh, program.rank, c.axes);
    if (found)
      group = std::move(*found);
    else
      llvm::consumeError(found.takeError());
  }
  std::string text;
  for (bool sending : {true, false}) {
    const std::vector<uint32_t> &buffers = sending ? instr.inputs : instr.outputs;
    const std::vector<int64_t> &peers = sending ? c.sendPeers : c.recvPeers;
    for (size_t i = 0; i < buffers.size(); ++i) {
      text += (text.empty() ? "" : ", ") + std::string(sending ? "send b" : "recv b") +
              std::to_string(buffers[i]);
      if (withTypes)
        text += " " + bufferType(program, buffers[i]);
      text += sending ? " -> " : " <- ";
      if (i >= peers.size()) {
        text += "?";
        continue;
      }
      text += std::to_string(peers[i]);
      if (group && peers[i] >= 0 && peers[i] < group->size())
        text += " (rank " + std::to_string(group->members[peers[i]]) + ")";
    }
  }
  return text;
}

llvm::json::Array jsonSharding(const Sharding &sharding) {
  llvm::json::Array dims;
  for (const auto &axes : sharding) {
    llvm::json::Array names;
    for (const std::string &axis : axes)
      names.push_back(axis);
    dims.push_back(std::move(names));
  }
  return dims;
}

/// Each fused body's number (fK), for the instructions that call it.
using FusedIndex = std::map<std::string, size_t>;

FusedIndex fusedIndexOf(const Executable &exe) {
  FusedIndex index;
  std::vector<FusedKernelUse> kernels = listFusedKernels(exe);
  for (size_t k = 0; k < kernels.size(); ++k)
    index.emplace(kernels[k].body, k);
  return index;
}

/// The fK an nn.fused call's body is listed as, or -1.
int64_t fusedNumber(const FusedIndex &index, const Instruction &instr, const NamedAttr &attr) {
  if (instr.kind != InstrKind::Kernel || instr.kernel != kernelName(KernelId::Fused) ||
      attr.name != "body")
    return -1;
  const std::string *text = std::get_if<std::string>(&attr.value);
  auto it = text ? index.find(*text) : index.end();
  return it == index.end() ? -1 : static_cast<int64_t>(it->second);
}

std::string formatInstruction(const Executable &exe, const RankProgram &program,
                              const Instruction &instr, const FusedIndex &fused) {
  std::string text = "[" + streamLabel(program, instr.stream) + "] ";
  if (instr.refresh)
    text += "refresh ";
  switch (instr.kind) {
  case InstrKind::Kernel:
    text += instr.kernel;
    break;
  case InstrKind::RecordEvent:
  case InstrKind::WaitEvent:
    text += instrKindName(instr.kind) + " e" + std::to_string(instr.event);
    break;
  case InstrKind::Collective:
    text += formatCollective(instr.collective);
    if (instr.collective.kind == CollectiveKind::Exchange)
      text += ": " + formatExchangeTransfers(exe, program, instr, false);
    break;
  default:
    text += instrKindName(instr.kind);
    break;
  }
  bool isExchange = instr.kind == InstrKind::Collective &&
                    instr.collective.kind == CollectiveKind::Exchange;
  if (!isExchange && (!instr.inputs.empty() || !instr.outputs.empty()))
    text += " " + bufferList(instr.inputs) + " -> " + bufferList(instr.outputs);
  if (!instr.attrs.empty()) {
    text += " {";
    for (size_t k = 0; k < instr.attrs.size(); ++k) {
      int64_t number = fusedNumber(fused, instr, instr.attrs[k]);
      text += (k ? ", " : "") + instr.attrs[k].name + " = " +
              (number >= 0 ? "f" + std::to_string(number)
                           : formatAttrValue(instr.attrs[k].value));
    }
    text += "}";
  }
  if (!instr.location.empty())
    text += "  loc(" + instr.location + ")";
  return text;
}

/// llvm::json asserts on invalid UTF-8; names from a file are not trusted.
llvm::json::Value jsonString(const std::string &s) {
  if (llvm::json::isUTF8(s))
    return s;
  return llvm::json::fixUTF8(s);
}

/// JSON has no NaN or infinity: those become the strings "nan", "inf", "-inf".
llvm::json::Value jsonDouble(double value) {
  if (std::isfinite(value))
    return value;
  return formatAttrDouble(value);
}

llvm::json::Array jsonShape(const std::vector<int64_t> &shape) {
  llvm::json::Array array;
  for (int64_t dim : shape)
    array.push_back(dim);
  return array;
}

llvm::json::Value jsonAttrValue(const AttrValue &value) {
  if (auto *i = std::get_if<int64_t>(&value))
    return *i;
  if (auto *f = std::get_if<double>(&value))
    return jsonDouble(*f);
  if (auto *s = std::get_if<std::string>(&value))
    return jsonString(*s);
  llvm::json::Array array;
  if (auto *is = std::get_if<std::vector<int64_t>>(&value)) {
    for (int64_t i : *is)
      array.push_back(i);
  } else {
    for (double f : std::get<std::vector<double>>(value))
      array.push_back(jsonDouble(f));
  }
  return array;
}

llvm::json::Object jsonParameter(const ParameterDesc &param) {
  llvm::json::Object object{
      {"name", jsonString(param.name)},
      {"dtype", dtypeSpelling(param.dtype)},
      {"shape", jsonShape(param.shape)},
      {"trainable", param.trainable},
      {"init", initKindName(param.init)},
  };
  if (param.init == InitKind::Normal || param.init == InitKind::Uniform)
    object["initScale"] = jsonDouble(param.initScale);
  if (param.init == InitKind::Data)
    object["dataBytes"] = static_cast<uint64_t>(param.data.size());
  object["sharding"] = jsonSharding(param.sharding);
  return object;
}

llvm::json::Array jsonIOBindings(const RankProgram &program,
                                 const std::vector<IOBinding> &bindings) {
  llvm::json::Array array;
  for (const IOBinding &binding : bindings) {
    llvm::json::Object object{{"name", jsonString(binding.name)},
                              {"buffer", binding.buffer}};
    if (binding.buffer < program.buffers.size()) {
      const BufferDesc &buffer = program.buffers[binding.buffer];
      object["dtype"] = dtypeSpelling(buffer.dtype);
      object["shape"] = jsonShape(buffer.shape);
    }
    if (!binding.globalShape.empty()) {
      object["globalShape"] = jsonShape(binding.globalShape);
      object["sharding"] = jsonSharding(binding.sharding);
    }
    if (binding.rowGroups > 1)
      object["rowGroups"] = binding.rowGroups;
    array.push_back(std::move(object));
  }
  return array;
}

llvm::json::Object jsonRank(const Executable &exe, const RankProgram &program,
                            const FusedIndex &fused) {
  llvm::json::Array params;
  for (const ParamBinding &binding : program.params) {
    llvm::json::Object object{{"parameter", binding.parameter},
                              {"buffer", binding.buffer}};
    if (binding.parameter < exe.parameters.size())
      for (auto &field : jsonParameter(exe.parameters[binding.parameter]))
        object[field.first] = std::move(field.second);
    params.push_back(std::move(object));
  }

  llvm::json::Array buffers;
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    const BufferDesc &buffer = program.buffers[b];
    llvm::json::Object object{
        {"index", static_cast<uint64_t>(b)},
        {"name", jsonString(buffer.name)},
        {"arena", arenaKindName(buffer.arena)},
        {"offset", buffer.offset},
        {"dtype", dtypeSpelling(buffer.dtype)},
        {"shape", jsonShape(buffer.shape)},
        {"category", memoryCategoryName(buffer.category)},
    };
    if (buffer.microbatch >= 0)
      object["microbatch"] = int64_t(buffer.microbatch);
    uint64_t bytes = buffer.sizeInBytes();
    object["bytes"] = bytes == kInvalidSize ? llvm::json::Value(nullptr)
                                            : llvm::json::Value(bytes);
    buffers.push_back(std::move(object));
  }

  MemoryPlanSummary plan = summarizeMemoryPlan(program);
  llvm::json::Object memoryPlan{
      {"persistentArenaBytes", plan.persistentArenaBytes},
      {"scratchArenaBytes", plan.scratchArenaBytes},
      {"scratchWithoutReuseBytes", plan.scratchWithoutReuseBytes},
      {"scratchAllocations", static_cast<uint64_t>(plan.scratchAllocations)},
  };
  MemoryBreakdown memory = summarizeMemory(exe, program);
  llvm::json::Object atPeak;
  for (const auto &[category, bytes] : memory.byCategory)
    atPeak[memoryCategoryName(category)] = bytes;
  llvm::json::Object activations;
  for (const auto &[mb, bytes] : memory.activationsByMicrobatch)
    activations[mb < 0 ? std::string("shared") : std::to_string(mb)] = bytes;
  memoryPlan["trainableParameterBytes"] = memory.trainableBytes;
  memoryPlan["updatedStateBytes"] = memory.updatedBytes;
  memoryPlan["constantBytes"] = memory.constantBytes;
  memoryPlan["scratchPeakInstruction"] = memory.peakInstruction;
  memoryPlan["scratchLiveAtPeakBytes"] = memory.liveAtPeak;
  memoryPlan["scratchAtPeakByCategory"] = std::move(atPeak);
  memoryPlan["activationsAtPeakByMicrobatch"] = std::move(activations);
  DeviceMemoryPrediction gpu = predictCudaMemory(program);
  memoryPlan["cudaPredictedBytes"] = gpu.total();
  memoryPlan["cudaPrediction"] = llvm::json::Object{{"arenaBytes", gpu.arenaBytes},
                                                    {"workspaceBytes", gpu.workspaceBytes},
                                                    {"librariesBytes", gpu.librariesBytes},
                                                    {"communicationBytes", gpu.communicationBytes},
                                                    {"poolBytes", gpu.poolBytes},
                                                    {"contextBytes", gpu.contextBytes}};

  llvm::json::Array streams;
  for (const std::string &stream : program.streams)
    streams.push_back(jsonString(stream));

  llvm::json::Array instructions;
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction &instr = program.instructions[i];
    llvm::json::Object object{
        {"index", static_cast<uint64_t>(i)},
        {"kind", instrKindName(instr.kind)},
        {"stream", instr.stream},
        {"streamName", jsonString(streamLabel(program, instr.stream))},
    };
    if (instr.kind == InstrKind::Kernel)
      object["kernel"] = jsonString(instr.kernel);
    if (instr.kind == InstrKind::RecordEvent ||
        instr.kind == InstrKind::WaitEvent)
      object["event"] = instr.event;
    if (instr.kind == InstrKind::Collective) {
      const CollectiveDesc &c = instr.collective;
      llvm::json::Array axes;
      for (const std::string &axis : c.axes)
        axes.push_back(jsonString(axis));
      llvm::json::Object collective{{"kind", collectiveKindName(c.kind)},
                                    {"axes", std::move(axes)}};
      if (c.kind == CollectiveKind::AllReduce || c.kind == CollectiveKind::ReduceScatter)
        collective["reduce"] = reduceOpName(c.reduce);
      if (c.kind == CollectiveKind::AllGather || c.kind == CollectiveKind::ReduceScatter)
        collective["dim"] = c.dim;
      if (c.kind == CollectiveKind::AllToAll) {
        collective["splitDim"] = c.splitDim;
        collective["concatDim"] = c.concatDim;
      }
      if (c.kind == CollectiveKind::Broadcast)
        collective["root"] = c.root;
      if (c.kind == CollectiveKind::Send || c.kind == CollectiveKind::Recv)
        collective["peer"] = c.peer;
      if (c.kind == CollectiveKind::Exchange) {
        collective["sendPeers"] = llvm::json::Array(c.sendPeers);
        collective["recvPeers"] = llvm::json::Array(c.recvPeers);
      }
      object["collective"] = std::move(collective);
    }
    object["inputs"] = llvm::json::Array(instr.inputs);
    object["outputs"] = llvm::json::Array(instr.outputs);
    llvm::json::Array attrs;
    for (const NamedAttr &attr : instr.attrs)
      attrs.push_back(llvm::json::Object{{"name", jsonString(attr.name)},
                                         {"type", attrTypeName(attr.value)},
                                         {"value", jsonAttrValue(attr.value)}});
    object["attrs"] = std::move(attrs);
    for (const NamedAttr &attr : instr.attrs)
      if (int64_t number = fusedNumber(fused, instr, attr); number >= 0)
        object["fusedKernel"] = number;
    if (!instr.location.empty())
      object["location"] = jsonString(instr.location);
    if (instr.refresh)
      object["refresh"] = true;
    instructions.push_back(std::move(object));
  }

  return llvm::json::Object{
      {"rank", program.rank},
      {"inputs", jsonIOBindings(program, program.inputs)},
      {"outputs", jsonIOBindings(program, program.outputs)},
      {"parameters", std::move(params)},
      {"buffers", std::move(buffers)},
      {"memoryPlan", std::move(memoryPlan)},
      {"streams", std::move(streams)},
      {"numEvents", program.numEvents},
      // Each instruction runs once per step: what a step launches. A
      // refresh instruction runs only after the parameters are set.
      {"callsPerStep", int64_t(program.instructions.size() -
                               std::count_if(program.instructions.begin(),
                                             program.instructions.end(),
                                             [](const Instruction &i) {
                                               return i.kind == InstrKind::RecordEvent ||
                                                      i.kind == InstrKind::WaitEvent ||
                                                      i.refresh;
                                             }))},
      {"refreshCalls", int64_t(std::count_if(program.instructions.begin(),
                                             program.instructions.end(),
                                             [](const Instruction &i) { return i.refresh; }))},
      {"instructions", std::move(instructions)},
  };
}

void printSignature(const RankProgram &program, const char *title,
                    const std::vector<IOBinding> &bindings,
                    llvm::raw_ostream &os) {
  os << "  " << title << " (" << bindings.size() << "):\n";
  for (const IOBinding &binding : bindings)
  {
    os << "    " << binding.name << ": b" << binding.buffer << " "
       << bufferType(program, binding.buffer);
    if (!binding.globalShape.empty())
      os << ", block of global ["
         << llvm::join(llvm::map_range(binding.globalShape,
                                       [](int64_t d) { return std::to_string(d); }),
                       ", ")
         << "] " << formatSharding(binding.sharding);
    if (binding.rowGroups > 1)
      os << ", rows in " << binding.rowGroups
         << " row groups (microbatches), each split over the blocks";
    os << "\n";
  }
}

void printBuffers(const RankProgram &program, llvm::raw_ostream &os) {
  os << "  buffers (" << program.buffers.size() << "):\n";
  if (program.buffers.empty())
    return;
  std::vector<std::string> offsets, sizes, types;
  size_t indexWidth = 1, offsetWidth = 6, sizeWidth = 5, typeWidth = 4;
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    const BufferDesc &buffer = program.buffers[b];
    offsets.push_back(std::to_string(buffer.offset));
    uint64_t bytes = buffer.sizeInBytes();
    sizes.push_back(bytes == kInvalidSize ? "invalid" : std::to_string(bytes));
    types.push_back(formatTensorType(buffer.dtype, buffer.shape));
    indexWidth = std::max(indexWidth, std::to_string(b).size() + 1);
    offsetWidth = std::max(offsetWidth, offsets.back().size());
    sizeWidth = std::max(sizeWidth, sizes.back().size());
    typeWidth = std::max(typeWidth, types.back().size());
  }
  os << "    " << llvm::right_justify("#", indexWidth) << "  "
     << llvm::left_justify("arena", 10) << "  "
     << llvm::right_justify("offset", offsetWidth) << "  "
     << llvm::right_justify("bytes", sizeWidth) << "  "
     << llvm::left_justify("type", typeWidth) << "  name\n";
  for (size_t b = 0; b < program.buffers.size(); ++b)
    os << "    " << llvm::right_justify("b" + std::to_string(b), indexWidth)
       << "  "
       << llvm::left_justify(arenaKindName(program.buffers[b].arena), 10)
       << "  " << llvm::right_justify(offsets[b], offsetWidth) << "  "
       << llvm::right_justify(sizes[b], sizeWidth) << "  "
       << llvm::left_justify(types[b], typeWidth) << "  "
       << program.buffers[b].name << "\n";
}

void printRank(const Executable &exe, const RankProgram &program, const FusedIndex &fused,
               llvm::raw_ostream &os) {
  os << "\nrank " << program.rank << ":\n";
  printSignature(program, "inputs", program.inputs, os);
  printSignature(program, "outputs", program.outputs, os);

  os << "  parameters (" << program.params.size() << "):\n";
  for (const ParamBinding &binding : program.params) {
    os << "    p" << binding.parameter;
    if (binding.parameter < exe.parameters.size()) {
      const ParameterDesc &param = exe.parameters[binding.parameter];
      os << " " << param.name << " -> b" << binding.buffer << ": "
         << describeParameter(param);
    } else {
      os << " <no such parameter> -> b" << binding.buffer;
    }
    os << "\n";
  }

  size_t numCollectives = 0;
  for (const Instruction &instr : program.instructions)
    numCollectives += instr.kind == InstrKind::Collective;
  if (numCollectives > 0) {
    os << "  collectives (" << numCollectives << "):\n";
    for (size_t i = 0; i < program.instructions.size(); ++i) {
      const Instruction &instr = program.instructions[i];
      if (instr.kind != InstrKind::Collective)
        continue;
      os << "    #" << i << " [" << streamLabel(program, instr.stream) << "] "
         << formatCollective(instr.collective);
      if (instr.collective.kind == CollectiveKind::Exchange) {
        os << ": " << formatExchangeTransfers(exe, program, instr, true) << "\n";
        continue;
      }
      if (instr.inputs.size() > 1) { // a bucket: its tensors and their bytes
        uint64_t bytes = 0;
        for (uint32_t b : instr.inputs)
          if (b < program.buffers.size())
            bytes += program.buffers[b].sizeInBytes();
        os << ": bucket of " << instr.inputs.size() << " tensors, " << bytes << " bytes:";
        for (size_t k = 0; k < instr.inputs.size(); ++k) {
          os << (k ? ", " : " ") << bufferType(program, instr.inputs[k]);
          if (k < instr.outputs.size())
            os << " -> " << bufferType(program, instr.outputs[k]);
        }
        os << "\n";
        continue;
      }
      if (!instr.inputs.empty())
        os << " " << bufferType(program, instr.inputs[0]);
      if (!instr.outputs.empty())
        os << " -> " << bufferType(program, instr.outputs[0]);
      os << "\n";
    }
  }

  printBuffers(program, os);

  MemoryPlanSummary plan = summarizeMemoryPlan(program);
  os << "  memory plan:\n"
     << "    persistent arena:      " << formatBytes(plan.persistentArenaBytes)
     << "\n"
     << "    scratch arena (peak):  " << formatBytes(plan.scratchArenaBytes)
     << "\n";
  if (uint64_t host = program.arenaSize[static_cast<int>(ArenaKind::Host)])
    os << "    host arena:            " << formatBytes(host)
       << " (offloaded activations, pinned host memory on a GPU)\n";
  os
     << "    scratch without reuse: "
     << formatBytes(plan.scratchWithoutReuseBytes) << " in "
     << plan.scratchAllocations
     << (plan.scratchAllocations == 1 ? " allocation" : " allocations");
  if (plan.scratchWithoutReuseBytes > 0 &&
      plan.scratchWithoutReuseBytes != kInvalidSize &&
      plan.scratchArenaBytes <= plan.scratchWithoutReuseBytes) {
    double saved = 100.0 * static_cast<double>(plan.scratchWithoutReuseBytes -
                                               plan.scratchArenaBytes) /
                   static_cast<double>(plan.scratchWithoutReuseBytes);
    os << llvm::format(" (reuse saves %.1f%%)", saved);
  }
  os << "\n";
  printMemoryBreakdown(exe, program, os);
  os << "  streams (" << program.streams.size() << "):";
  for (size_t s = 0; s < program.streams.size(); ++s)
    os << (s ? ", s" : " s") << s << " " << program.streams[s];
  os << "\n  events: " << program.numEvents << "\n";

  // What a step launches: each instruction runs once per step.
  {
    size_t kernels = 0, copies = 0, collectives = 0, refreshes = 0;
    std::map<std::string, size_t> byKernel;
    for (const Instruction &instr : program.instructions) {
      if (instr.refresh) {
        ++refreshes;
      } else if (instr.kind == InstrKind::Kernel) {
        ++kernels;
        ++byKernel[instr.kernel];
      } else if (instr.kind == InstrKind::Copy) {
        ++copies;
      } else if (instr.kind == InstrKind::Collective) {
        ++collectives;
      }
    }
    std::vector<std::pair<std::string, size_t>> most(byKernel.begin(), byKernel.end());
    std::stable_sort(most.begin(), most.end(),
                     [](const auto &a, const auto &b) { return a.second > b.second; });
    os << "  calls per step: " << kernels + copies + collectives << " (" << kernels
       << " kernels, " << copies << " copies, " << collectives << " collectives)";
    for (size_t i = 0; i < most.size() && i < 6; ++i)
      os << (i ? ", " : "; most: ") << most[i].first << " " << most[i].second;
    os << "\n";
    if (refreshes)
      os << "  refresh calls: " << refreshes
         << " (only in the first step after the parameters are set)\n";
  }

  os << "  instructions (" << program.instructions.size() << "):\n";
  size_t width = std::to_string(program.instructions.size()).size();
  for (size_t i = 0; i < program.instructions.size(); ++i)
    os << "  " << llvm::right_justify(std::to_string(i), width) << " "
       << formatInstruction(exe, program, program.instructions[i], fused) << "\n";
}

} // namespace

std::string dtypeSpelling(DType dtype) {
  if (static_cast<int>(dtype) >= kNumDTypes)
    return "dtype(" + std::to_string(static_cast<int>(dtype)) + ")";
  return std::string(dtypeName(dtype));
}

std::string formatTensorType(DType dtype, const std::vector<int64_t> &shape) {
  std::string text = dtypeSpelling(dtype) + "[";
  for (size_t d = 0; d < shape.size(); ++d)
    text += (d ? ", " : "") + std::to_string(shape[d]);
  return text + "]";
}

std::string arenaKindName(ArenaKind kind) {
  switch (kind) {
  case ArenaKind::Persistent:
    return "persistent";
  case ArenaKind::Scratch:
    return "scratch";
  case ArenaKind::Host:
    return "host";
  }
  return "arena(" + std::to_string(static_cast<int>(kind)) + ")";
}

std::string instrKindName(InstrKind kind) {
  switch (kind) {
  case InstrKind::Kernel:
    return "kernel";
  case InstrKind::Copy:
    return "copy";
  case InstrKind::RecordEvent:
    return "record_event";
  case InstrKind::WaitEvent:
    return "wait_event";
  case InstrKind::Collective:
    return "collective";
  }
  return "instruction_kind(" + std::to_string(static_cast<int>(kind)) + ")";
}

std::string initKindName(InitKind kind) {
  switch (kind) {
  case InitKind::Zeros:
    return "zeros";
  case InitKind::Ones:
    return "ones";
  case InitKind::Normal:
    return "normal";
  case InitKind::Uniform:
    return "uniform";
  case InitKind::Data:
    return "data";
  }
  return "init_kind(" + std::to_string(static_cast<int>(kind)) + ")";
}

MemoryPlanSummary summarizeMemoryPlan(const RankProgram &program) {
  MemoryPlanSummary plan;
  plan.persistentArenaBytes =
      program.arenaSize[static_cast<int>(ArenaKind::Persistent)];
  plan.scratchArenaBytes =
      program.arenaSize[static_cast<int>(ArenaKind::Scratch)];
  // Views (reshapes) share their target's bytes: only buffers of their own
  // would each need memory without reuse.
  for (const BufferDesc &buffer : program.buffers) {
    uint64_t bytes = buffer.sizeInBytes();
    if (buffer.arena != ArenaKind::Scratch || buffer.aliasOf != -1 ||
        bytes == kInvalidSize)
      continue;
    plan.scratchWithoutReuseBytes = saturatingAdd(plan.scratchWithoutReuseBytes, bytes);
    ++plan.scratchAllocations;
  }
  return plan;
}

MemoryBreakdown summarizeMemory(const Executable &exe, const RankProgram &program) {
  MemoryBreakdown out;
  const size_t numBuffers = program.buffers.size();
  auto rootOf = [&](uint32_t b) -> uint32_t {
    int64_t alias = program.buffers[b].aliasOf;
    return alias >= 0 && uint64_t(alias) < numBuffers ? uint32_t(alias) : b;
  };
  // Persistent: parameters by role.
  std::vector<bool> written(numBuffers, false);
  for (const Instruction &instr : program.instructions)
    for (uint32_t b : instr.outputs)
      if (b < numBuffers)
        written[rootOf(b)] = true;
  for (const ParamBinding &binding : program.params) {
    if (binding.buffer >= numBuffers || binding.parameter >= exe.parameters.size())
      continue;
    uint64_t bytes = program.buffers[binding.buffer].sizeInBytes();
    if (bytes == kInvalidSize)
      continue;
    if (exe.parameters[binding.parameter].trainable)
      out.trainableBytes += bytes;
    else if (written[rootOf(binding.buffer)])
      out.updatedBytes += bytes;
    else
      out.constantBytes += bytes;
  }
  // Scratch: each buffer of its own, live from its first to its last use.
  const int64_t n = int64_t(program.instructions.size());
  std::vector<int64_t> first(numBuffers, -1), last(numBuffers, -1);
  auto use = [&](uint32_t b, int64_t i) {
    if (b >= numBuffers)
      return;
    uint32_t root = rootOf(b);
    if (first[root] < 0)
      first[root] = i;
    last[root] = std::max(last[root], i);
  };
  for (const IOBinding &input : program.inputs)
    use(input.buffer, 0);
  for (int64_t i = 0; i < n; ++i) {
    for (uint32_t b : program.instructions[i].inputs)
      use(b, i);
    for (uint32_t b : program.instructions[i].outputs)
      use(b, i);
  }
  for (const IOBinding &output : program.outputs)
    use(output.buffer, std::max<int64_t>(n - 1, 0));
  // Inputs and outputs count as used at instruction 0 even in a program of
  // none, so there is always a slot past the last use.
  const size_t slots = size_t(std::max<int64_t>(n, 1)) + 1;
  std::vector<int64_t> delta(slots, 0), activationDelta(slots, 0);
  for (size_t b = 0; b < numBuffers; ++b) {
    const BufferDesc &buffer = program.buffers[b];
    uint64_t bytes = buffer.sizeInBytes();
    if (buffer.arena != ArenaKind::Scratch || buffer.aliasOf != -1 || first[b] < 0 ||
        bytes == kInvalidSize)
      continue;
    delta[first[b]] += int64_t(bytes);
    delta[last[b] + 1] -= int64_t(bytes);
    if (buffer.category == MemoryCategory::Activation) {
      activationDelta[first[b]] += int64_t(bytes);
      activationDelta[last[b] + 1] -= int64_t(bytes);
    }
  }
  int64_t live = 0, best = -1, liveActivations = 0;
  for (int64_t i = 0; i < n; ++i) {
    live += delta[i];
    liveActivations += activationDelta[i];
    if (uint64_t(liveActivations) > out.activationPeak) {
      out.activationPeak = uint64_t(liveActivations);
      out.liveAtActivationPeak = uint64_t(live);
    }
    if (best < 0 || uint64_t(live) > out.liveAtPeak) {
      best = i;
      out.liveAtPeak = uint64_t(live);
    }
  }
  out.peakInstruction = best;
  if (best < 0)
    return out;
  for (size_t b = 0; b < numBuffers; ++b) {
    const BufferDesc &buffer = program.buffers[b];
    if (buffer.arena != ArenaKind::Scratch || buffer.aliasOf != -1 || first[b] < 0 ||
        first[b] > best || last[b] < best)
      continue;
    uint64_t bytes = buffer.sizeInBytes();
    out.byCategory[buffer.category] += bytes;
    if (buffer.category == MemoryCategory::Activation)
      out.activationsByMicrobatch[buffer.microbatch] += bytes;
  }
  return out;
}

DeviceMemoryPrediction predictCudaMemory(const RankProgram &program) {
  // Measured with loom-run's "device memory" report on an H200 (CUDA 13,
  // cuDNN 9), the 0.95B Llama at batch 4 and 8 x 2048 tokens.
  constexpr uint64_t kPage = uint64_t(2) << 20;
  DeviceMemoryPrediction out;
  for (ArenaKind a : {ArenaKind::Persistent, ArenaKind::Scratch})
    out.arenaBytes +=
        (program.arenaSize[static_cast<int>(a)] + kPage - 1) / kPage * kPage;
  out.hostBytes = program.arenaSize[static_cast<int>(ArenaKind::Host)];
  // cuBLASLt's workspace: one per stream that launches kernels (GEMMs on
  // two streams at once must not share one).
  std::set<uint32_t> kernelStreams;
  for (const Instruction &instr : program.instructions)
    if (instr.kind == InstrKind::Kernel)
      kernelStreams.insert(instr.stream);
  out.workspaceBytes = (uint64_t(32) << 20) * std::max<uint64_t>(1, kernelStreams.size());
  out.librariesBytes = uint64_t(128) << 20;
  // NCCL's own buffers (its channels to each peer), on a rank with any
  // collective or exchange: measured with two ranks of one process on two
  // H200s, 0.32-0.39 GiB beyond the rest.
  if (llvm::any_of(program.instructions,
                   [](const Instruction &i) { return i.kind == InstrKind::Collective; }))
    out.communicationBytes = uint64_t(320) << 20;
  out.contextBytes = uint64_t(512) << 20;
  // cuDNN's attention takes its statistics and workspace (an f32
  // accumulator of the query's size, in the backward) from the pool, which
  // keeps its peak: about two f32 copies of the largest query.
  for (const Instruction &instr : program.instructions) {
    if (instr.kind != InstrKind::Kernel || instr.inputs.empty() ||
        !llvm::StringRef(instr.kernel).starts_with("nn.attention"))
      continue;
    const BufferDesc &q = program.buffers[instr.inputs[0]];
    uint64_t elements = 1;
    for (int64_t d : q.shape)
      elements *= uint64_t(std::max<int64_t>(d, 0));
    out.poolBytes = std::max(out.poolBytes, 2 * elements * sizeof(float));
  }
  return out;
}

void printMemoryBreakdown(const Executable &exe, const RankProgram &program,
                          llvm::raw_ostream &os) {
  MemoryBreakdown memory = summarizeMemory(exe, program);
  os << "  memory by what it holds:\n"
     << "    persistent: trainable parameters " << formatBytes(memory.trainableBytes)
     << ", state the step updates (optimizer moments, weight copies) "
     << formatBytes(memory.updatedBytes) << ", constants " << formatBytes(memory.constantBytes)
     << "\n";
  if (memory.peakInstruction >= 0) {
    os << "    scratch at its peak (instruction #" << memory.peakInstruction << " of "
       << program.instructions.size() << "): " << formatBytes(memory.liveAtPeak)
       << " live\n";
    for (const auto &[category, bytes] : memory.byCategory) {
      os << "      " << memoryCategoryName(category) << ": " << formatBytes(bytes);
      if (category == MemoryCategory::Activation && memory.activationsByMicrobatch.size() > 1) {
        os << " (";
        bool firstEntry = true;
        for (const auto &[mb, mbBytes] : memory.activationsByMicrobatch) {
          os << (firstEntry ? "" : ", ")
             << (mb < 0 ? std::string("shared") : "microbatch " + std::to_string(mb)) << " "
             << formatBytes(mbBytes);
          firstEntry = false;
        }
        os << ")";
      }
      os << "\n";
    }
  }
  DeviceMemoryPrediction gpu = predictCudaMemory(program);
  os << "    on a GPU (--backend=cuda): " << formatBytes(gpu.total())
     << " beyond the CUDA context: arenas " << formatBytes(gpu.arenaBytes)
     << ", cuBLASLt workspace " << formatBytes(gpu.workspaceBytes)
     << ", kernel images and library handles " << formatBytes(gpu.librariesBytes)
     << (gpu.communicationBytes
             ? ", communication buffers (NCCL) " + formatBytes(gpu.communicationBytes)
             : std::string())
     << ", attention scratch " << formatBytes(gpu.poolBytes) << "; the context about "
     << formatBytes(gpu.contextBytes) << "\n";
}

void printExecutable(const Executable &exe, llvm::raw_ostream &os,
                     llvm::StringRef scheduleSummary) {
  os << "Loom executable, format version " << exe.formatVersion << "\n"
     << "  model:         " << exe.modelName << "\n"
     << "  mode:          " << exe.mode << "\n"
     << "  compile flags: " << exe.compileFlags << "\n"
     << "  ranks:         " << exe.ranks.size() << "\n";
  if (!exe.mesh.axes.empty()) {
    os << "  mesh:          ";
    for (size_t a = 0; a < exe.mesh.axes.size(); ++a)
      os << (a ? " x " : "") << exe.mesh.axes[a] << "="
         << (a < exe.mesh.shape.size() ? std::to_string(exe.mesh.shape[a]) : "?");
    os << "\n";
  }
  if (!exe.scheduleCsv.empty()) {
    os << "  schedule:      ";
    if (!scheduleSummary.empty())
      os << scheduleSummary;
    else
      os << "pipeline schedule CSV, " << formatBytes(exe.scheduleCsv.size());
    os << "\n";
  }

  uint64_t parameterBytes = 0;
  for (const ParameterDesc &param : exe.parameters) {
    BufferDesc asBuffer;
    asBuffer.dtype = param.dtype;
    asBuffer.shape = param.shape;
    parameterBytes = saturatingAdd(parameterBytes, asBuffer.sizeInBytes());
  }
  os << "\nparameters (" << exe.parameters.size() << ", "
     << formatBytes(parameterBytes) << "):\n";
  for (size_t p = 0; p < exe.parameters.size(); ++p)
    os << "  p" << p << " " << exe.parameters[p].name << ": "
       << describeParameter(exe.parameters[p]) << "\n";

  std::vector<FusedKernelUse> fusedKernels = listFusedKernels(exe);
  if (!fusedKernels.empty()) {
    os << "\nfused kernels (" << fusedKernels.size()
       << ", each one generated CUDA kernel; loom-inspect --fused-source=N prints fN's):\n";
    for (size_t k = 0; k < fusedKernels.size(); ++k) {
      llvm::Expected<FusedBody> body = parseFusedBody(fusedKernels[k].body);
      std::string what = body ? describeFusedBody(*body)
                              : "unreadable body (" + llvm::toString(body.takeError()) + ")";
      os << "  f" << k << ": " << what << " (" << fusedKernels[k].calls
         << (fusedKernels[k].calls == 1 ? " call" : " calls") << ")\n"
         << "      " << fusedKernels[k].body << "\n";
    }
  }

  FusedIndex fused = fusedIndexOf(exe);
  for (const RankProgram &program : exe.ranks)
    printRank(exe, program, fused, os);
}

std::vector<FusedKernelUse> listFusedKernels(const Executable &exe) {
  std::vector<FusedKernelUse> kernels;
  std::map<std::string, size_t> seen;
  const std::string_view fused = kernelName(KernelId::Fused);
  for (const RankProgram &program : exe.ranks)
    for (const Instruction &instr : program.instructions) {
      if (instr.kind != InstrKind::Kernel || instr.kernel != fused)
        continue;
      for (const NamedAttr &attr : instr.attrs) {
        const std::string *text = std::get_if<std::string>(&attr.value);
        if (attr.name != "body" || !text)
          continue;
        auto [it, fresh] = seen.emplace(*text, kernels.size());
        if (fresh)
          kernels.push_back({*text, 0});
        ++kernels[it->second].calls;
      }
    }
  return kernels;
}

llvm::json::Value executableToJson(const Executable &exe) {
  llvm::json::Array parameters;
  for (size_t p = 0; p < exe.parameters.size(); ++p) {
    llvm::json::Object object = jsonParameter(exe.parameters[p]);
    object["index"] = static_cast<uint64_t>(p);
    parameters.push_back(std::move(object));
  }
  FusedIndex fused = fusedIndexOf(exe);
  llvm::json::Array ranks;
  for (const RankProgram &program : exe.ranks)
    ranks.push_back(jsonRank(exe, program, fused));
  llvm::json::Array fusedKernels;
  std::vector<FusedKernelUse> uses = listFusedKernels(exe);
  for (size_t k = 0; k < uses.size(); ++k) {
    llvm::Expected<FusedBody> body = parseFusedBody(uses[k].body);
    llvm::json::Object object{{"index", static_cast<uint64_t>(k)},
                              {"body", jsonString(uses[k].body)},
                              {"calls", static_cast<uint64_t>(uses[k].calls)}};
    if (body) {
      llvm::json::Array members, outputs;
      for (const FusedStep &step : body->steps)
        members.push_back(std::string(kernelName(step.kernel)));
      for (uint32_t y : body->yields)
        outputs.push_back(formatFusedType(body->steps[y].result));
      object["members"] = std::move(members);
      object["outputs"] = std::move(outputs);
    } else {
      object["error"] = jsonString(llvm::toString(body.takeError()));
    }
    fusedKernels.push_back(std::move(object));
  }
  llvm::json::Array meshAxes;
  for (const std::string &axis : exe.mesh.axes)
    meshAxes.push_back(jsonString(axis));
  llvm::json::Object mesh{{"axes", std::move(meshAxes)},
                          {"shape", jsonShape(exe.mesh.shape)}};
  return llvm::json::Object{
      {"formatVersion", exe.formatVersion},
      {"model", jsonString(exe.modelName)},
      {"mode", jsonString(exe.mode)},
      {"compileFlags", jsonString(exe.compileFlags)},
      {"mesh", std::move(mesh)},
      {"scheduleCsv", exe.scheduleCsv.empty() ? llvm::json::Value(nullptr)
                                              : jsonString(exe.scheduleCsv)},
      {"parameters", std::move(parameters)},
      {"fusedKernels", std::move(fusedKernels)},
      {"ranks", std::move(ranks)},
  };
}

} // namespace loom
