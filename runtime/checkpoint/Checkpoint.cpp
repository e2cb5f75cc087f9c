#include "runtime/checkpoint/Checkpoint.h"

#include "runtime/checkpoint/FileIO.h"
#include "runtime/support/UserFile.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstring>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace loom {

using checkpoint_io::contentError;
using checkpoint_io::DurableFile;
using checkpoint_io::systemError;

namespace {

constexpr llvm::StringLiteral kIndexFileName = "index.json";
constexpr llvm::StringLiteral kLatestFileName = "latest";
constexpr llvm::StringLiteral kStepPrefix = "step-";
constexpr llvm::StringLiteral kTempMarker = ".tmp-";

std::string shapeString(llvm::ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

/// The step of a directory named "step-<digits>".
std::optional<int64_t> parseStepDirectoryName(llvm::StringRef name) {
  if (!name.consume_front(kStepPrefix) || name.empty() ||
      !llvm::all_of(name, llvm::isDigit))
    return std::nullopt;
  int64_t step = 0;
  if (name.getAsInteger(10, step))
    return std::nullopt;
  return step;
}

std::string hostName() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0)
    return "unknown-host";
  std::string text = name;
  std::replace(text.begin(), text.end(), '/', '_');
  return text;
}

/// The error of a writer step, and, if cleaning up also failed, that too.
llvm::Error withCleanupError(llvm::Error err, llvm::Error cleanupErr) {
  if (!cleanupErr)
    return err;
  const std::string message =
      llvm::toString(std::move(err)) +
      "; cleaning up also failed: " + llvm::toString(std::move(cleanupErr));
  return llvm::createStringError(std::make_error_code(std::errc::io_error), message);
}

llvm::Error makeDirectories(const std::string &path) {
  if (checkpoint_io::isDirectory(path))
    return llvm::Error::success();
  const std::string parent = checkpoint_io::parentDirectory(path);
  if (parent != path && parent != "." && parent != "/")
    if (llvm::Error err = makeDirectories(parent))
      return err;
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    return systemError(path, "cannot create directory");
  return llvm::Error::success();
}

/// A box of a global tensor held by one file.
struct Shard {
  std::string file;
  std::vector<int64_t> offsets;
  std::vector<int64_t> shape;
};

/// A tensor as the index describes it.
struct IndexedTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> globalShape;
  std::vector<Shard> shards;
};

/// Checks that `tensor`'s shards lie inside it and tile it exactly: no two
/// overlap and together they cover every element.
llvm::Error checkShardsTile(const std::string &where, const std::string &name,
                            const IndexedTensor &tensor) {
  auto bad = [&](const llvm::Twine &problem) {
    return contentError(where, "tensor '" + name + "': " + problem);
  };
  const size_t rank = tensor.globalShape.size();
  std::optional<uint64_t> globalElements = tensorByteSize(DType::I1, tensor.globalShape);
  if (!globalElements)
    return bad("global shape " + shapeString(tensor.globalShape) +
               " has a negative or overflowing size");
  if (tensor.shards.empty())
    return bad("no shard holds it");
  uint64_t coveredElements = 0;
  for (const Shard &shard : tensor.shards) {
    if (shard.offsets.size() != rank || shard.shape.size() != rank)
      return bad("a shard in '" + shard.file + "' has offsets " +
                 shapeString(shard.offsets) + " and shape " + shapeString(shard.shape) +
                 ", not of the tensor's rank " + llvm::Twine(rank));
    for (size_t d = 0; d < rank; ++d)
      if (shard.offsets[d] < 0 || shard.shape[d] < 0 ||
          shard.shape[d] > tensor.globalShape[d] - shard.offsets[d])
        return bad("the shard in '" + shard.file + "' at offsets " +
                   shapeString(shard.offsets) + " with shape " +
                   shapeString(shard.shape) + " does not fit in the global shape " +
                   shapeString(tensor.globalShape));
    coveredElements += *tensorByteSize(DType::I1, shard.shape);
  }
  for (size_t a = 0; a < tensor.shards.size(); ++a)
    for (size_t b = a + 1; b < tensor.shards.size(); ++b) {
      const Shard &first = tensor.shards[a], &second = tensor.shards[b];
      bool intersect = true;
      for (size_t d = 0; d < rank && intersect; ++d)
        intersect = first.offsets[d] < second.offsets[d] + second.shape[d] &&
                    second.offsets[d] < first.offsets[d] + first.shape[d];
      if (intersect)
        return bad("the shards in '" + first.file + "' (offsets " +
                   shapeString(first.offsets) + ") and '" + second.file + "' (offsets " +
                   shapeString(second.offsets) + ") overlap");
    }
  if (coveredElements != *globalElements)
    return bad("its shards cover " + llvm::Twine(coveredElements) + " of its " +
               llvm::Twine(*globalElements) + " elements");
  return llvm::Error::success();
}

