// --loom-fp8-mark: the FP8 precision policy as an attribute on the GEMMs it
// governs (see Passes.td).

#include "passes/fp8/Passes.h"

#include "dialects/nn/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/GlobPattern.h"

#include <algorithm>

namespace loom {
#define GEN_PASS_DEF_FP8MARK
#include "passes/fp8/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

/// The parameter a value reads, through casts and reshapes; null if none.
nn::ParameterOp parameterOf(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (auto p = dyn_cast<nn::ParameterOp>(def))
      return p;
    if (!isa<nn::CastOp, nn::ReshapeOp>(def))
      return {};
    v = def->getOperand(0);
  }
  return {};
}

/// Whether an nn.embedding reads the parameter (through casts and
/// reshapes): a tied embedding, which stays in the compute type.
bool readByEmbedding(nn::ParameterOp param) {
  SmallVector<Value> work{param.getResult()};
  while (!work.empty()) {
    Value v = work.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (isa<nn::EmbeddingOp>(user))
        return true;
      if (isa<nn::CastOp, nn::ReshapeOp>(user))
        work.push_back(user->getResult(0));
    }
  }
  return false;
}

/// Whether the GEMM's result reaches an op that `stops` through no other
/// contraction.
template <typename Stops>
bool reachesWithoutContraction(Operation *gemm, Stops &&stops) {
  llvm::SetVector<Operation *> seen;
  SmallVector<Value> work(gemm->getResults());
  while (!work.empty()) {
    Value v = work.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (stops(user))
        return true;
      if (isa<nn::FlopCountOpInterface>(user) || !seen.insert(user))
        continue;
      work.append(user->result_begin(), user->result_end());
    }
  }
  return false;
}

/// Whether the GEMM's result reaches the loss or a result of the function
/// through no other contraction: the model's head.
bool feedsOutput(Operation *gemm) {
  return reachesWithoutContraction(gemm, [](Operation *user) {
    return isa<func::ReturnOp, nn::ClassParallelLossOpInterface>(user);
  });
}

/// Whether the GEMM's result reaches a top-k through no other contraction:
/// a mixture-of-experts router's logits, which stay in the compute type
/// (the choice of experts is sensitive to their rounding, and the GEMM is
/// narrow).
bool feedsTopk(Operation *gemm) {
  return reachesWithoutContraction(
      gemm, [](Operation *user) { return isa<nn::TopkOp, nn::RouterOp>(user); });
}

struct Fp8MarkPass : public loom::impl::Fp8MarkBase<Fp8MarkPass> {
  using Fp8MarkBase::Fp8MarkBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::string spelled = recipe;
    std::replace(spelled.begin(), spelled.end(), '-', '_');
    std::optional<nn::Fp8Recipe> r = nn::symbolizeFp8Recipe(spelled);
    if (!r) {
      module.emitError() << "unknown FP8 recipe '" << recipe
                         << "' (expected tensorwise, tensorwise-delayed, rowwise or blockwise)";
      return signalPassFailure();
    }
    std::optional<nn::Fp8Format> f = nn::symbolizeFp8Format(format);
    if (!f) {
      module.emitError() << "unknown FP8 format '" << format << "' (expected e4m3 or hybrid)";
      return signalPassFailure();
    }
    auto diag = [&]() { return module.emitError(); };
    if (failed(nn::Fp8PolicyAttr::verify(diag, *r, *f, margin, history, -1)))
      return signalPassFailure();
    auto policy = nn::Fp8PolicyAttr::get(module.getContext(), *r, *f, margin, history, -1);
    SmallVector<llvm::GlobPattern> patterns;
    for (const std::string &p : exclude) {
      auto glob = llvm::GlobPattern::create(p);
      if (!glob) {
        module.emitError() << "bad --fp8-exclude pattern '" << p
                           << "': " << llvm::toString(glob.takeError());
        return signalPassFailure();
      }
      patterns.push_back(std::move(*glob));
    }

    module.walk([&](nn::MatmulOp gemm) {
      nn::ParameterOp weight = parameterOf(gemm.getRhs());
      auto rhsType = cast<RankedTensorType>(gemm.getRhs().getType());
      auto lhsType = cast<RankedTensorType>(gemm.getLhs().getType());
      if (!weight || rhsType.getRank() != 2 || lhsType.getRank() < 2 ||
          (gemm.getTransposeLhs() && lhsType.getRank() != 2))
        return;
      if (readByEmbedding(weight) || feedsOutput(gemm) || feedsTopk(gemm))
        return;
      StringRef name = weight.getName();
      if (llvm::any_of(patterns, [&](const llvm::GlobPattern &g) { return g.match(name); }))
        return;
      gemm->setAttr(nn::kFp8PolicyAttrName, policy);
    });
    // Mixture-of-experts layers: their experts' grouped GEMMs have no FP8
    // form yet. Said once, so that a model whose FLOPs are mostly in its
    // experts does not look cast.
    int64_t grouped = 0;
    Operation *first = nullptr;
    module.walk([&](nn::GroupedMatmulOp op) {
      if (!first)
        first = op;
      ++grouped;
    });
    if (first)
      first->emitRemark() << "--fp8: the experts' " << grouped
                          << " grouped GEMM(s) stay in "
                          << cast<RankedTensorType>(first->getResult(0).getType()).getElementType()
                          << " (no FP8 grouped GEMM yet); the model's other linear layers go FP8";
  }
};

} // namespace
