// --loom-pipeline-schedule: the schedule as a verified pipe.schedule op, with
// its analysis as a remark (see Passes.td).

#include "passes/pipeline/Passes.h"
#include "llvm/Support/FormatVariadic.h"
#include "runtime/schedule/ScheduleAnalysis.h"
#include "runtime/schedule/ScheduleGenerators.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"

namespace loom {
#define GEN_PASS_DEF_PIPELINESCHEDULE
#include "passes/pipeline/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

struct PipelineSchedulePass
    : public loom::impl::PipelineScheduleBase<PipelineSchedulePass> {
  using PipelineScheduleBase::PipelineScheduleBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto kind = pipeline::parseScheduleKind(schedule);
    if (!kind) {
      mlir::emitError(module.getLoc()) << llvm::toString(kind.takeError());
      return signalPassFailure();
    }
    auto s = scheduleFile.empty()
                 ? pipeline::generateSchedule(*kind, int(pp), int(vpp), int(microbatches))
                 : pipeline::readScheduleFile(scheduleFile);
    if (!s) {
      mlir::emitError(module.getLoc()) << llvm::toString(s.takeError());
      return signalPassFailure();
    }
    auto analysis = pipeline::analyzeSchedule(*s);
    if (!analysis) {
      mlir::emitError(module.getLoc()) << llvm::toString(analysis.takeError());
      return signalPassFailure();
    }
    OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
    auto op = pipe::buildScheduleOp(builder, module.getLoc(), *s);
    mlir::emitRemark(op.getLoc())
        << pipeline::scheduleKindName(s->kind) << " on " << s->numRanks << " ranks, "
        << s->numStages << " stages, " << s->numMicrobatches
        << " microbatches; unit costs F=I=W=1 B=2 F&B=3:\n"
        << analysis->format();
    // With the partition's FLOPs per stage, the same schedule timed with
    // each stage's compute scaled by its share.
    if (auto flops = pipe::getStageFlops(module);
        flops && int64_t(flops.size()) == s->chainLength()) {
      double mean = 0;
      for (int64_t f : flops.asArrayRef())
        mean += double(f) / flops.size();
      pipeline::ScheduleCosts weighted;
      for (int stage = 0; stage < s->numStages && mean > 0; ++stage)
        weighted.stageScale.push_back(double(flops[s->stageChunk(stage)]) / mean);
      auto timed = pipeline::analyzeSchedule(*s, weighted);
      if (timed)
        mlir::emitRemark(module.getLoc())
            << "the same, each stage's compute scaled by its FLOPs over the mean stage's:\n"
            << timed->format();
      else
        llvm::consumeError(timed.takeError());
    }
    // With the training step's F, I and W FLOPs per stage: F, I and W
    // priced by their FLOPs (B = I + W, F&B = F + B), each stage scaled by
    // its share. A weight gradient costs less than an input gradient (no
    // attention), which the unit costs ignore.
    if (auto fiw = pipe::getStageFiwFlops(module);
        fiw && int64_t(fiw.size()) == 3 * s->chainLength()) {
      double f = 0, i = 0, w = 0;
      for (size_t k = 0; k + 2 < fiw.size(); k += 3) {
        f += fiw[k];
        i += fiw[k + 1];
        w += fiw[k + 2];
      }
      if (f > 0 && i > 0 && w > 0) {
        pipeline::ScheduleCosts costs;
        costs.f = 1.0;
        costs.i = i / f;
        costs.w = w / f;
        costs.b = costs.i + costs.w;
        costs.fb = costs.f + costs.b;
        double mean = (f + i + w) / s->chainLength();
        for (int stage = 0; stage < s->numStages; ++stage) {
          size_t k = 3 * size_t(s->stageChunk(stage));
          costs.stageScale.push_back(double(fiw[k] + fiw[k + 1] + fiw[k + 2]) / mean);
        }
        auto timed = pipeline::analyzeSchedule(*s, costs);
        if (timed)
          mlir::emitRemark(module.getLoc())
              << llvm::formatv("the same, F, I and W priced by the step's FLOPs (F=1 I={0:f2} "
                               "W={1:f2} B={2:f2} F&B={3:f2}), each stage scaled by its share:\n",
                               costs.i, costs.w, costs.b, costs.fb)
              << timed->format();
        else
          llvm::consumeError(timed.takeError());
      }
    }
  }
};

} // namespace