/// Copies a row-major box of elements into the global tensor.
void copyShardInto(const Shard &shard, llvm::ArrayRef<uint8_t> shardBytes,
                   llvm::ArrayRef<int64_t> globalShape, size_t elementSize,
                   std::vector<uint8_t> &global) {
  const size_t rank = globalShape.size();
  if (rank == 0) {
    std::copy(shardBytes.begin(), shardBytes.end(), global.begin());
    return;
  }
  for (int64_t dim : shard.shape)
    if (dim == 0)
      return;
  // Strides of the global tensor, in elements.
  std::vector<uint64_t> globalStrides(rank, 1);
  for (size_t d = rank - 1; d > 0; --d)
    globalStrides[d - 1] = globalStrides[d] * static_cast<uint64_t>(globalShape[d]);
  // The shard is a sequence of rows along the last dimension; walk the other
  // dimensions like an odometer and copy one row at a time.
  const size_t rowBytes = static_cast<size_t>(shard.shape.back()) * elementSize;
  const size_t outerRank = rank - 1;
  std::vector<int64_t> index(outerRank, 0);
  size_t source = 0;
  while (true) {
    uint64_t target = static_cast<uint64_t>(shard.offsets.back());
    for (size_t d = 0; d < outerRank; ++d)
      target += static_cast<uint64_t>(shard.offsets[d] + index[d]) * globalStrides[d];
    std::memcpy(global.data() + target * elementSize, shardBytes.data() + source,
                rowBytes);
    source += rowBytes;
    size_t d = outerRank;
    while (d > 0 && ++index[d - 1] == shard.shape[d - 1]) {
      index[d - 1] = 0;
      --d;
    }
    if (d == 0)
      return;
  }
}

bool isFinite(const LearningRateSchedule &schedule) {
  return llvm::all_of(schedule.settings,
                      [](const auto &setting) { return std::isfinite(setting.second); });
}

// --- index.json ------------------------------------------------------------

void writeIntegerArray(llvm::json::OStream &json, llvm::StringRef key,
                       llvm::ArrayRef<int64_t> values) {
  json.attributeArray(key, [&] {
    for (int64_t value : values)
      json.value(value);
  });
}

std::string renderIndex(int64_t step,
                        const std::map<uint32_t, CheckpointWriter::FileRecord> &files,
                        const std::map<std::string, IndexedTensor> &tensors,
                        const CheckpointState &state) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  llvm::json::OStream json(stream, /*IndentSize=*/2);
  json.object([&] {
    json.attribute("format", kCheckpointFormatName);
    json.attribute("version", kCheckpointFormatVersion);
    json.attribute("step", step);
    json.attributeObject("files", [&] {
      for (const auto &[rank, file] : files)
        json.attributeObject(file.fileName, [&] {
          json.attribute("rank", static_cast<int64_t>(file.rank));
          json.attribute("bytes", file.bytes);
          json.attribute("sha256", file.sha256);
        });
    });
    json.attributeObject("tensors", [&] {
      for (const auto &[name, tensor] : tensors)
        json.attributeObject(name, [&] {
          json.attribute("dtype", safetensorsDTypeName(tensor.dtype));
          writeIntegerArray(json, "shape", tensor.globalShape);
          json.attributeArray("shards", [&] {
            for (const Shard &shard : tensor.shards)
              json.object([&] {
                json.attribute("file", shard.file);
                writeIntegerArray(json, "offsets", shard.offsets);
                writeIntegerArray(json, "shape", shard.shape);
              });
          });
        });
    });
    json.attributeObject("state", [&] {
      json.attribute("model", state.modelName);
      json.attribute("compile_flags", state.compileFlags);
      json.attributeObject("data_position", [&] {
        for (const auto &[key, value] : state.dataPosition)
          json.attribute(key, value);
      });
      json.attributeArray("rng_state", [&] {
        for (uint64_t word : state.rngState)
          json.value(word);
      });
      json.attributeObject("learning_rate_schedule", [&] {
        json.attribute("kind", state.learningRateSchedule.kind);
        json.attributeObject("settings", [&] {
          for (const auto &[key, value] : state.learningRateSchedule.settings)
            json.attribute(key, value);
        });
      });
      json.attributeObject("integers", [&] {
        for (const auto &[key, value] : state.integers)
          json.attribute(key, value);
      });
      json.attributeObject("strings", [&] {
        for (const auto &[key, value] : state.strings)
          json.attribute(key, value);
      });
    });
  });
  stream << "\n";
  stream.flush();
  return text;
}

/// Reads index.json; every missing or mistyped field is an error naming it.
class IndexReader {
public:
  explicit IndexReader(std::string path) : path_(std::move(path)) {}

