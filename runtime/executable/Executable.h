#ifndef LOOM_RUNTIME_EXECUTABLE_EXECUTABLE_H
#define LOOM_RUNTIME_EXECUTABLE_EXECUTABLE_H

// The in-memory form of a Loom executable (.loomx). The compiler fills one of
// these from the `rt` dialect and serializes it; the runtime loads, verifies
// and runs it. It is plain data: no MLIR, so the runtime links without MLIR.
// runtime/schema/executable.fbs is its on-disk form, field for field.

#include "runtime/abi/Collective.h"
#include "runtime/abi/KernelAttrs.h"
#include "runtime/abi/Mesh.h"
#include "runtime/abi/DType.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace loom {

/// Version of the on-disk format. Version 2 appended the mesh, shardings and
/// collectives; a version-1 file (one rank, no collectives) still loads.
/// Exchanges (collective kind 7 with send/recv peers) came later without a
/// bump: they are appended fields that older files lack, and older readers
/// refuse the unknown kind rather than misread it. The pipeline schedule
/// (Executable::scheduleCsv) was appended the same way: older files lack it
/// and load without a schedule; older readers ignore it.
constexpr uint32_t kExecutableFormatVersion = 2;
constexpr uint32_t kOldestReadableFormatVersion = 1;

/// Where a buffer lives. Persistent memory (parameters, constants, optimizer
/// state) survives across steps; scratch memory is reused within a step by the
/// memory planner.
enum class ArenaKind : uint8_t { Persistent = 0, Scratch = 1, Host = 2 };
constexpr int kNumArenas = 3;

/// What a buffer holds, by the op that writes it (for memory reports).
enum class MemoryCategory : uint8_t {
  Unknown = 0, // not recorded (older files, hand-written rt)
  Input = 1,   // a step input
  Activation = 2,
  ActivationGrad = 3,
  WeightGrad = 4,
  Workspace = 5,     // a kernel's scratch
  Communication = 6, // a collective's result
  Step = 7,          // the rest: loss, norms, the optimizer's work
};
inline constexpr uint8_t kMaxMemoryCategory = 7;
const char *memoryCategoryName(MemoryCategory category);

struct BufferDesc {
  std::string name; // for listings and errors only; may be empty
  ArenaKind arena = ArenaKind::Scratch;
  uint64_t offset = 0; // bytes from the start of the arena
  DType dtype = DType::F32;
  std::vector<int64_t> shape; // row-major, contiguous
  /// For a view of another buffer's bytes (a reshape): that buffer's index,
  /// which is not itself a view and holds at least as many bytes at the same
  /// arena and offset. -1 for a buffer of its own.
  int64_t aliasOf = -1;
  MemoryCategory category = MemoryCategory::Unknown;
  /// The microbatch whose value the buffer holds; -1: none.
  int32_t microbatch = -1;

  /// Product of the shape; -1 when a dimension is negative or the product
  /// overflows int64 (verifyExecutable rejects both).
  int64_t numElements() const;
  /// numElements() * dtypeSize(dtype); UINT64_MAX when the shape or dtype is
  /// invalid or the byte count overflows, so it never fits inside an arena.
  uint64_t sizeInBytes() const;
};


enum class InstrKind : uint8_t {
  Kernel = 0,      // a named kernel from runtime/abi/Kernels.def
  Copy = 1,        // inputs[0] -> outputs[0], same byte size
  RecordEvent = 2, // `event` is recorded on `stream`
  WaitEvent = 3,   // `stream` waits for `event`
  Collective = 4,  // `collective` over the ranks of a mesh group
};

struct Instruction {
  InstrKind kind = InstrKind::Kernel;
  std::string kernel; // for Kind::Kernel, e.g. "nn.matmul"
  uint32_t stream = 0;
  uint32_t event = 0; // for RecordEvent/WaitEvent
  std::vector<uint32_t> inputs;  // buffer indices
  std::vector<uint32_t> outputs; // buffer indices
  std::vector<NamedAttr> attrs;
  std::string location; // source location of the op, for errors and traces
  /// For Kind::Collective: inputs/outputs hold 0 or 1 buffers, or, for an
  /// exchange, one per send / receive peer.
  CollectiveDesc collective;
  /// Runs only in the first step after the parameters were set from outside
  /// the program (initialized, loaded, restored): it recomputes persistent
  /// state that the other steps keep up to date themselves (rt.kernel
  /// `refresh`). Running it in every step would give the same results.
  bool refresh = false;
};

