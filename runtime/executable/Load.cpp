// flatbuffers bytes -> Executable, and the .loomx file operations. Bytes are
// untrusted: the flatbuffers verifier runs before any field is read, the
// conversion bounds how much memory shared data may expand into, and
// verifyExecutable runs before the result is returned.

#include "runtime/executable/Executable.h"
#include "runtime/schema/executable_generated.h"

#include "runtime/support/AtomicFile.h"
#include "runtime/support/Crc32c.h"
#include "runtime/support/UserFile.h"

#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <memory>
#include <random>
#include <type_traits>
#include <unistd.h>

namespace loom {

namespace {

// flatbuffers stores little-endian scalars; vectors are copied as raw bytes.
static_assert(FLATBUFFERS_LITTLEENDIAN, "Loom's loader assumes a little-endian host");

constexpr size_t kIdentifierEnd = 8; // root offset (4 bytes) + "LOOM"

llvm::Error failure(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Converts a verified flatbuffer. A verified buffer can still point many
/// offsets at one vector or string (a DAG); `payloadBudget` stops such a file
/// from expanding into far more memory than its size.
class Converter {
public:
  explicit Converter(size_t fileSize)
      : payloadBudget(8 * static_cast<uint64_t>(fileSize) + (1u << 20)) {}

  llvm::Expected<Executable> run(const fb::Executable &root) {
    Executable exe;
    exe.formatVersion = root.format_version();
    exe.modelName = string(root.model_name());
    exe.mode = string(root.mode());
    exe.compileFlags = string(root.compile_flags());
    if (const auto *axes = root.mesh_axes())
      for (const flatbuffers::String *axis : *axes)
        exe.mesh.axes.push_back(string(axis));
    exe.mesh.shape = vector(root.mesh_shape());
    exe.scheduleCsv = string(root.schedule_csv());
    exe.vocabSize = root.vocab_size();
    if (const auto *parameters = root.parameters()) {
      exe.parameters.reserve(parameters->size());
      for (const fb::Parameter *param : *parameters)
        exe.parameters.push_back(parameter(param));
    }
    if (const auto *ranks = root.ranks()) {
      exe.ranks.reserve(ranks->size());
      for (const fb::RankProgram *rank : *ranks) {
        auto program = rankProgram(rank);
        if (!program)
          return program.takeError();
        exe.ranks.push_back(std::move(*program));
      }
    }
    if (overBudget)
      return failure("malformed Loom executable (shared data would expand "
                     "past 8x the file size)");
    return exe;
  }

private:
  bool charge(uint64_t bytes) {
    if (bytes > payloadBudget) {
      overBudget = true;
      payloadBudget = 0;
      return false;
    }
    payloadBudget -= bytes;
    return true;
  }

  std::string string(const flatbuffers::String *s) {
    if (!s || !charge(s->size()))
      return {};
    return s->str();
  }

  /// The verifier checks a vector's length prefix for 4-byte alignment only,
  /// so 8-byte elements may sit misaligned in a damaged file: copy bytes
  /// instead of loading elements in place.
  template <typename T>
  std::vector<T> vector(const flatbuffers::Vector<T> *v) {
    static_assert(std::is_arithmetic_v<T>);
    if (!v || !charge(static_cast<uint64_t>(v->size()) * sizeof(T)))
      return {};
    std::vector<T> result(v->size());
    if (!result.empty())
      std::memcpy(result.data(), v->Data(), result.size() * sizeof(T));
    return result;
  }

  Sharding sharding(
      const flatbuffers::Vector<flatbuffers::Offset<fb::DimSharding>> *dims) {
    Sharding result;
    if (!dims)
      return result;
    for (const fb::DimSharding *dim : *dims) {
      std::vector<std::string> axes;
      if (dim && dim->axes())
        for (const flatbuffers::String *axis : *dim->axes())
          axes.push_back(string(axis));
      result.push_back(std::move(axes));
    }
    return result;
  }

  ParameterDesc parameter(const fb::Parameter *param) {
    ParameterDesc desc;
    if (!param)
      return desc;
    desc.name = string(param->name());
    desc.dtype = static_cast<DType>(param->dtype());
    desc.shape = vector(param->shape());
    desc.trainable = param->trainable();
    desc.init = static_cast<InitKind>(param->init());
    desc.initScale = param->init_scale();
    desc.data = vector(param->data());
    desc.sharding = sharding(param->sharding());
    return desc;
  }

  BufferDesc buffer(const fb::Buffer *buffer) {
    BufferDesc desc;
    if (!buffer)
      return desc;
    desc.name = string(buffer->name());
    desc.arena = static_cast<ArenaKind>(buffer->arena());
    desc.offset = buffer->offset();
    desc.dtype = static_cast<DType>(buffer->dtype());
    desc.shape = vector(buffer->shape());
    desc.aliasOf = buffer->alias_of();
    desc.category = static_cast<MemoryCategory>(buffer->category());
    desc.microbatch = buffer->microbatch();
    return desc;
  }

  llvm::Expected<AttrValue> attrValue(const fb::NamedAttr &attr) {
    switch (attr.value_type()) {
    case fb::AttrValue::IntAttr:
      if (const auto *value = attr.value_as_IntAttr())
        return AttrValue(value->value());
      break;
    case fb::AttrValue::FloatAttr:
      if (const auto *value = attr.value_as_FloatAttr())
        return AttrValue(value->value());
      break;
    case fb::AttrValue::StringAttr:
      if (const auto *value = attr.value_as_StringAttr())
        return AttrValue(string(value->value()));
      break;
    case fb::AttrValue::IntListAttr:
      if (const auto *value = attr.value_as_IntListAttr())
        return AttrValue(vector(value->values()));
      break;
    case fb::AttrValue::FloatListAttr:
      if (const auto *value = attr.value_as_FloatListAttr())
        return AttrValue(vector(value->values()));
      break;
    default:
      // The flatbuffers verifier accepts union types it does not know (for
      // forward compatibility); Loom has no use for them.
      return failure("has unknown value type " +
                     std::to_string(static_cast<int>(attr.value_type())));
    }
    return failure("has no value");
  }

  llvm::Expected<Instruction> instruction(const fb::Instruction *instr,
                                          uint32_t rank, size_t index) {
    Instruction result;
    if (!instr)
      return result;
    result.kind = static_cast<InstrKind>(instr->kind());
    result.kernel = string(instr->kernel());
    result.stream = instr->stream();
    result.event = instr->event();
    result.inputs = vector(instr->inputs());
    result.outputs = vector(instr->outputs());
    result.location = string(instr->location());
    result.refresh = instr->refresh();
    if (const fb::Collective *c = instr->collective()) {
      CollectiveDesc &desc = result.collective;
      desc.kind = static_cast<CollectiveKind>(c->kind());
      if (const auto *axes = c->axes())
        for (const flatbuffers::String *axis : *axes)
          desc.axes.push_back(string(axis));
      desc.reduce = static_cast<ReduceOp>(c->reduce());
      desc.dim = c->dim();
      desc.splitDim = c->split_dim();
      desc.concatDim = c->concat_dim();
      desc.root = c->root();
      desc.peer = c->peer();
      desc.sendPeers = vector(c->send_peers());
      desc.recvPeers = vector(c->recv_peers());
    }
    if (const auto *attrs = instr->attrs()) {
      result.attrs.reserve(attrs->size());
      for (const fb::NamedAttr *attr : *attrs) {
        NamedAttr named;
        if (!attr)
          return failure("rank " + std::to_string(rank) +
                         ", instruction " + std::to_string(index) +
                         ": null attribute");
        named.name = string(attr->name());
        auto value = attrValue(*attr);
        if (!value)
          return failure("rank " + std::to_string(rank) +
                         ", instruction " + std::to_string(index) + " (" +
                         result.kernel + "): attribute '" + named.name + "' " +
                         llvm::toString(value.takeError()));
        named.value = std::move(*value);
        result.attrs.push_back(std::move(named));
      }
    }
    return result;
  }

  std::vector<IOBinding>
  ioBindings(const flatbuffers::Vector<flatbuffers::Offset<fb::IOBinding>> *v) {
    std::vector<IOBinding> bindings;
    if (!v)
      return bindings;
    bindings.reserve(v->size());
    for (const fb::IOBinding *binding : *v) {
      IOBinding result;
      if (binding) {
        result.name = string(binding->name());
        result.buffer = binding->buffer();
        result.globalShape = vector(binding->global_shape());
        result.sharding = sharding(binding->sharding());
        result.rowGroups = binding->row_groups();
      }
      bindings.push_back(std::move(result));
    }
    return bindings;
  }

  llvm::Expected<RankProgram> rankProgram(const fb::RankProgram *program) {
    RankProgram result;
    if (!program)
      return result;
    result.rank = program->rank();
    result.arenaSize[static_cast<int>(ArenaKind::Persistent)] =
        program->persistent_arena_size();
    result.arenaSize[static_cast<int>(ArenaKind::Scratch)] =
        program->scratch_arena_size();
    result.arenaSize[static_cast<int>(ArenaKind::Host)] = program->host_arena_size();
    if (const auto *buffers = program->buffers()) {
      result.buffers.reserve(buffers->size());
      for (const fb::Buffer *desc : *buffers)
        result.buffers.push_back(buffer(desc));
    }
    if (const auto *streams = program->streams()) {
      result.streams.reserve(streams->size());
      for (const flatbuffers::String *name : *streams)
        result.streams.push_back(string(name));
    }
    result.numEvents = program->num_events();
    if (const auto *params = program->params()) {
      if (charge(static_cast<uint64_t>(params->size()) *
                 sizeof(ParamBinding))) {
        result.params.reserve(params->size());
        for (const fb::ParamBinding *binding : *params)
          result.params.push_back({binding->parameter(), binding->buffer()});
      }
    }
    result.inputs = ioBindings(program->inputs());
    result.outputs = ioBindings(program->outputs());
    if (const auto *instructions = program->instructions()) {
      result.instructions.reserve(instructions->size());
      for (size_t i = 0; i < instructions->size(); ++i) {
        auto instr = instruction(instructions->Get(i), result.rank, i);
        if (!instr)
          return instr.takeError();
        result.instructions.push_back(std::move(*instr));
      }
    }
    return result;
  }

  uint64_t payloadBudget;
  bool overBudget = false;
};

std::string quoted(const std::string &path) { return "'" + path + "'"; }

} // namespace

llvm::Expected<Executable> loadExecutable(const uint8_t *data, size_t size) {
  if (size < kIdentifierEnd)
    return failure("not a Loom executable (" + std::to_string(size) +
                   " bytes is too small for a header)");
  if (!fb::ExecutableBufferHasIdentifier(data))
    return failure("not a Loom executable (bad file identifier)");
  if (size >= FLATBUFFERS_MAX_BUFFER_SIZE)
    return failure("malformed Loom executable (" + std::to_string(size) +
                   " bytes exceeds the 2 GiB flatbuffers limit)");

  // flatbuffers reads scalars in place and checks alignment relative to the
  // buffer start, so the start itself must be aligned for the widest scalar.
  std::unique_ptr<uint64_t[]> alignedCopy;
  if (reinterpret_cast<uintptr_t>(data) % alignof(uint64_t) != 0) {
    alignedCopy.reset(new uint64_t[(size + 7) / 8]);
    std::memcpy(alignedCopy.get(), data, size);
    data = reinterpret_cast<const uint8_t *>(alignedCopy.get());
  }

  flatbuffers::Verifier::Options options;
  options.max_depth = 16; // the schema nests 5 tables deep
  // Each table occupies at least 4 bytes, so an honest file has at most
  // size/4; more means offsets revisit tables to amplify the work.
  options.max_tables = static_cast<flatbuffers::uoffset_t>(size / 4);
  flatbuffers::Verifier verifier(data, size, options);
  if (!fb::VerifyExecutableBuffer(verifier))
    return failure(
        "malformed Loom executable (flatbuffers verification failed)");

  const fb::Executable *root = fb::GetExecutable(data);
  // A different version may lay the fields out differently: refuse it before
  // converting anything.
  if (root->format_version() < kOldestReadableFormatVersion ||
      root->format_version() > kExecutableFormatVersion)
    return failure("unsupported format version " +
                   std::to_string(root->format_version()) +
                   " (this build reads versions " +
                   std::to_string(kOldestReadableFormatVersion) + " to " +
                   std::to_string(kExecutableFormatVersion) + ")");
  auto exe = Converter(size).run(*root);
  if (!exe)
    return exe.takeError();
  if (llvm::Error err = verifyExecutable(*exe))
    return std::move(err);
  return exe;
}

// A .loomx file is the flatbuffer followed by a checksum trailer:
//   per section: u64 offset, u64 size, u32 crc32c, u32 name length, name
//   u32 section count
//   u32 crc32c of the trailer (the sections and the count, then the u64 below)
//   u64 flatbuffer size
//   "LOOMCRC1"
// Section 0 is the executable's tables and programs: every flatbuffer byte
// outside the other sections. The others are parameters' data, one each.
namespace {

constexpr char kChecksumMagic[8] = {'L', 'O', 'O', 'M', 'C', 'R', 'C', '1'};
constexpr size_t kTrailerTail = 4 + 4 + 8 + sizeof(kChecksumMagic);
constexpr const char *kTablesSection = "tables and programs";

struct Section {
  uint64_t offset = 0, size = 0;
  uint32_t crc = 0;
  std::string name;
};

template <typename T> void put(std::vector<uint8_t> &out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(value) >> (8 * i)));
}

template <typename T> T get(const uint8_t *at) {
  uint64_t value = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    value |= static_cast<uint64_t>(at[i]) << (8 * i);
  return static_cast<T>(value);
}

/// CRC-32C of [0, size) minus the sorted, disjoint `ranges`.
uint32_t complementCrc(const uint8_t *bytes, uint64_t size,
                       const std::vector<Section> &ranges) {
  uint32_t crc = 0;
  uint64_t at = 0;
  for (const Section &range : ranges) {
    crc = crc32c(bytes + at, range.offset - at, crc);
    at = range.offset + range.size;
  }
  return crc32c(bytes + at, size - at, crc);
}

std::vector<uint8_t> checksumTrailer(const std::vector<uint8_t> &payload) {
  std::vector<Section> data;
  const fb::Executable *root = fb::GetExecutable(payload.data());
  if (const auto *parameters = root->parameters())
    for (const fb::Parameter *param : *parameters)
      if (const auto *bytes = param->data(); bytes && bytes->size() > 0) {
        Section section;
        section.offset = static_cast<uint64_t>(bytes->data() - payload.data());
        section.size = bytes->size();
        section.crc = crc32c(bytes->data(), bytes->size());
        section.name =
            "parameter '" + (param->name() ? param->name()->str() : "") + "' data";
        data.push_back(std::move(section));
      }
  std::sort(data.begin(), data.end(),
            [](const Section &a, const Section &b) { return a.offset < b.offset; });
  Section tables;
  tables.size = payload.size();
  tables.crc = complementCrc(payload.data(), payload.size(), data);
  tables.name = kTablesSection;
  data.insert(data.begin(), std::move(tables));

  std::vector<uint8_t> trailer;
  for (const Section &section : data) {
    put<uint64_t>(trailer, section.offset);
    put<uint64_t>(trailer, section.size);
    put<uint32_t>(trailer, section.crc);
    put<uint32_t>(trailer, static_cast<uint32_t>(section.name.size()));
    trailer.insert(trailer.end(), section.name.begin(), section.name.end());
  }
  put<uint32_t>(trailer, static_cast<uint32_t>(data.size()));
  std::vector<uint8_t> sizeBytes;
  put<uint64_t>(sizeBytes, payload.size());
  put<uint32_t>(trailer, crc32c(sizeBytes.data(), sizeBytes.size(),
                                crc32c(trailer.data(), trailer.size())));
  trailer.insert(trailer.end(), sizeBytes.begin(), sizeBytes.end());
  trailer.insert(trailer.end(), kChecksumMagic, kChecksumMagic + sizeof(kChecksumMagic));
  return trailer;
}

const char *const kDamaged =
    ": the file is damaged (recompile it, or pass --no-verify-checksum to load it anyway)";

/// The flatbuffer's size within a file of `size` bytes; with `verify`, every
/// section's checksum is checked first.
llvm::Expected<size_t> checkTrailer(const uint8_t *bytes, size_t size,
                                    const std::string &path, bool verify) {
  const bool hasTrailer =
      size >= kTrailerTail &&
      std::memcmp(bytes + size - sizeof(kChecksumMagic), kChecksumMagic,
                  sizeof(kChecksumMagic)) == 0;
  if (!hasTrailer) {
    // A foreign file (no "LOOM" identifier) is reported as such by the loader.
    const bool looksLikeLoom =
        size >= kIdentifierEnd && std::memcmp(bytes + 4, "LOOM", 4) == 0;
    if (!verify || !looksLikeLoom)
      return size;
    return failure(quoted(path) +
                   " has no checksum: it was written by an older Loom, or is cut "
                   "short (recompile it, or pass --no-verify-checksum)");
  }
  const uint64_t payloadSize = get<uint64_t>(bytes + size - 16);
  const size_t countAt = size - kTrailerTail;
  if (payloadSize > countAt)
    return failure(quoted(path) + ": the checksum trailer is damaged" + kDamaged);
  if (!verify)
    return static_cast<size_t>(payloadSize);
  const uint32_t trailerCrc =
      crc32c(bytes + size - 16, 8,
             crc32c(bytes + payloadSize, countAt + 4 - payloadSize));
  if (trailerCrc != get<uint32_t>(bytes + size - 20))
    return failure(quoted(path) + ": checksum mismatch in the checksum trailer" + kDamaged);
  const uint32_t count = get<uint32_t>(bytes + countAt);
  std::vector<Section> sections;
  const uint8_t *at = bytes + payloadSize, *end = bytes + countAt;
  for (uint32_t i = 0; i < count; ++i) {
    if (end - at < 24)
      return failure(quoted(path) + ": the checksum trailer is damaged" + kDamaged);
    Section section;
    section.offset = get<uint64_t>(at);
    section.size = get<uint64_t>(at + 8);
    section.crc = get<uint32_t>(at + 16);
    const uint32_t nameSize = get<uint32_t>(at + 20);
    at += 24;
    if (static_cast<uint64_t>(end - at) < nameSize || section.offset > payloadSize ||
        section.size > payloadSize - section.offset ||
        (!sections.empty() && i > 1 &&
         section.offset < sections.back().offset + sections.back().size))
      return failure(quoted(path) + ": the checksum trailer is damaged" + kDamaged);
    section.name.assign(reinterpret_cast<const char *>(at), nameSize);
    at += nameSize;
    sections.push_back(std::move(section));
  }
  if (sections.empty() || at != end)
    return failure(quoted(path) + ": the checksum trailer is damaged" + kDamaged);
  std::vector<Section> data(sections.begin() + 1, sections.end());
  for (const Section &section : data)
    if (crc32c(bytes + section.offset, section.size) != section.crc)
      return failure(quoted(path) + ": checksum mismatch in section '" + section.name +
                     "'" + kDamaged);
  if (complementCrc(bytes, payloadSize, data) != sections.front().crc)
    return failure(quoted(path) + ": checksum mismatch in section '" +
                   sections.front().name + "'" + kDamaged);
  return static_cast<size_t>(payloadSize);
}

} // namespace