  struct FileEntry {
    uint32_t rank = 0;
    uint64_t bytes = 0;
    std::string sha256;
  };
  struct Index {
    int64_t step = 0;
    std::map<std::string, FileEntry> files;
    std::map<std::string, IndexedTensor> tensors;
    CheckpointState state;
  };

  llvm::Expected<Index> read(llvm::StringRef text) {
    if (llvm::Error err = checkNestingDepth(text, NestingSyntax::Json, path_))
      return std::move(err);
    llvm::Expected<llvm::json::Value> root = llvm::json::parse(text);
    if (!root)
      return contentError(path_, "not valid JSON: " + llvm::toString(root.takeError()));
    const llvm::json::Object *object = root->getAsObject();
    if (!object)
      return bad("not a JSON object");
    std::optional<llvm::StringRef> format = object->getString("format");
    if (!format || *format != kCheckpointFormatName)
      return bad("not a Loom checkpoint index (\"format\" is not \"" +
                 llvm::Twine(kCheckpointFormatName) + "\")");
    std::optional<int64_t> version = object->getInteger("version");
    if (!version)
      return bad("no integer \"version\"");
    if (*version != kCheckpointFormatVersion)
      return bad("format version " + llvm::Twine(*version) +
                 ", this Loom reads version " + llvm::Twine(kCheckpointFormatVersion));
    Index index;
    std::optional<int64_t> step = object->getInteger("step");
    if (!step || *step < 0)
      return bad("no non-negative integer \"step\"");
    index.step = *step;
    if (llvm::Error err = readFiles(*object, index))
      return std::move(err);
    if (llvm::Error err = readTensors(*object, index))
      return std::move(err);
    if (llvm::Error err = readState(*object, index))
      return std::move(err);
    index.state.step = index.step;
    return index;
  }

private:
  llvm::Error bad(const llvm::Twine &problem) { return contentError(path_, problem); }

  llvm::Error readIntegers(const llvm::json::Array *array, const llvm::Twine &what,
                           std::vector<int64_t> &out) {
    if (!array)
      return bad("no " + what + " array");
    for (const llvm::json::Value &value : *array) {
      std::optional<int64_t> integer = value.getAsInteger();
      if (!integer)
        return bad(what + " holds a value that is not an integer");
      out.push_back(*integer);
    }
    return llvm::Error::success();
  }

  llvm::Error readFiles(const llvm::json::Object &root, Index &index) {
    const llvm::json::Object *files = root.getObject("files");
    if (!files)
      return bad("no \"files\" object");
    for (const auto &[key, value] : *files) {
      const std::string name = key.str();
      // The index names files inside the step directory, nothing else.
      if (name.empty() || name[0] == '.' || name.find('/') != std::string::npos ||
          name == kIndexFileName)
        return bad("file name '" + name + "' is not a plain file name");
      const llvm::json::Object *entry = value.getAsObject();
      std::optional<int64_t> rank = entry ? entry->getInteger("rank") : std::nullopt;
      std::optional<int64_t> bytes = entry ? entry->getInteger("bytes") : std::nullopt;
      std::optional<llvm::StringRef> sha =
          entry ? entry->getString("sha256") : std::nullopt;
      if (!rank || *rank < 0 || *rank > UINT32_MAX || !bytes || *bytes < 0 || !sha ||
          sha->size() != 64 || !llvm::all_of(*sha, llvm::isHexDigit))
        return bad("file '" + name +
                   "' lacks a valid \"rank\", \"bytes\" or 64-digit \"sha256\"");
      index.files[name] = {static_cast<uint32_t>(*rank), static_cast<uint64_t>(*bytes),
                           sha->lower()};
    }
    return llvm::Error::success();
  }

  llvm::Error readTensors(const llvm::json::Object &root, Index &index) {
    const llvm::json::Object *tensors = root.getObject("tensors");
    if (!tensors)
      return bad("no \"tensors\" object");
    for (const auto &[key, value] : *tensors) {
      const std::string name = key.str();
      const llvm::json::Object *entry = value.getAsObject();
      if (!entry)
        return bad("tensor '" + name + "' is not an object");
      IndexedTensor tensor;
      std::optional<llvm::StringRef> dtypeName = entry->getString("dtype");
      std::optional<DType> dtype =
          dtypeName ? parseSafetensorsDType(*dtypeName) : std::nullopt;
      if (!dtype)
        return bad("tensor '" + name + "' has no known \"dtype\"");
      tensor.dtype = *dtype;
      if (llvm::Error err =
              readIntegers(entry->getArray("shape"), "tensor '" + name + "' \"shape\"",
                           tensor.globalShape))
        return err;
      const llvm::json::Array *shards = entry->getArray("shards");
      if (!shards)
        return bad("tensor '" + name + "' has no \"shards\" array");
      for (const llvm::json::Value &shardValue : *shards) {
        const llvm::json::Object *shardObject = shardValue.getAsObject();
        std::optional<llvm::StringRef> file =
            shardObject ? shardObject->getString("file") : std::nullopt;
        if (!file)
          return bad("tensor '" + name + "' has a shard without a \"file\"");
        if (!index.files.count(file->str()))
          return bad("tensor '" + name + "' has a shard in '" + *file +
                     "', which \"files\" does not list");
        Shard shard;
        shard.file = file->str();
        if (llvm::Error err =
                readIntegers(shardObject->getArray("offsets"),
                             "tensor '" + name + "' shard \"offsets\"", shard.offsets))
          return err;
        if (llvm::Error err =
                readIntegers(shardObject->getArray("shape"),
                             "tensor '" + name + "' shard \"shape\"", shard.shape))
          return err;
        tensor.shards.push_back(std::move(shard));
      }
      if (llvm::Error err = checkShardsTile(path_, name, tensor))
        return err;
      index.tensors[name] = std::move(tensor);
    }
    return llvm::Error::success();
  }

