// Transformer layers of a Loom function: which layer each op belongs to,
// from the module paths (or names) of the parameters it depends on.

#include "passes/training/Layers.h"

#include "dialects/nn/NNOps.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"

#include <regex>

using namespace mlir;

namespace loom {

namespace {

/// A repeated block of the model: the numbered child `index` of the module
/// list `list` (`model.layers.3`: list `model.layers`, block 3).
struct ModelBlock {
  std::string list;
  int64_t index;
};

/// The block a module path lies in: the path up to its first numbered
/// component (`model.layers.3.mlp.up_proj` -> `model.layers`, 3).
std::optional<ModelBlock> blockOf(StringRef modulePath) {
  llvm::SmallVector<StringRef> parts;
  modulePath.split(parts, '.');
  for (auto [i, part] : llvm::enumerate(parts)) {
    if (part.empty() || !llvm::all_of(part, llvm::isDigit))
      continue;
    int64_t index = 0;
    if (part.getAsInteger(10, index))
      return std::nullopt;
    return ModelBlock{llvm::join(llvm::ArrayRef(parts).take_front(i), "."), index};
  }
  return std::nullopt;
}

/// Without a module path (IR written by hand or imported before paths were
/// recorded): the layer index in a parameter name
/// (`model.layers.12.mlp.up.weight` -> 12).
std::optional<int64_t> layerOfName(StringRef name) {
  static const std::regex pattern(R"((^|\.)(layers|layer|h|blocks|block)\.([0-9]+)\.)");
  std::smatch match;
  std::string s = name.str();
  if (!std::regex_search(s, match, pattern))
    return std::nullopt;
  return std::stoll(match[3].str());
}

} // namespace

FailureOr<LayerAssignment> assignLayers(func::FuncOp func, llvm::StringRef purpose) {
  LayerAssignment result;
  llvm::DenseMap<Operation *, int64_t> &layer = result.layer;
  int64_t &numLayers = result.numLayers;
  // Parameters by the block of the module that holds them (the
  // importer's module path); ops by the deepest parameter they depend on.
  // Lists of blocks count in the order their first parameter appears.
  llvm::SmallVector<Operation *> unnumbered;
  llvm::SmallVector<std::pair<Operation *, ModelBlock>> inBlocks;
  llvm::StringMap<int64_t> blocksOfList;
  llvm::SmallVector<std::string> lists;
  int64_t byName = 0;
  for (Operation &op : func.getBody().front()) {
    auto param = dyn_cast<nn::ParameterOp>(op);
    if (!param)
      continue;
    std::optional<ModelBlock> block;
    if (std::optional<StringRef> path = param.getModulePath()) {
      block = blockOf(*path);
    } else if (auto l = layerOfName(param.getName())) {
      block = ModelBlock{"", *l};
      ++byName;
    }
    if (!block) {
      unnumbered.push_back(&op);
      continue;
    }
    auto [it, added] = blocksOfList.try_emplace(block->list, 0);
    if (added)
      lists.push_back(block->list);
    it->second = std::max(it->second, block->index + 1);
    inBlocks.push_back({&op, *block});
  }
  llvm::StringMap<int64_t> firstLayerOfList;
  for (const std::string &list : lists) {
    firstLayerOfList[list] = numLayers;
    numLayers += blocksOfList[list];
  }
  for (auto &[op, block] : inBlocks)
    layer[op] = firstLayerOfList[block.list] + block.index;
  result.byName = byName;
  if (byName > 0 && purpose == "partition")
    mlir::emitRemark(func.getLoc())
        << byName << " parameter(s) have no module path: their layers come from their names";
  if (numLayers == 0)
    return mlir::emitError(func.getLoc(), "no transformer layers to " + purpose.str() + ": no parameter's "
                          "module path has a numbered block (`model.layers.N`), and no "
                          "parameter name without one has a layer index (`layers.N.`, `h.N.`, "
                          "`blocks.N.`)");
  // Unnumbered parameters first used before any layer's op are the
  // prologue (-1), after the last one the epilogue (L); those used amid
  // the layers (a rotary table every layer reads) belong to no layer and
  // go with their first user.
  llvm::DenseMap<Operation *, int64_t> firstUse;
  int64_t position = 0, firstLayerOp = -1, lastLayerOp = -1;
  for (Operation &op : func.getBody().front()) {
    ++position;
    for (Value v : op.getOperands())
      if (Operation *def = v.getDefiningOp()) {
        if (!firstUse.count(def))
          firstUse[def] = position;
        if (isa<nn::ParameterOp>(def) && layer.count(def)) {
          if (firstLayerOp < 0)
            firstLayerOp = position;
          lastLayerOp = position;
        }
      }
  }
  for (Operation *param : unnumbered) {
    int64_t first = firstUse.lookup(param);
    if (first > 0 && first < firstLayerOp)
      layer[param] = -1;
    else if (first > lastLayerOp)
      layer[param] = numLayers;
  }

  for (Operation &op : func.getBody().front()) {
    if (isa<nn::ParameterOp>(op))
      continue;
    int64_t l = -1;
    bool any = false;
    for (Value v : op.getOperands())
      if (Operation *def = v.getDefiningOp(); def && layer.count(def)) {
        l = any ? std::max(l, layer[def]) : layer[def];
        any = true;
      }
    layer[&op] = any ? l : -1;
  }
  return result;
}

} // namespace loom
