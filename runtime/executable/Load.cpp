// flatbuffers bytes -> Executable, and the .loomx file operations. Bytes are
// untrusted: the flatbuffers verifier runs before any field is read, the
// conversion bounds how much memory shared data may expand into, and
// verifyExecutable runs before the result is returned.

#include "runtime/executable/Executable.h"
#include "runtime/schema/executable_generated.h"

#include "llvm/Support/MemoryBuffer.h"

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

llvm::Error systemFailure(const std::string &what, const std::string &path) {
  int code = errno;
  return llvm::createStringError(std::error_code(code, std::generic_category()),
                                 "cannot %s %s: %s", what.c_str(),
                                 quoted(path).c_str(), std::strerror(code));
}

/// write(2) until done, retrying on EINTR and short writes.
bool writeAll(int fd, const uint8_t *data, size_t size) {
  while (size > 0) {
    ssize_t written = ::write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    data += written;
    size -= static_cast<size_t>(written);
  }
  return true;
}

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

llvm::Expected<Executable> loadExecutableFile(const std::string &path) {
  auto file = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                          /*RequiresNullTerminator=*/false);
  if (!file)
    return llvm::createStringError(file.getError(), "cannot read %s: %s",
                                   quoted(path).c_str(),
                                   file.getError().message().c_str());
  const llvm::MemoryBuffer &bytes = **file;
  if (bytes.getBufferSize() == 0)
    return failure(quoted(path) + " is empty, not a Loom executable");
  auto exe = loadExecutable(
      reinterpret_cast<const uint8_t *>(bytes.getBufferStart()),
      bytes.getBufferSize());
  if (!exe)
    return failure(quoted(path) + ": " + llvm::toString(exe.takeError()));
  return exe;
}

llvm::Error writeExecutableFile(const Executable &exe,
                                const std::string &path) {
  std::vector<uint8_t> bytes = serializeExecutable(exe);

  // The temporary sits next to the target so rename() stays on one file
  // system and is atomic; the random suffix keeps concurrent writers apart.
  std::random_device entropy;
  std::string tempPath = path + ".tmp." + std::to_string(::getpid()) + "." +
                         std::to_string(entropy());
  int fd = ::open(tempPath.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                  0644);
  if (fd < 0)
    return systemFailure("create a temporary file for", path);

  auto abandon = [&](const char *what) {
    llvm::Error err = systemFailure(what, path);
    if (fd >= 0)
      ::close(fd);
    ::unlink(tempPath.c_str());
    return err;
  };
  if (!writeAll(fd, bytes.data(), bytes.size()))
    return abandon("write");
  if (::fsync(fd) != 0)
    return abandon("sync");
  int closed = ::close(fd);
  fd = -1;
  if (closed != 0)
    return abandon("close");
  if (::rename(tempPath.c_str(), path.c_str()) != 0)
    return abandon("replace");

  // Make the rename itself durable.
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "."
                    : slash == 0               ? "/"
                                               : path.substr(0, slash);
  int dirFd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd >= 0) {
    ::fsync(dirFd);
    ::close(dirFd);
  }
  return llvm::Error::success();
}

} // namespace loom