  llvm::Error readState(const llvm::json::Object &root, Index &index) {
    const llvm::json::Object *state = root.getObject("state");
    if (!state)
      return bad("no \"state\" object");
    CheckpointState &out = index.state;
    std::optional<llvm::StringRef> model = state->getString("model");
    std::optional<llvm::StringRef> flags = state->getString("compile_flags");
    if (!model || !flags)
      return bad("state lacks the \"model\" or \"compile_flags\" string");
    out.modelName = model->str();
    out.compileFlags = flags->str();
    if (llvm::Error err = readIntegerMap(*state, "data_position", out.dataPosition))
      return err;
    if (llvm::Error err = readIntegerMap(*state, "integers", out.integers))
      return err;
    const llvm::json::Array *rng = state->getArray("rng_state");
    if (!rng)
      return bad("state lacks the \"rng_state\" array");
    for (const llvm::json::Value &word : *rng) {
      std::optional<uint64_t> value = word.getAsUINT64();
      if (!value)
        return bad(
            "state \"rng_state\" holds a value that is not a 64-bit unsigned integer");
      out.rngState.push_back(*value);
    }
    const llvm::json::Object *schedule = state->getObject("learning_rate_schedule");
    std::optional<llvm::StringRef> kind =
        schedule ? schedule->getString("kind") : std::nullopt;
    const llvm::json::Object *settings =
        schedule ? schedule->getObject("settings") : nullptr;
    if (!kind || !settings)
      return bad("state lacks \"learning_rate_schedule\" with \"kind\" and \"settings\"");
    out.learningRateSchedule.kind = kind->str();
    for (const auto &[key, value] : *settings) {
      std::optional<double> number = value.getAsNumber();
      if (!number)
        return bad("learning rate setting '" + key.str() + "' is not a number");
      out.learningRateSchedule.settings[key.str()] = *number;
    }
    const llvm::json::Object *strings = state->getObject("strings");
    if (!strings)
      return bad("state lacks the \"strings\" object");
    for (const auto &[key, value] : *strings) {
      std::optional<llvm::StringRef> text = value.getAsString();
      if (!text)
        return bad("state string '" + key.str() + "' is not a string");
      out.strings[key.str()] = text->str();
    }
    return llvm::Error::success();
  }

  llvm::Error readIntegerMap(const llvm::json::Object &state, llvm::StringRef key,
                             std::map<std::string, int64_t> &out) {
    const llvm::json::Object *object = state.getObject(key);
    if (!object)
      return bad("state lacks the \"" + key + "\" object");
    for (const auto &[name, value] : *object) {
      std::optional<int64_t> integer = value.getAsInteger();
      if (!integer)
        return bad("state \"" + key + "\" entry '" + name.str() + "' is not an integer");
      out[name.str()] = *integer;
    }
    return llvm::Error::success();
  }

  std::string path_;
};

/// Removes temporary directories that writers on this host left when they
/// were killed (their process no longer exists).
void removeAbandonedTemporaryDirectories(const std::string &dir) {
  llvm::Expected<std::vector<std::string>> names = checkpoint_io::listDirectory(dir);
  if (!names) {
    llvm::consumeError(names.takeError());
    return;
  }
  const std::string hostMarker = std::string(kTempMarker) + hostName() + "-";
  for (const std::string &name : *names) {
    llvm::StringRef rest = name;
    if (!rest.consume_front(".") || !rest.starts_with(kStepPrefix))
      continue;
    const size_t marker = rest.find(hostMarker);
    if (marker == llvm::StringRef::npos)
      continue;
    int pid = 0;
    if (rest.substr(marker + hostMarker.size()).getAsInteger(10, pid) || pid <= 0)
      continue;
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH)
      continue;
    // A failure here only leaves the debris for the next writer.
    llvm::consumeError(checkpoint_io::removeTree(dir + "/" + name));
  }
}

