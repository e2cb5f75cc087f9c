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

/// The attribute naming the stage an op belongs to (set by
/// --loom-pipeline-partition).
inline constexpr llvm::StringLiteral kStageAttr = "pipe.stage";

/// A schedule as IR, and back (the shape checks are ScheduleOp's verifier's).
ScheduleOp buildScheduleOp(mlir::OpBuilder &builder, mlir::Location loc,
                           const pipeline::Schedule &schedule);
pipeline::Schedule scheduleFromOp(ScheduleOp op);

} // namespace loom::pipe

#endif
