// --loom-fuse-fp8-quantize: a current-scaling FP8 quantization with its
// transposed copy -- nn.amax of x per tiling, nn.fp8_scale of each, the
// copy's scale transposed (nn.transpose, or a view when one dim is 1), then
// nn.quantize -- becomes one nn.quantize_tiles call; under one scale for
// the whole tensor (tensorwise), one nn.quantize_tensor call. See
// Passes.td.

#include "passes/fusion/Passes.h"
#include "passes/fusion/RtBuffers.h"
#include "runtime/abi/Fp8Tiling.h"
#include "runtime/abi/KernelList.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/SmallPtrSet.h"

namespace loom {
#define GEN_PASS_DEF_FUSEFP8QUANTIZE
#include "passes/fusion/Passes.h.inc"
} // namespace loom

using namespace mlir;

namespace loom {
namespace {

using fusion::eraseDeadBuffers;
using fusion::rootOf;
using fusion::usedOnlyBy;
using fusion::writerOf;

struct Match {
  rt::KernelOp quantize, scale, amax, scaleT, amaxT, transpose; // transpose may be null
  Value x;
};

ArrayRef<int64_t> shapeOf(Value v) { return cast<MemRefType>(v.getType()).getShape(); }

bool isKernel(rt::KernelOp k, KernelId id, size_t ins, size_t outs) {
  return k && k.getKernelId() == id && k.getInputs().size() == ins &&
         k.getOutputs().size() == outs;
}

/// The nn.amax of x (the same view) behind an nn.fp8_scale.
rt::KernelOp amaxOf(rt::KernelOp scale, Value x) {
  rt::KernelOp amax = writerOf(scale.getInputs()[0]);
  if (!isKernel(amax, KernelId::Amax, 1, 1) || amax.getInputs()[0].getType() != x.getType() ||
      rootOf(amax.getInputs()[0]) != rootOf(x) || !usedOnlyBy(amax.getOutputs()[0], {amax, scale}))
    return {};
  return amax;
}

/// Whether nothing between `first` and q (in q's block) writes x or reads
/// or writes a buffer of `roots`, besides the chain's own kernels.
bool untouchedBetween(Operation *first, rt::KernelOp q, Value x, ArrayRef<Value> roots,
                      const llvm::SmallPtrSetImpl<Operation *> &inChain) {
  for (Operation *op = first; op != q.getOperation(); op = op->getNextNode()) {
    auto k = dyn_cast<rt::KernelOp>(op);
    if (!k || inChain.contains(op))
      continue;
    for (Value in : k.getInputs())
      if (llvm::is_contained(roots, rootOf(in)))
        return false;
    for (Value out : k.getOutputs())
      if (rootOf(out) == rootOf(x) || llvm::is_contained(roots, rootOf(out)))
        return false;
  }
  return true;
}

/// The tensorwise chain: nn.amax of all of x, nn.fp8_scale, nn.quantize of
/// x and its copy under that one scale.
std::optional<Match> matchTensor(rt::KernelOp q) {
  Match m;
  m.quantize = q;
  m.x = q.getInputs()[0];
  Value s = q.getInputs()[1];
  if (shapeOf(m.x).size() != 2 || !shapeOf(s).empty())
    return std::nullopt;
  m.scale = writerOf(s);
  if (!isKernel(m.scale, KernelId::Fp8Scale, 1, 1) || m.scale.getOutputs()[0] != s ||
      !(m.amax = amaxOf(m.scale, m.x)) || !shapeOf(m.amax.getOutputs()[0]).empty())
    return std::nullopt;
  for (Operation *op : {m.amax.getOperation(), m.scale.getOperation()})
    if (op->getBlock() != q->getBlock() || !op->isBeforeInBlock(q))
      return std::nullopt;
  llvm::SmallPtrSet<Operation *, 2> inChain{m.amax, m.scale};
  Operation *first = m.amax->isBeforeInBlock(m.scale) ? m.amax : m.scale;
  if (!untouchedBetween(first, q, m.x, {rootOf(s)}, inChain))
    return std::nullopt;
  return m;
}

std::optional<Match> match(rt::KernelOp q) {
  if (isKernel(q, KernelId::Quantize, 2, 2))
    return matchTensor(q);
  if (!isKernel(q, KernelId::Quantize, 3, 2))
    return std::nullopt;
  Match m;
  m.quantize = q;
  m.x = q.getInputs()[0];
  Value s = q.getInputs()[1], sT = q.getInputs()[2];
  if (shapeOf(m.x).size() != 2 || shapeOf(s).size() != 2 || shapeOf(sT).size() != 2)
    return std::nullopt;
  // Tiles that each lie in one 128 x 128 block of x, for x and its copy
  // (blockwise's): the fused kernel reads each block once. Wider tiles
  // (rowwise's rows of a whole row) keep the kernels one by one.
  const int64_t rows = shapeOf(m.x)[0], cols = shapeOf(m.x)[1];
  if (!fp8TilesInBlocks(rows, cols, fp8TileSize(rows, shapeOf(s)[0]),
                        fp8TileSize(cols, shapeOf(s)[1])) ||
      !fp8TilesInBlocks(cols, rows, fp8TileSize(cols, shapeOf(sT)[0]),
                        fp8TileSize(rows, shapeOf(sT)[1])))
    return std::nullopt;
  m.scale = writerOf(s);
  if (!isKernel(m.scale, KernelId::Fp8Scale, 1, 1) || m.scale.getOutputs()[0] != s ||
      !(m.amax = amaxOf(m.scale, m.x)))
    return std::nullopt;
  // The copy's scale: [a, b] of x's tiles transposed to qT's [b, a], by an
  // nn.transpose or, when a or b is 1, a view.
  rt::KernelOp w = writerOf(sT);
  Value tiles; // the fp8_scale result in x's layout
  if (isKernel(w, KernelId::Transpose, 1, 1)) {
    m.transpose = w;
    tiles = w.getInputs()[0];
    m.scaleT = writerOf(tiles);
  } else {
    m.scaleT = w;
    tiles = w ? w.getOutputs()[0] : Value();
    if (tiles && rootOf(tiles) == rootOf(sT) && shapeOf(tiles).size() == 2 &&
        shapeOf(tiles)[0] != 1 && shapeOf(tiles)[1] != 1)
      return std::nullopt; // a view is a transpose only of a row or a column
  }
  if (!isKernel(m.scaleT, KernelId::Fp8Scale, 1, 1) || shapeOf(tiles).size() != 2 ||
      shapeOf(tiles)[0] != shapeOf(sT)[1] || shapeOf(tiles)[1] != shapeOf(sT)[0] ||
      m.scaleT.getAttrs() != m.scale.getAttrs())
    return std::nullopt;
  if (m.scaleT != m.scale && !(m.amaxT = amaxOf(m.scaleT, m.x)))
    return std::nullopt;
  // The scale of the copy in x's layout feeds the transpose only, unless it
  // is x's own scale (the same tiles: 128 x 128 blocks), which is written.
  if (m.transpose && m.scaleT != m.scale && !usedOnlyBy(tiles, {m.scaleT, m.transpose}))
    return std::nullopt;
  // Between the first of these kernels and the quantization nothing else
  // reads the scales or writes x: the fused call writes them where the
  // quantization ran.
  SmallVector<Operation *> chain{m.amax, m.scale, m.scaleT};
  if (m.amaxT)
    chain.push_back(m.amaxT);
  if (m.transpose)
    chain.push_back(m.transpose);
  Operation *first = q;
  for (Operation *op : chain)
    if (op->getBlock() != q->getBlock() || !op->isBeforeInBlock(q))
      return std::nullopt;
    else if (op->isBeforeInBlock(first))
      first = op;
  llvm::SmallPtrSet<Operation *, 8> inChain(chain.begin(), chain.end());
  const Value roots[] = {rootOf(s), rootOf(sT), rootOf(tiles)};
  if (!untouchedBetween(first, q, m.x, roots, inChain))
    return std::nullopt;
  return m;
}

void fuse(Match &m) {
  rt::KernelOp q = m.quantize;
  OpBuilder b(q);
  if (q.getInputs().size() == 2) { // one scale: nn.quantize_tensor
    b.create<rt::KernelOp>(
        q.getLoc(), b.getStringAttr(kernelName(KernelId::QuantizeTensor)), ValueRange{m.x},
        ValueRange{q.getOutputs()[0], q.getOutputs()[1], q.getInputs()[1]}, m.scale.getAttrs(),
        q.getStreamAttr());
    Value amax = m.amax.getOutputs()[0];
    for (Operation *op : {q.getOperation(), m.amax.getOperation(), m.scale.getOperation()})
      op->erase();
    SmallVector<Value> dead{amax};
    eraseDeadBuffers(dead);
    return;
  }
  Value s = q.getInputs()[1], sT = q.getInputs()[2];
  b.create<rt::KernelOp>(q.getLoc(), b.getStringAttr(kernelName(KernelId::QuantizeTiles)),
                         ValueRange{m.x}, ValueRange{q.getOutputs()[0], q.getOutputs()[1], s, sT},
                         m.scale.getAttrs(), q.getStreamAttr());
  SmallVector<Value> dead{m.amax.getOutputs()[0]};
  if (m.amaxT)
    dead.push_back(m.amaxT.getOutputs()[0]);
  if (m.transpose && m.scaleT != m.scale)
    dead.push_back(m.transpose.getInputs()[0]);
  SmallVector<Operation *> erase{q, m.amax, m.scale};
  if (m.scaleT != m.scale)
    erase.push_back(m.scaleT);
  if (m.amaxT)
    erase.push_back(m.amaxT);
  if (m.transpose)
    erase.push_back(m.transpose);
  for (Operation *op : erase)
    op->erase();
  eraseDeadBuffers(dead);
}

int64_t elementsOf(Value v) { return cast<MemRefType>(v.getType()).getNumElements(); }

/// nn.quantize_tensor of x whose one writer is a kernel writing all of x:
/// the writer takes the FP8 scale epilogue (runtime/abi/KernelList.h) and
/// gives the scale, and the quantization becomes nn.quantize of x under it.
/// x is then read once (the amax pass goes) where the writer's backend
/// finishes the amax as it writes; elsewhere the scale is the same launch
/// after the writer that it was inside nn.quantize_tensor.
void takeScaleFromWriter(rt::KernelOp q) {
  Value x = q.getInputs()[0], scale = q.getOutputs()[2];
  // x's one writer; any other op that takes x (a collective, a copy) must
  // not sit between it and the quantization.
  auto users = fusion::usersThroughViews(x);
  SmallVector<rt::KernelOp> writers;
  for (auto [user, view] : users)
    if (auto k = dyn_cast<rt::KernelOp>(user); k && llvm::is_contained(k.getOutputs(), view))
      writers.push_back(k);
  if (writers.size() != 1)
    return;
  rt::KernelOp w = writers.front();
  if (w->getBlock() != q->getBlock() || !w->isBeforeInBlock(q) ||
      w.getKernelId() == KernelId::Fused)
    return;
  std::optional<int64_t> index;
  DictionaryAttr wAttrs = w.getAttrs();
  auto have = wAttrs.getAs<DenseI64ArrayAttr>(kFp8ScaleOfAttr);
  const int64_t ownOutputs = int64_t(w.getOutputs().size()) - (have ? int64_t(have.size()) : 0);
  for (int64_t i = 0; i < ownOutputs; ++i)
    if (rootOf(w.getOutputs()[i]) == rootOf(x) && elementsOf(w.getOutputs()[i]) == elementsOf(x))
      index = i;
  if (!index)
    return;
  // w is x's only writing kernel, so between w and q nothing else writes x
  // but an op of another kind.
  for (auto [user, view] : users)
    if (!isa<rt::KernelOp>(user) && user->getBlock() == q->getBlock() &&
        w->isBeforeInBlock(user) && user->isBeforeInBlock(q))
      return;
  auto format = q.getAttrs().getAs<StringAttr>("format");
  auto marginAttr = q.getAttrs().getAs<IntegerAttr>("margin");
  if (!format)
    return;
  const int64_t margin = marginAttr ? marginAttr.getInt() : 0;
  SmallVector<int64_t> scaleOf;
  if (have) {
    // A second output of the same writer (a gradient pair): the same
    // format and margin, at most two.
    auto haveFormat = wAttrs.getAs<StringAttr>(kFp8FormatAttr);
    auto haveMargin = wAttrs.getAs<IntegerAttr>(kFp8MarginAttr);
    if (have.size() >= 2 || haveFormat != format ||
        (haveMargin ? haveMargin.getInt() : 0) != margin ||
        llvm::is_contained(have.asArrayRef(), *index))
      return;
    scaleOf.assign(have.asArrayRef().begin(), have.asArrayRef().end());
  }
  scaleOf.push_back(*index);
  // The scale's buffer is made before its new writer.
  Operation *alloc = rootOf(scale).getDefiningOp();
  if (!alloc || !isa<rt::AllocOp>(alloc) || rootOf(scale) != scale)
    return;
  if (!alloc->isBeforeInBlock(w))
    alloc->moveBefore(w);
  OpBuilder b(q);
  w.getOutputsMutable().append(scale);
  NamedAttrList list(wAttrs);
  list.set(kFp8ScaleOfAttr, b.getDenseI64ArrayAttr(scaleOf));
  list.set(kFp8FormatAttr, format);
  if (margin != 0)
    list.set(kFp8MarginAttr, b.getI64IntegerAttr(margin));
  w.setAttrsAttr(list.getDictionary(b.getContext()));
  SmallVector<NamedAttribute> attrs{
      b.getNamedAttr("has_transposed_scale", b.getI64IntegerAttr(0))};
  b.create<rt::KernelOp>(q.getLoc(), b.getStringAttr(kernelName(KernelId::Quantize)),
                         ValueRange{x, scale}, ValueRange{q.getOutputs()[0], q.getOutputs()[1]},
                         b.getDictionaryAttr(attrs), q.getStreamAttr());
  q->erase();
}

struct FuseFp8QuantizePass : impl::FuseFp8QuantizeBase<FuseFp8QuantizePass> {
  using FuseFp8QuantizeBase::FuseFp8QuantizeBase;
  void runOnOperation() override {
    getOperation().walk([&](rt::ProgramOp program) {
      SmallVector<rt::KernelOp> quantizations;
      for (Operation &op : program.getBlock())
        if (auto kernel = dyn_cast<rt::KernelOp>(op))
          if (kernel.getKernelId() == KernelId::Quantize)
            quantizations.push_back(kernel);
      for (rt::KernelOp q : quantizations)
        if (std::optional<Match> m = match(q))
          fuse(*m);
      // Then the writers of the tensors quantized whole give their scales.
      if (!writerScales)
        return;
      SmallVector<rt::KernelOp> whole;
      for (Operation &op : program.getBlock())
        if (auto kernel = dyn_cast<rt::KernelOp>(op))
          if (kernel.getKernelId() == KernelId::QuantizeTensor)
            whole.push_back(kernel);
      for (rt::KernelOp q : whole)
        takeScaleFromWriter(q);
    });
  }
};

} // namespace
} // namespace loom
