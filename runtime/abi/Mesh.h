#ifndef LOOM_RUNTIME_ABI_MESH_H
#define LOOM_RUNTIME_ABI_MESH_H

// The device mesh of a multi-rank executable and what follows from it: which
// ranks a collective over some axes joins, and which block of a global
// tensor a sharded parameter or input holds on a rank.
//
// Ranks are numbered row-major over the mesh coordinates (axes ["dp", "tp"],
// shape [2, 2]: rank = dp * 2 + tp). A group over axes A holds the ranks that
// differ from the caller only along A, ordered row-major by their
// coordinates along A in the order A lists them.

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

struct Mesh {
  std::vector<std::string> axes;
  std::vector<int64_t> shape;

  /// Product of the shape: 1 for the empty mesh (one rank).
  int64_t numRanks() const;
  /// The index of `axis` in `axes`, or -1.
  int axisIndex(llvm::StringRef axis) const;
  std::vector<int64_t> coordinates(int64_t rank) const;
};

/// A collective's participants, as seen from one member.
struct Group {
  std::vector<int64_t> members; // absolute ranks, in group order
  int64_t index = 0;            // the caller's position in `members`
  int64_t size() const { return static_cast<int64_t>(members.size()); }
};

/// The group of `rank` over `axes`; an error names an unknown or repeated
/// axis. No axes: the caller alone.
llvm::Expected<Group> groupOf(const Mesh &mesh, int64_t rank,
                              llvm::ArrayRef<std::string> axes);

/// How a tensor is split: for each dimension of its global shape, the mesh
/// axes splitting it (block distribution, the first axis outermost). Empty
/// (no dimensions listed) or all-empty: every rank holds the whole tensor.
using Sharding = std::vector<std::vector<std::string>>;

/// A box of a row-major tensor: per dimension, where it starts and how long.
struct TensorBlock {
  std::vector<int64_t> offsets;
  std::vector<int64_t> shape;
};

/// The block of a tensor of `globalShape` that `rank` holds under
/// `sharding`; an error when a dimension does not divide evenly, an axis is
/// unknown or used twice, or the sharding's rank differs from the shape's.
llvm::Expected<TensorBlock> shardBlock(const Mesh &mesh, int64_t rank,
                                 const Sharding &sharding,
                                 llvm::ArrayRef<int64_t> globalShape);

/// Whether `rank` is the first of the ranks holding the same block (its
/// coordinate is 0 along every axis the sharding does not use): exactly one
/// rank per block answers yes, which is the one that saves it.
bool ownsBlock(const Mesh &mesh, int64_t rank, const Sharding &sharding);

/// The order in which the caller hands over the rows of a batch whose
/// `rows` come as `groups` consecutive groups (microbatches) and whose dim 0
/// is split into `blocks` contiguous blocks (one per data rank), so that
/// block r holds rows r·g/blocks .. (r+1)·g/blocks - 1 of every group g, in
/// order: element i is the batch row that goes at position i. Requires
/// rows divisible by groups × blocks.
std::vector<int64_t> rowGroupOrder(int64_t rows, int64_t groups, int64_t blocks);

/// Copies the elements of `block` out of a row-major tensor of `shape` into
/// a dense buffer / from a dense buffer into the tensor.
void extractBlock(const void *tensor, llvm::ArrayRef<int64_t> shape,
                  size_t elementSize, const TensorBlock &block, void *out);
void insertBlock(void *tensor, llvm::ArrayRef<int64_t> shape,
                 size_t elementSize, const TensorBlock &block, const void *in);

/// "[["dp"], []]"-style text for listings and errors; "replicated" when no
/// dimension is split.
std::string formatSharding(const Sharding &sharding);
bool isReplicated(const Sharding &sharding);

} // namespace loom

#endif
