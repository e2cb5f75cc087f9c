#ifndef LOOM_RUNTIME_CHECKPOINT_CHECKPOINT_H
#define LOOM_RUNTIME_CHECKPOINT_CHECKPOINT_H

// Loom's training checkpoints (runtime/checkpoint/README.md has the format).
//
//   DIR/latest                        names the newest complete step directory
//   DIR/step-000123/index.json        format version, step, every tensor's
//                                     global dtype/shape and shards, the
//                                     SHA-256 of every file, trainer state
//   DIR/step-000123/rank-00000.safetensors   one per rank that holds tensors
//
// Writing is atomic: files go to DIR/.step-000123.tmp-<host>-<pid>/, are
// fsynced with their directory, and the directory is renamed into place
// before `latest` is replaced (temporary file, fsync, rename). A failure at
// any point removes what was written and leaves the previous checkpoint and
// `latest` as they were; a writer killed midway leaves only its temporary
// directory, which readers ignore and the next writer on the host removes.
//
// Reading verifies every file's size and checksum, every safetensors header,
// and that the files hold exactly the shards the index lists, then assembles
// each tensor from its shards. Every problem is a one-line llvm::Error that
// starts with the path concerned.

#include "runtime/checkpoint/Safetensors.h"
#include "runtime/abi/DType.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace loom {

namespace checkpoint_io {
class SimulatedDiskSpace;
} // namespace checkpoint_io

/// A checkpointed tensor: its name, element type, shape and bytes.
using CheckpointTensor = HostTensor;

/// Where a rank's piece of a tensor lies in the global tensor (row-major
/// box: `offsets` per dimension, the piece's own shape giving the extent).
struct ShardPlacement {
  std::vector<int64_t> globalShape;
  std::vector<int64_t> offsets;
};

struct LearningRateSchedule {
  std::string kind;                       // "cosine", "linear", "constant", ...
  std::map<std::string, double> settings; // "peak", "warmup_steps", ...
  bool operator==(const LearningRateSchedule &other) const {
    return kind == other.kind && settings == other.settings;
  }
};

/// What a trainer needs, besides the tensors, to resume exactly.
struct CheckpointState {
  int64_t step = 0;
  std::string modelName;
  std::string compileFlags;
  std::map<std::string, int64_t> dataPosition; // e.g. "epoch", "sample"
  std::vector<uint64_t> rngState;
  LearningRateSchedule learningRateSchedule;
  std::map<std::string, int64_t> integers;    // anything else
  std::map<std::string, std::string> strings; // anything else

  bool operator==(const CheckpointState &other) const {
    return step == other.step && modelName == other.modelName &&
           compileFlags == other.compileFlags && dataPosition == other.dataPosition &&
           rngState == other.rngState &&
           learningRateSchedule == other.learningRateSchedule &&
           integers == other.integers && strings == other.strings;
  }
};

struct CheckpointWriteOptions {
  /// How many complete checkpoints DIR keeps, the new one included; older
  /// ones are deleted only once the new one is complete. 0 keeps all.
  unsigned keepLast = 0;
  /// Fault injection for tests: once this many bytes have been written to
  /// the checkpoint's files, every further write fails with ENOSPC, as on a
  /// full disk.
  std::optional<uint64_t> simulateFullDiskAfterBytes;
};

/// The file format written in index.json's "format" and "version".
constexpr const char *kCheckpointFormatName = "loom-checkpoint";
constexpr int64_t kCheckpointFormatVersion = 1;

/// "step-000123" (at least six digits).
std::string checkpointStepDirectoryName(int64_t step);
/// "rank-00003.safetensors".
std::string checkpointRankFileName(uint32_t rank);

/// Writes one checkpoint from any number of ranks: begin(), then one
/// writeRankFile() per rank that holds tensors (from several threads if
/// wanted, one call per rank), then commit(). Destroying a writer that was
/// not committed removes its temporary directory.
class CheckpointWriter {
public:
  static llvm::Expected<std::unique_ptr<CheckpointWriter>>
  begin(const std::string &dir, int64_t step, const CheckpointWriteOptions &options);
  ~CheckpointWriter();

  /// Writes rank `rank`'s tensors to its safetensors file and fsyncs it.
  /// `placements` is empty (each tensor is the whole tensor) or gives each
  /// tensor's place in its global tensor.
  llvm::Error writeRankFile(uint32_t rank, llvm::ArrayRef<CheckpointTensor> tensors,
                            llvm::ArrayRef<ShardPlacement> placements = {});

  /// Checks that the shards of every tensor tile it exactly, writes
  /// index.json, publishes the step directory and `latest`, then deletes
  /// checkpoints beyond keepLast. `state.step` must be the step of begin().
  llvm::Error commit(const CheckpointState &state);

  /// Removes the temporary directory now (the destructor does it quietly).
  llvm::Error abandon();

  const std::string &temporaryDirectory() const { return tempDir_; }

  /// What writeRankFile wrote, which commit() lists in the index.
  struct ShardRecord {
    std::string tensorName;
    DType dtype;
    std::vector<int64_t> globalShape;
    std::vector<int64_t> offsets;
    std::vector<int64_t> shape;
  };
  struct FileRecord {
    std::string fileName;
    uint32_t rank = 0;
    uint64_t bytes = 0;
    std::string sha256;
    std::vector<ShardRecord> shards;
  };

private:
  CheckpointWriter(std::string dir, int64_t step, CheckpointWriteOptions options,
                   std::string tempDir);

  llvm::Error publish(const CheckpointState &state);
  llvm::Error pruneOldCheckpoints();

  const std::string dir_;
  const int64_t step_;
  const CheckpointWriteOptions options_;
  const std::string tempDir_;
  std::unique_ptr<checkpoint_io::SimulatedDiskSpace> space_; // null: real disk
  std::mutex mutex_;                                         // guards the members below
  std::map<uint32_t, FileRecord> files_;
  bool failed_ = false;
  bool finished_ = false; // committed or abandoned
};

/// One rank's whole checkpoint in one call (begin, writeRankFile, commit);
/// on failure nothing is left behind.
llvm::Error writeCheckpoint(const std::string &dir, uint32_t rank,
                            llvm::ArrayRef<CheckpointTensor> tensors,
                            const CheckpointState &state,
                            const CheckpointWriteOptions &options = {});

struct LoadedCheckpoint {
  std::string directory; // the step directory read
  CheckpointState state;
  std::map<std::string, CheckpointTensor> tensors; // whole tensors, by name
};

/// Loads DIR (through DIR/latest) or DIR/step-N, verifying everything.
llvm::Expected<LoadedCheckpoint> loadCheckpoint(const std::string &path);

/// The step directory DIR/latest names (its full path), checked to exist.
llvm::Expected<std::string> latestCheckpoint(const std::string &dir);

/// The steps of the complete checkpoints in DIR, ascending.
llvm::Expected<std::vector<int64_t>> listCheckpointSteps(const std::string &dir);

/// A tensor a consumer (an executable's parameter table) needs.
struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};

/// Refuses a checkpoint lacking one of `expected` or holding it with another
/// dtype or shape; one line naming the tensor and the difference. Tensors
/// the checkpoint holds beyond `expected` (optimizer state) are fine.
llvm::Error checkMatches(const LoadedCheckpoint &checkpoint,
                         llvm::ArrayRef<TensorSpec> expected);

} // namespace loom

#endif