llvm::Expected<Executable> loadExecutableFile(const std::string &path,
                                              bool verifyChecksum) {
  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> file = openRegularFile(path);
  if (!file)
    return file.takeError();
  const llvm::MemoryBuffer &bytes = **file;
  if (bytes.getBufferSize() == 0)
    return failure(quoted(path) + " is empty, not a Loom executable");
  const uint8_t *start = reinterpret_cast<const uint8_t *>(bytes.getBufferStart());
  llvm::Expected<size_t> payloadSize =
      checkTrailer(start, bytes.getBufferSize(), path, verifyChecksum);
  if (!payloadSize)
    return payloadSize.takeError();
  auto exe = loadExecutable(start, *payloadSize);
  if (!exe)
    return failure(quoted(path) + ": " + llvm::toString(exe.takeError()));
  return exe;
}

llvm::Error writeExecutableFile(const Executable &exe,
                                const std::string &path) {
  std::vector<uint8_t> bytes = serializeExecutable(exe);
  std::vector<uint8_t> trailer = checksumTrailer(bytes);
  return writeFileAtomically(path, [&](AtomicFileWriter &file) -> llvm::Error {
    if (llvm::Error err = file.write(bytes.data(), bytes.size()))
      return err;
    return file.write(trailer.data(), trailer.size());
  });
}

} // namespace loom
