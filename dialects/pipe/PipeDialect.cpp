#include "dialects/pipe/PipeDialect.h"
#include "runtime/schedule/ScheduleVerifier.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace loom::pipe;
namespace lp = loom::pipeline;

#include "dialects/pipe/PipeDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/pipe/PipeAttrs.cpp.inc"

#define GET_OP_CLASSES
#include "dialects/pipe/PipeOps.cpp.inc"

void PipeDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/pipe/PipeAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/pipe/PipeOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// #pipe.action
//===----------------------------------------------------------------------===//

lp::Action ActionAttr::getAction() const {
  return {getKind(), int(getStage()), int(getMb()), int(getBStage()), int(getBMb())};
}

ActionAttr ActionAttr::get(MLIRContext *context, const lp::Action &a) {
  return get(context, a.kind, a.stage, a.mb, a.bStage, a.bMb);
}

Attribute ActionAttr::parse(AsmParser &parser, Type) {
  std::string name;
  int64_t stage = 0, mb = 0, bStage = -1, bMb = -1;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess() || parser.parseKeywordOrString(&name))
    return {};
  std::optional<lp::ActionKind> kind;
  for (lp::ActionKind k : {lp::ActionKind::F, lp::ActionKind::B, lp::ActionKind::I,
                           lp::ActionKind::W, lp::ActionKind::SendF, lp::ActionKind::RecvF,
                           lp::ActionKind::SendB, lp::ActionKind::RecvB,
                           lp::ActionKind::OverlapFB})
    if (lp::actionKindName(k) == name)
      kind = k;
  if (!kind) {
    parser.emitError(loc, "unknown pipeline action '")
        << name << "' (expected F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B or OVERLAP_F_B)";
    return {};
  }
  if (parser.parseComma() || parser.parseKeyword("stage") || parser.parseEqual() ||
      parser.parseInteger(stage) || parser.parseComma() || parser.parseKeyword("mb") ||
      parser.parseEqual() || parser.parseInteger(mb))
    return {};
  if (*kind == lp::ActionKind::OverlapFB &&
      (parser.parseComma() || parser.parseKeyword("b_stage") || parser.parseEqual() ||
       parser.parseInteger(bStage) || parser.parseComma() || parser.parseKeyword("b_mb") ||
       parser.parseEqual() || parser.parseInteger(bMb)))
    return {};
  if (parser.parseGreater())
    return {};
  if (stage < 0 || mb < 0 || (*kind == lp::ActionKind::OverlapFB && (bStage < 0 || bMb < 0))) {
    parser.emitError(loc, "pipeline action indices must be non-negative");
    return {};
  }
  return ActionAttr::get(parser.getContext(), *kind, stage, mb, bStage, bMb);
}

void ActionAttr::print(AsmPrinter &printer) const {
  printer << "<" << lp::actionKindName(getKind()) << ", stage = " << getStage()
          << ", mb = " << getMb();
  if (getKind() == lp::ActionKind::OverlapFB)
    printer << ", b_stage = " << getBStage() << ", b_mb = " << getBMb();
  printer << ">";
}

//===----------------------------------------------------------------------===//
// pipe.schedule
//===----------------------------------------------------------------------===//

lp::Schedule loom::pipe::scheduleFromOp(ScheduleOp op) {
  lp::Schedule s;
  auto kind = lp::parseScheduleKind(op.getKind());
  if (kind)
    s.kind = *kind;
  else
    llvm::consumeError(kind.takeError());
  s.numRanks = int(op.getRanks());
  s.numStages = int(op.getStages());
  s.numMicrobatches = int(op.getMicrobatches());
  s.numChains = int(op.getChains());
  for (int64_t r : op.getStageRanks())
    s.stageRank.push_back(int(r));
  s.ranks.resize(std::max(0, s.numRanks));
  for (auto rank : op.getBody().front().getOps<RankOp>()) {
    int64_t r = rank.getRank();
    if (r < 0 || r >= s.numRanks)
      continue;
    for (Attribute a : rank.getActions())
      s.ranks[r].push_back(cast<ActionAttr>(a).getAction());
  }
  return s;
}

ScheduleOp loom::pipe::buildScheduleOp(OpBuilder &builder, Location loc, const lp::Schedule &s) {
  llvm::SmallVector<int64_t> stageRanks(s.stageRank.begin(), s.stageRank.end());
  auto op = builder.create<ScheduleOp>(loc, lp::scheduleKindName(s.kind), s.numRanks,
                                       s.numStages, s.numMicrobatches, s.numChains, stageRanks);
  Block *body = new Block();
  op.getBody().push_back(body);
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToEnd(body);
  for (int r = 0; r < s.numRanks; ++r) {
    llvm::SmallVector<Attribute> actions;
    for (const lp::Action &a : s.ranks[r])
      actions.push_back(ActionAttr::get(builder.getContext(), a));
    builder.create<RankOp>(loc, r, builder.getArrayAttr(actions));
  }
  return op;
}

LogicalResult ScheduleOp::verifyRegions() {
  auto kind = lp::parseScheduleKind(getKind());
  if (!kind)
    return emitOpError() << llvm::toString(kind.takeError());
  int64_t expected = 0;
  for (Operation &op : getBody().front()) {
    auto rank = dyn_cast<RankOp>(op);
    if (!rank)
      return op.emitOpError("is not a pipe.rank: a pipe.schedule holds only pipe.rank ops");
    if (rank.getRank() != expected)
      return rank.emitOpError() << "is rank " << rank.getRank() << ", expected rank " << expected
                                << " (ranks in order, each once)";
    ++expected;
  }
  if (expected != getRanks())
    return emitOpError() << "has " << expected << " pipe.rank ops for " << getRanks() << " ranks";
  if (llvm::Error err = lp::verifySchedule(scheduleFromOp(*this)))
    return emitOpError() << llvm::toString(std::move(err));
  return success();
}

