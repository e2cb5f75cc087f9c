#ifndef LOOM_DIALECTS_PIPE_PIPEDIALECT_H
#define LOOM_DIALECTS_PIPE_PIPEDIALECT_H

#include "runtime/schedule/Schedule.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"

#include "dialects/pipe/PipeDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/pipe/PipeAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/pipe/PipeOps.h.inc"

namespace loom::pipe {

// The pipe dialect's discardable attributes (PipeOps.td describes them);
// PipeDialect::verifyOperationAttribute checks what they hold.
inline constexpr llvm::StringLiteral kStageAttr = "pipe.stage";
inline constexpr llvm::StringLiteral kSharedStagesAttr = "pipe.shared_stages";
inline constexpr llvm::StringLiteral kHoldersAttr = "pipe.holders";
inline constexpr llvm::StringLiteral kRankAttr = "pipe.rank";
inline constexpr llvm::StringLiteral kLayersPerStageAttr = "pipe.layers_per_stage";
inline constexpr llvm::StringLiteral kStageFlopsAttr = "pipe.stage_flops";
inline constexpr llvm::StringLiteral kStageFiwFlopsAttr = "pipe.stage_fiw_flops";
inline constexpr llvm::StringLiteral kScheduleCsvAttr = "pipe.schedule_csv";

/// `pipe.stage`: the stage an op belongs to (-1: shared by every stage).
std::optional<int64_t> getStage(mlir::Operation *op);
void setStage(mlir::Operation *op, int64_t stage);
/// `pipe.shared_stages`: the stages that read a shared parameter.
void setSharedStages(mlir::Operation *op, llvm::ArrayRef<int64_t> stages);
/// `pipe.holders`: the ranks that hold copies of a tied parameter.
bool hasHolders(mlir::Operation *op);
void setHolders(mlir::Operation *op, llvm::ArrayRef<int64_t> ranks);
/// `pipe.rank`: the rank a function split by --loom-pipeline-split runs as.
std::optional<int64_t> getRank(mlir::Operation *fn);
void setRank(mlir::Operation *fn, int64_t rank);
/// Module attributes of the partition and the split.
mlir::DenseI64ArrayAttr getLayersPerStage(mlir::Operation *module);
void setLayersPerStage(mlir::Operation *module, llvm::ArrayRef<int64_t> counts);
mlir::DenseI64ArrayAttr getStageFlops(mlir::Operation *module);
void setStageFlops(mlir::Operation *module, llvm::ArrayRef<int64_t> flops);
mlir::DenseI64ArrayAttr getStageFiwFlops(mlir::Operation *module);
void setStageFiwFlops(mlir::Operation *module, llvm::ArrayRef<int64_t> flops);
void setScheduleCsv(mlir::Operation *module, llvm::StringRef csv);
/// Removes `pipe.schedule_csv` and returns it (null if absent).
mlir::StringAttr takeScheduleCsv(mlir::Operation *module);

/// A schedule as IR, and back (the shape checks are ScheduleOp's verifier's).
ScheduleOp buildScheduleOp(mlir::OpBuilder &builder, mlir::Location loc,
                           const pipeline::Schedule &schedule);
pipeline::Schedule scheduleFromOp(ScheduleOp op);

} // namespace loom::pipe

#endif