/// The step directory `path` names: itself if it holds an index, else the
/// one its `latest` file names.
llvm::Expected<std::string> resolveStepDirectory(const std::string &path) {
  if (checkpoint_io::pathExists(path + "/" + kIndexFileName.str()))
    return path;
  if (checkpoint_io::pathExists(path + "/" + kLatestFileName.str()))
    return latestCheckpoint(path);
  if (!checkpoint_io::pathExists(path)) {
    errno = ENOENT;
    return systemError(path, "cannot open checkpoint");
  }
  return contentError(path, "not a checkpoint: neither a step directory (no " +
                                kIndexFileName + ") nor a checkpoint directory (no '" +
                                kLatestFileName + "' file)");
}

} // namespace

std::string checkpointStepDirectoryName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%06lld", static_cast<long long>(step));
  return name;
}

std::string checkpointRankFileName(uint32_t rank) {
  char name[40];
  std::snprintf(name, sizeof(name), "rank-%05u.safetensors", rank);
  return name;
}

// --- writing ----------------------------------------------------------------

CheckpointWriter::CheckpointWriter(std::string dir, int64_t step,
                                   CheckpointWriteOptions options, std::string tempDir)
    : dir_(std::move(dir)), step_(step), options_(std::move(options)),
      tempDir_(std::move(tempDir)) {
  if (options_.simulateFullDiskAfterBytes)
    space_ = std::make_unique<checkpoint_io::SimulatedDiskSpace>(
        *options_.simulateFullDiskAfterBytes);
}

CheckpointWriter::~CheckpointWriter() {
  if (!finished_)
    llvm::consumeError(checkpoint_io::removeTree(tempDir_));
}

llvm::Expected<std::unique_ptr<CheckpointWriter>>
CheckpointWriter::begin(const std::string &dir, int64_t step,
                        const CheckpointWriteOptions &options) {
  if (step < 0)
    return contentError(dir, "cannot write a checkpoint of negative step " +
                                 llvm::Twine(step));
  if (llvm::Error err = makeDirectories(dir))
    return std::move(err);
  const std::string stepDir = dir + "/" + checkpointStepDirectoryName(step);
  if (checkpoint_io::pathExists(stepDir)) {
    // A step past the one `latest` names (or any step, where no `latest`
    // was ever written) was never published: a run killed between moving
    // its directory into place and updating `latest`. The run restarted
    // from `latest` (or from scratch) writes it again.
    std::optional<int64_t> published;
    const bool hasLatest = checkpoint_io::pathExists(dir + "/" + kLatestFileName.str());
    if (llvm::Expected<std::string> latest = latestCheckpoint(dir))
      published = parseStepDirectoryName(llvm::sys::path::filename(*latest));
    else
      llvm::consumeError(latest.takeError());
    if (!hasLatest || (published && step > *published)) {
      if (llvm::Error err = checkpoint_io::removeTree(stepDir))
        return std::move(err);
    } else {
      return contentError(stepDir, "already exists: step " + llvm::Twine(step) +
                                       " was checkpointed before");
    }
  }
  removeAbandonedTemporaryDirectories(dir);
  const std::string tempDir = dir + "/." + checkpointStepDirectoryName(step) +
                              kTempMarker.str() + hostName() + "-" +
                              std::to_string(::getpid());
  // Ours only if a killed process with our pid left it.
  if (llvm::Error err = checkpoint_io::removeTree(tempDir))
    return std::move(err);
  if (::mkdir(tempDir.c_str(), 0755) != 0)
    return systemError(tempDir, "cannot create directory");
  return std::unique_ptr<CheckpointWriter>(
      new CheckpointWriter(dir, step, options, tempDir));
}