//===----------------------------------------------------------------------===//
// Discardable attributes
//===----------------------------------------------------------------------===//

LogicalResult PipeDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  Attribute value = attr.getValue();
  auto i64 = [&](int64_t min) -> LogicalResult {
    auto i = dyn_cast<IntegerAttr>(value);
    if (!i || !i.getType().isSignlessInteger(64) || i.getInt() < min)
      return op->emitOpError("'") << name << "' must be an i64 of at least " << min << ", got "
                                  << value;
    return success();
  };
  auto array = [&]() -> LogicalResult {
    auto a = dyn_cast<DenseI64ArrayAttr>(value);
    if (!a || llvm::any_of(a.asArrayRef(), [](int64_t v) { return v < 0; }))
      return op->emitOpError("'") << name
                                  << "' must be an array<i64: ...> of non-negative values, got "
                                  << value;
    return success();
  };
  auto onModule = [&]() -> LogicalResult {
    if (!isa<ModuleOp>(op))
      return op->emitOpError("'") << name << "' belongs on the module";
    return success();
  };
  if (name == kStageAttr)
    return i64(-1);
  if (name == kSharedStagesAttr || name == kHoldersAttr)
    return array();
  if (name == kRankAttr) {
    if (!isa<FunctionOpInterface>(op))
      return op->emitOpError("'") << name << "' belongs on a function";
    return i64(0);
  }
  if (name == kLayersPerStageAttr || name == kStageFlopsAttr)
    return failure(failed(onModule()) || failed(array()));
  if (name == kStageFiwFlopsAttr) {
    if (failed(onModule()) || failed(array()))
      return failure();
    if (cast<DenseI64ArrayAttr>(value).size() % 3 != 0)
      return op->emitOpError("'") << name << "' holds F, I and W flops per stage: its size "
                                  << cast<DenseI64ArrayAttr>(value).size()
                                  << " is not a multiple of 3";
    return success();
  }
  if (name == kScheduleCsvAttr) {
    if (failed(onModule()))
      return failure();
    if (!isa<StringAttr>(value))
      return op->emitOpError("'") << name << "' must be a string, got " << value;
    return success();
  }
  return op->emitOpError("has an unknown pipe attribute '") << name << "'";
}

std::optional<int64_t> loom::pipe::getStage(Operation *op) {
  if (auto stage = op->getAttrOfType<IntegerAttr>(kStageAttr))
    return stage.getInt();
  return std::nullopt;
}

void loom::pipe::setStage(Operation *op, int64_t stage) {
  op->setAttr(kStageAttr, Builder(op->getContext()).getI64IntegerAttr(stage));
}

void loom::pipe::setSharedStages(Operation *op, ArrayRef<int64_t> stages) {
  op->setAttr(kSharedStagesAttr, DenseI64ArrayAttr::get(op->getContext(), stages));
}

bool loom::pipe::hasHolders(Operation *op) {
  return op->hasAttrOfType<DenseI64ArrayAttr>(kHoldersAttr);
}

void loom::pipe::setHolders(Operation *op, ArrayRef<int64_t> ranks) {
  op->setAttr(kHoldersAttr, DenseI64ArrayAttr::get(op->getContext(), ranks));
}

std::optional<int64_t> loom::pipe::getRank(Operation *fn) {
  if (auto rank = fn->getAttrOfType<IntegerAttr>(kRankAttr))
    return rank.getInt();
  return std::nullopt;
}

void loom::pipe::setRank(Operation *fn, int64_t rank) {
  fn->setAttr(kRankAttr, Builder(fn->getContext()).getI64IntegerAttr(rank));
}

DenseI64ArrayAttr loom::pipe::getLayersPerStage(Operation *module) {
  return module->getAttrOfType<DenseI64ArrayAttr>(kLayersPerStageAttr);
}

void loom::pipe::setLayersPerStage(Operation *module, ArrayRef<int64_t> counts) {
  module->setAttr(kLayersPerStageAttr, DenseI64ArrayAttr::get(module->getContext(), counts));
}

DenseI64ArrayAttr loom::pipe::getStageFlops(Operation *module) {
  return module->getAttrOfType<DenseI64ArrayAttr>(kStageFlopsAttr);
}

void loom::pipe::setStageFlops(Operation *module, ArrayRef<int64_t> flops) {
  module->setAttr(kStageFlopsAttr, DenseI64ArrayAttr::get(module->getContext(), flops));
}

DenseI64ArrayAttr loom::pipe::getStageFiwFlops(Operation *module) {
  return module->getAttrOfType<DenseI64ArrayAttr>(kStageFiwFlopsAttr);
}

void loom::pipe::setStageFiwFlops(Operation *module, ArrayRef<int64_t> flops) {
  module->setAttr(kStageFiwFlopsAttr, DenseI64ArrayAttr::get(module->getContext(), flops));
}

void loom::pipe::setScheduleCsv(Operation *module, StringRef csv) {
  module->setAttr(kScheduleCsvAttr, StringAttr::get(module->getContext(), csv));
}

StringAttr loom::pipe::takeScheduleCsv(Operation *module) {
  return dyn_cast_if_present<StringAttr>(module->removeAttr(kScheduleCsvAttr));
}
