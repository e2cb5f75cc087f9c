#include "runtime/abi/Mesh.h"

#include <cstring>
#include <set>

namespace loom {

namespace {

llvm::Error failure(const std::string &message) {
  return llvm::createStringError(std::errc::invalid_argument, message.c_str());
}

std::string axisList(llvm::ArrayRef<std::string> axes) {
  std::string text = "[";
  for (size_t i = 0; i < axes.size(); ++i)
    text += (i ? ", \"" : "\"") + axes[i] + "\"";
  return text + "]";
}

/// Calls `visit(offset in tensor elements)` for each contiguous row of the
/// block (the innermost dimension's extent), in row-major order.
template <typename Visit>
void forEachRow(llvm::ArrayRef<int64_t> shape, const TensorBlock &block,
                Visit visit) {
  size_t rank = shape.size();
  if (rank == 0) {
    visit(int64_t(0), int64_t(1));
    return;
  }
  for (int64_t d : block.shape)
    if (d == 0)
      return;
  std::vector<int64_t> strides(rank, 1);
  for (size_t d = rank - 1; d > 0; --d)
    strides[d - 1] = strides[d] * shape[d];
  std::vector<int64_t> index(rank, 0);
  int64_t rowLength = block.shape[rank - 1];
  while (true) {
    int64_t offset = 0;
    for (size_t d = 0; d < rank; ++d)
      offset += (block.offsets[d] + index[d]) * strides[d];
    visit(offset, rowLength);
    // Advance the outer dimensions (the last one is the row).
    size_t d = rank - 1;
    while (d > 0) {
      --d;
      if (++index[d] < block.shape[d])
        break;
      index[d] = 0;
      if (d == 0)
        return;
    }
    if (rank == 1)
      return;
  }
}

} // namespace

int64_t Mesh::numRanks() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::vector<int64_t> rowGroupOrder(int64_t rows, int64_t groups, int64_t blocks) {
  std::vector<int64_t> order(rows);
  const int64_t perGroup = rows / groups, share = perGroup / blocks;
  for (int64_t r = 0; r < blocks; ++r)
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t i = 0; i < share; ++i)
        order[(r * groups + g) * share + i] = g * perGroup + r * share + i;
  return order;
}

int Mesh::axisIndex(llvm::StringRef axis) const {
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] == axis)
      return static_cast<int>(i);
  return -1;
}

std::vector<int64_t> Mesh::coordinates(int64_t rank) const {
  std::vector<int64_t> coords(shape.size(), 0);
  for (size_t d = shape.size(); d > 0; --d) {
    coords[d - 1] = rank % shape[d - 1];
    rank /= shape[d - 1];
  }
  return coords;
}

llvm::Expected<Group> groupOf(const Mesh &mesh, int64_t rank,
                              llvm::ArrayRef<std::string> axes) {
  std::vector<int> axisIndices;
  for (const std::string &axis : axes) {
    int index = mesh.axisIndex(axis);
    if (index < 0)
      return failure("axis '" + axis + "' is not a mesh axis (the mesh has " +
                     axisList(mesh.axes) + ")");
    if (std::find(axisIndices.begin(), axisIndices.end(), index) !=
        axisIndices.end())
      return failure("axis '" + axis + "' is listed twice");
    axisIndices.push_back(index);
  }
  if (rank < 0 || rank >= mesh.numRanks())
    return failure("rank " + std::to_string(rank) + " is outside the mesh of " +
                   std::to_string(mesh.numRanks()) + " ranks");
  std::vector<int64_t> coords = mesh.coordinates(rank);
  int64_t size = 1;
  for (int a : axisIndices)
    size *= mesh.shape[a];
  Group group;
  for (int64_t g = 0; g < size; ++g) {
    // g is row-major over the listed axes: the last listed varies fastest.
    std::vector<int64_t> member = coords;
    int64_t rest = g;
    for (size_t k = axisIndices.size(); k > 0; --k) {
      int a = axisIndices[k - 1];
      member[a] = rest % mesh.shape[a];
      rest /= mesh.shape[a];
    }
    int64_t memberRank = 0;
    for (size_t d = 0; d < member.size(); ++d)
      memberRank = memberRank * mesh.shape[d] + member[d];
    if (memberRank == rank)
      group.index = g;
    group.members.push_back(memberRank);
  }
  return group;
}

llvm::Expected<TensorBlock> shardBlock(const Mesh &mesh, int64_t rank,
                                 const Sharding &sharding,
                                 llvm::ArrayRef<int64_t> globalShape) {
  TensorBlock block;
  block.offsets.assign(globalShape.size(), 0);
  block.shape.assign(globalShape.begin(), globalShape.end());
  if (sharding.empty())
    return block;
  if (sharding.size() != globalShape.size())
    return failure("sharding " + formatSharding(sharding) + " lists " +
                   std::to_string(sharding.size()) +
                   " dimensions for a tensor of " +
                   std::to_string(globalShape.size()));
  std::set<std::string> used;
  for (size_t d = 0; d < sharding.size(); ++d) {
    for (const std::string &axis : sharding[d])
      if (!used.insert(axis).second)
        return failure("sharding " + formatSharding(sharding) +
                       " uses axis '" + axis + "' twice");
    auto group = groupOf(mesh, rank, sharding[d]);
    if (!group)
      return group.takeError();
    if (globalShape[d] % group->size() != 0)
      return failure("dimension " + std::to_string(d) + " (" +
                     std::to_string(globalShape[d]) +
                     ") does not divide into " +
                     std::to_string(group->size()) + " blocks along " +
                     axisList(sharding[d]));
    block.shape[d] = globalShape[d] / group->size();
    block.offsets[d] = group->index * block.shape[d];
  }
  return block;
}

bool ownsBlock(const Mesh &mesh, int64_t rank, const Sharding &sharding) {
  std::vector<int64_t> coords = mesh.coordinates(rank);
  for (size_t a = 0; a < mesh.axes.size(); ++a) {
    bool used = false;
    for (const auto &axes : sharding)
      used = used || std::find(axes.begin(), axes.end(), mesh.axes[a]) != axes.end();
    if (!used && coords[a] != 0)
      return false;
  }
  return true;
}

void extractBlock(const void *tensor, llvm::ArrayRef<int64_t> shape,
                  size_t elementSize, const TensorBlock &block, void *out) {
  const auto *src = static_cast<const uint8_t *>(tensor);
  auto *dst = static_cast<uint8_t *>(out);
  forEachRow(shape, block, [&](int64_t offset, int64_t length) {
    std::memcpy(dst, src + offset * elementSize, length * elementSize);
    dst += length * elementSize;
  });
}

void insertBlock(void *tensor, llvm::ArrayRef<int64_t> shape,
                 size_t elementSize, const TensorBlock &block, const void *in) {
  auto *dst = static_cast<uint8_t *>(tensor);
  const auto *src = static_cast<const uint8_t *>(in);
  forEachRow(shape, block, [&](int64_t offset, int64_t length) {
    std::memcpy(dst + offset * elementSize, src, length * elementSize);
    src += length * elementSize;
  });
}

bool isReplicated(const Sharding &sharding) {
  for (const auto &axes : sharding)
    if (!axes.empty())
      return false;
  return true;
}

std::string formatSharding(const Sharding &sharding) {
  if (isReplicated(sharding))
    return "replicated";
  std::string text = "[";
  for (size_t d = 0; d < sharding.size(); ++d)
    text += (d ? ", " : "") + axisList(sharding[d]);
  return text + "]";
}

} // namespace loom