llvm::Error CheckpointWriter::writeRankFile(uint32_t rank,
                                            llvm::ArrayRef<CheckpointTensor> tensors,
                                            llvm::ArrayRef<ShardPlacement> placements) {
  const std::string fileName = checkpointRankFileName(rank);
  const std::string path = tempDir_ + "/" + fileName;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_ || failed_)
      return contentError(tempDir_, "cannot add " + fileName +
                                        ": the checkpoint is already committed, "
                                        "abandoned or failed");
    if (files_.count(rank))
      return contentError(path, "rank " + llvm::Twine(rank) + " was written already");
  }
  auto fail = [&](llvm::Error err) {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_ = true;
    return err;
  };
  if (!placements.empty() && placements.size() != tensors.size())
    return fail(contentError(path, llvm::Twine(placements.size()) + " placements for " +
                                       llvm::Twine(tensors.size()) + " tensors"));
  FileRecord record;
  record.fileName = fileName;
  record.rank = rank;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const CheckpointTensor &tensor = tensors[i];
    ShardRecord shard{tensor.name, tensor.dtype, tensor.shape,
                      std::vector<int64_t>(tensor.shape.size(), 0), tensor.shape};
    if (!placements.empty()) {
      shard.globalShape = placements[i].globalShape;
      shard.offsets = placements[i].offsets;
    }
    record.shards.push_back(std::move(shard));
  }

  std::map<std::string, std::string> metadata = {
      // Hugging Face's loaders want to know the framework; the bytes are
      // laid out as PyTorch's.
      {"format", "pt"},
      {"loom.step", std::to_string(step_)},
      {"loom.rank", std::to_string(rank)},
  };
  const std::vector<HostTensorView> views = viewsOf(tensors);
  llvm::Expected<SafetensorsLayout> layout = layoutSafetensors(views, metadata, path);
  if (!layout)
    return fail(layout.takeError());
  llvm::Expected<DurableFile> file = DurableFile::create(path, space_.get());
  if (!file)
    return fail(file.takeError());
  if (llvm::Error err = file->write(layout->header.data(), layout->header.size()))
    return fail(std::move(err));
  for (size_t index : layout->dataOrder)
    if (llvm::Error err = file->write(views[index].data.data(), views[index].data.size()))
      return fail(std::move(err));
  if (llvm::Error err = file->finish())
    return fail(std::move(err));
  record.bytes = file->bytesWritten();
  record.sha256 = file->sha256Hex();

  std::lock_guard<std::mutex> lock(mutex_);
  files_[rank] = std::move(record);
  return llvm::Error::success();
}

llvm::Error CheckpointWriter::abandon() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_)
    return llvm::Error::success();
  finished_ = true;
  return checkpoint_io::removeTree(tempDir_);
}

llvm::Error CheckpointWriter::commit(const CheckpointState &state) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_ || failed_)
      return contentError(tempDir_, "cannot commit: the checkpoint is already "
                                    "committed, abandoned or failed");
  }
  if (llvm::Error err = publish(state))
    return withCleanupError(std::move(err), abandon());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
  }
  if (llvm::Error err = pruneOldCheckpoints())
    return contentError(dir_, "step " + llvm::Twine(step_) +
                                  " is saved, but removing older checkpoints failed: " +
                                  llvm::toString(std::move(err)));
  return llvm::Error::success();
}

llvm::Error CheckpointWriter::publish(const CheckpointState &state) {
  const std::string indexPath = tempDir_ + "/" + kIndexFileName.str();
  if (state.step != step_)
    return contentError(indexPath, "the state is of step " + llvm::Twine(state.step) +
                                       ", the checkpoint of step " + llvm::Twine(step_));
  auto notUTF8 = [](const std::map<std::string, std::string> &strings) {
    return llvm::any_of(strings, [](const auto &item) {
      return !llvm::json::isUTF8(item.first) || !llvm::json::isUTF8(item.second);
    });
  };
  if (!llvm::json::isUTF8(state.modelName) || !llvm::json::isUTF8(state.compileFlags) ||
      !llvm::json::isUTF8(state.learningRateSchedule.kind) || notUTF8(state.strings))
    return contentError(indexPath, "the trainer state holds a string that is not UTF-8");
  if (!isFinite(state.learningRateSchedule))
    return contentError(indexPath, "a learning rate setting is not finite");

  std::map<std::string, IndexedTensor> tensors;
  for (const auto &[rank, file] : files_)
    for (const ShardRecord &shard : file.shards) {
      auto [it, inserted] = tensors.try_emplace(shard.tensorName);
      IndexedTensor &tensor = it->second;
      if (inserted) {
        tensor.dtype = shard.dtype;
        tensor.globalShape = shard.globalShape;
      } else if (tensor.dtype != shard.dtype || tensor.globalShape != shard.globalShape) {
        return contentError(
            indexPath, "tensor '" + shard.tensorName + "': ranks disagree on it (" +
                           safetensorsDTypeName(tensor.dtype) + " " +
                           shapeString(tensor.globalShape) + " against " +
                           safetensorsDTypeName(shard.dtype) + " " +
                           shapeString(shard.globalShape) + " in " + file.fileName + ")");
      }
      tensor.shards.push_back({file.fileName, shard.offsets, shard.shape});
    }
  for (const auto &[name, tensor] : tensors)
    if (llvm::Error err = checkShardsTile(indexPath, name, tensor))
      return err;

  const std::string index = renderIndex(step_, files_, tensors, state);
  {
    llvm::Expected<DurableFile> file = DurableFile::create(indexPath, space_.get());
    if (!file)
      return file.takeError();
    if (llvm::Error err = file->write(index.data(), index.size()))
      return err;
    if (llvm::Error err = file->finish())
      return err;
  }
  if (llvm::Error err = checkpoint_io::fsyncDirectory(tempDir_))
    return err;

  const std::string stepName = checkpointStepDirectoryName(step_);
  const std::string stepDir = dir_ + "/" + stepName;
  if (::rename(tempDir_.c_str(), stepDir.c_str()) != 0)
    return systemError(stepDir, "cannot rename '" + tempDir_ + "' to it");
  // From here on, undoing means removing the published step directory.
  auto unpublish = [&](llvm::Error err) {
    return withCleanupError(std::move(err), checkpoint_io::removeTree(stepDir));
  };
  if (llvm::Error err = checkpoint_io::fsyncDirectory(dir_))
    return unpublish(std::move(err));

  const std::string latestPath = dir_ + "/" + kLatestFileName.str();
  const std::string latestText = stepName + "\n";
  llvm::Error latestErr = checkpoint_io::replaceFileAtomically(
      latestPath,
      [&](AtomicFileWriter &file) { return file.write(latestText.data(), latestText.size()); },
      space_.get());
  if (latestErr) {
    // If the rename happened and only the final directory fsync failed,
    // `latest` already names the new step: keep it, report the error.
    llvm::Expected<std::vector<uint8_t>> current =
        checkpoint_io::readWholeFile(latestPath);
    const bool latestIsNew =
        current && std::string(current->begin(), current->end()) == latestText;
    if (!current)
      llvm::consumeError(current.takeError());
    return latestIsNew ? std::move(latestErr) : unpublish(std::move(latestErr));
  }
  return llvm::Error::success();
}