/// How a parameter's initial value is made when no weights are supplied.
enum class InitKind : uint8_t {
  Zeros = 0,
  Ones = 1,
  Normal = 2,  // N(0, scale^2), seeded
  Uniform = 3, // U(-scale, scale), seeded
  Data = 4,    // `data` holds the raw little-endian bytes
};

struct ParameterDesc {
  std::string name; // fully-qualified, e.g. "model.layers.0.mlp.up_proj.weight"
  DType dtype = DType::F32;
  std::vector<int64_t> shape; // global shape
  bool trainable = true;
  InitKind init = InitKind::Zeros;
  double initScale = 0.0;
  std::vector<uint8_t> data; // for InitKind::Data, the global tensor
  /// How ranks split the global tensor; a rank's binding holds its block.
  Sharding sharding;
};

struct ParamBinding {
  uint32_t parameter = 0; // index into Executable::parameters
  uint32_t buffer = 0;    // index into RankProgram::buffers
};

struct IOBinding {
  std::string name;
  uint32_t buffer = 0;
  /// For inputs of a multi-rank program: the global shape the caller holds
  /// and how it is split; the buffer holds this rank's block. Empty: the
  /// buffer's shape, whole on every rank.
  std::vector<int64_t> globalShape;
  Sharding sharding;
  /// The global rows come as this many consecutive groups (microbatches);
  /// each rank's block of dim 0 holds its share of every group, in order
  /// (see rowGroupOrder). 1: the rows as they are.
  int64_t rowGroups = 1;
};

struct RankProgram {
  uint32_t rank = 0;
  uint64_t arenaSize[kNumArenas] = {0, 0, 0}; // bytes, by ArenaKind
  std::vector<BufferDesc> buffers;
  std::vector<std::string> streams; // stream names; index = stream id
  uint32_t numEvents = 0;
  std::vector<ParamBinding> params;
  std::vector<IOBinding> inputs;
  std::vector<IOBinding> outputs;
  std::vector<Instruction> instructions;
};

struct Executable {
  uint32_t formatVersion = kExecutableFormatVersion;
  std::string modelName;
  std::string mode; // "infer" or "train"
  std::string compileFlags;
  std::vector<ParameterDesc> parameters;
  std::vector<RankProgram> ranks;
  /// The device mesh; empty: one rank.
  Mesh mesh;
  /// For a pipelined executable, the schedule its ranks run: PyTorch
  /// pipelining's CSV, one row per rank of the mesh's "pp" axis, after a
  /// `# loom-schedule kind=...` header (runtime/schedule/Schedule.h reads it;
  /// the runtime does not need it). Empty: not pipelined.
  std::string scheduleCsv;
  /// The model's vocabulary for a training step (its loss's classes): the
  /// training loop refuses data with a token at or past it. 0: unknown.
  int64_t vocabSize = 0;
};

/// Serializes to the flatbuffers form.
std::vector<uint8_t> serializeExecutable(const Executable &exe);

/// Parses and fully verifies: flatbuffers verifier first, then Loom's own
/// checks (version, buffers inside arenas, known kernels with the right
/// arity, consistent sizes, valid indices). Never crashes on bad bytes.
llvm::Expected<Executable> loadExecutable(const uint8_t *data, size_t size);
/// Loads a .loomx file: a regular file whose per-section CRC-32C checksums
/// (tables and programs, each parameter's data) are checked first unless
/// `verifyChecksum` is false. A file without checksums (an older Loom's) is
/// refused unless `verifyChecksum` is false.
llvm::Expected<Executable> loadExecutableFile(const std::string &path,
                                              bool verifyChecksum = true);
/// Writes the flatbuffer and its checksums atomically (temporary file, fsync,
/// rename; a device such as /dev/null is written in place).
llvm::Error writeExecutableFile(const Executable &exe, const std::string &path);

/// Semantic checks alone (also run by loadExecutable).
llvm::Error verifyExecutable(const Executable &exe);

} // namespace loom

#endif