llvm::Error CheckpointWriter::pruneOldCheckpoints() {
  if (options_.keepLast == 0)
    return llvm::Error::success();
  llvm::Expected<std::vector<int64_t>> steps = listCheckpointSteps(dir_);
  if (!steps)
    return steps.takeError();
  // The newest keepLast by step number, and always the one just written
  // (which `latest` names, even when higher steps exist from an earlier run).
  std::set<int64_t> kept = {step_};
  for (auto it = steps->rbegin(); it != steps->rend() && kept.size() < options_.keepLast;
       ++it)
    kept.insert(*it);
  for (int64_t step : *steps)
    if (!kept.count(step))
      if (llvm::Error err =
              checkpoint_io::removeTree(dir_ + "/" + checkpointStepDirectoryName(step)))
        return err;
  return checkpoint_io::fsyncDirectory(dir_);
}

llvm::Error writeCheckpoint(const std::string &dir, uint32_t rank,
                            llvm::ArrayRef<CheckpointTensor> tensors,
                            const CheckpointState &state,
                            const CheckpointWriteOptions &options) {
  llvm::Expected<std::unique_ptr<CheckpointWriter>> writer =
      CheckpointWriter::begin(dir, state.step, options);
  if (!writer)
    return writer.takeError();
  if (llvm::Error err = (*writer)->writeRankFile(rank, tensors))
    return withCleanupError(std::move(err), (*writer)->abandon());
  return (*writer)->commit(state);
}

// --- reading ----------------------------------------------------------------

llvm::Expected<std::vector<int64_t>> listCheckpointSteps(const std::string &dir) {
  llvm::Expected<std::vector<std::string>> names = checkpoint_io::listDirectory(dir);
  if (!names)
    return names.takeError();
  std::vector<int64_t> steps;
  for (const std::string &name : *names)
    if (std::optional<int64_t> step = parseStepDirectoryName(name))
      if (checkpoint_io::isDirectory(dir + "/" + name))
        steps.push_back(*step);
  std::sort(steps.begin(), steps.end());
  return steps;
}

llvm::Expected<std::string> latestCheckpoint(const std::string &dir) {
  const std::string latestPath = dir + "/" + kLatestFileName.str();
  llvm::Expected<std::vector<uint8_t>> bytes = checkpoint_io::readWholeFile(latestPath);
  if (!bytes)
    return bytes.takeError();
  const llvm::StringRef name =
      llvm::StringRef(reinterpret_cast<const char *>(bytes->data()), bytes->size())
          .trim();
  if (!parseStepDirectoryName(name))
    return contentError(latestPath, "does not name a step directory (step-<number>)");
  const std::string stepDir = dir + "/" + name.str();
  if (!checkpoint_io::isDirectory(stepDir))
    return contentError(latestPath, "names '" + name + "', which does not exist");
  return stepDir;
}

llvm::Expected<LoadedCheckpoint> loadCheckpoint(const std::string &path) {
  llvm::Expected<std::string> stepDir = resolveStepDirectory(path);
  if (!stepDir)
    return stepDir.takeError();
  const std::string indexPath = *stepDir + "/" + kIndexFileName.str();
  llvm::Expected<std::vector<uint8_t>> indexBytes =
      checkpoint_io::readWholeFile(indexPath);
  if (!indexBytes)
    return indexBytes.takeError();
  IndexReader reader(indexPath);
  llvm::Expected<IndexReader::Index> index = reader.read(llvm::StringRef(
      reinterpret_cast<const char *>(indexBytes->data()), indexBytes->size()));
  if (!index)
    return index.takeError();
  const llvm::StringRef dirName = llvm::StringRef(*stepDir).rsplit('/').second;
  if (std::optional<int64_t> named = parseStepDirectoryName(dirName))
    if (*named != index->step)
      return contentError(indexPath, "is of step " + llvm::Twine(index->step) +
                                         " but its directory is named '" + dirName + "'");

  LoadedCheckpoint loaded;
  loaded.directory = *stepDir;
  loaded.state = std::move(index->state);
  // Each tensor's global buffer, filled shard by shard.
  for (const auto &[name, tensor] : index->tensors) {
    CheckpointTensor &out = loaded.tensors[name];
    out.name = name;
    out.dtype = tensor.dtype;
    out.shape = tensor.globalShape;
    out.data.resize(*tensorByteSize(tensor.dtype, tensor.globalShape));
  }
  for (const auto &[fileName, entry] : index->files) {
    const std::string filePath = *stepDir + "/" + fileName;
    llvm::Expected<std::vector<uint8_t>> bytes = checkpoint_io::readWholeFile(filePath);
    if (!bytes)
      return bytes.takeError();
    if (bytes->size() != entry.bytes)
      return contentError(filePath,
                          "is " + llvm::Twine(bytes->size()) + " bytes, the index says " +
                              llvm::Twine(entry.bytes) + " (truncated or damaged)");
    const std::string sha = Sha256::hexOf(bytes->data(), bytes->size());
    if (sha != entry.sha256)
      return contentError(filePath, "checksum mismatch: SHA-256 " + sha +
                                        ", the index says " + entry.sha256 +
                                        " (the file is damaged)");
    llvm::Expected<SafetensorsFile> file = parseSafetensors(*bytes, filePath);
    if (!file)
      return file.takeError();
    bytes->clear();
    bytes->shrink_to_fit();

    // The file must hold exactly the shards the index puts in it.
    std::map<std::string, const Shard *> expectedShards;
    for (const auto &[name, tensor] : index->tensors)
      for (const Shard &shard : tensor.shards)
        if (shard.file == fileName) {
          if (expectedShards.count(name))
            return contentError(indexPath, "tensor '" + name + "' has two shards in '" +
                                               fileName + "'");
          expectedShards[name] = &shard;
        }
    for (const HostTensor &held : file->tensors) {
      auto found = expectedShards.find(held.name);
      if (found == expectedShards.end())
        return contentError(filePath, "holds tensor '" + held.name +
                                          "', which the index does not place in it");
      const IndexedTensor &tensor = index->tensors[held.name];
      const Shard &shard = *found->second;
      if (held.dtype != tensor.dtype || held.shape != shard.shape)
        return contentError(filePath, "tensor '" + held.name + "' is " +
                                          safetensorsDTypeName(held.dtype) + " " +
                                          shapeString(held.shape) + ", the index says " +
                                          safetensorsDTypeName(tensor.dtype) + " " +
                                          shapeString(shard.shape));
      copyShardInto(shard, held.data, tensor.globalShape, dtypeSize(tensor.dtype),
                    loaded.tensors[held.name].data);
      expectedShards.erase(found);
    }
    if (!expectedShards.empty())
      return contentError(filePath, "lacks tensor '" + expectedShards.begin()->first +
                                        "', which the index places in it");
  }
  return loaded;
}

llvm::Error checkMatches(const LoadedCheckpoint &checkpoint,
                         llvm::ArrayRef<TensorSpec> expected) {
  std::vector<std::string> problems;
  for (const TensorSpec &spec : expected) {
    auto found = checkpoint.tensors.find(spec.name);
    if (found == checkpoint.tensors.end()) {
      problems.push_back("tensor '" + spec.name + "' is missing");
      continue;
    }
    const CheckpointTensor &tensor = found->second;
    if (tensor.dtype != spec.dtype)
      problems.push_back("tensor '" + spec.name + "' is " +
                         std::string(dtypeName(tensor.dtype)) + ", expected " +
                         std::string(dtypeName(spec.dtype)));
    else if (tensor.shape != spec.shape)
      problems.push_back("tensor '" + spec.name + "' has shape " +
                         shapeString(tensor.shape) + ", expected " +
                         shapeString(spec.shape));
  }
  if (problems.empty())
    return llvm::Error::success();
  std::string message = "checkpoint '" + checkpoint.directory + "': " + problems.front();
  if (problems.size() > 1)
    message += " (and " + std::to_string(problems.size() - 1) + " more mismatches)";
  return llvm::createStringError(std::make_error_code(std::errc::invalid_argument),
                                 message);
}

} // namespace loom
