#ifndef LOOM_FUZZ_FUZZMLIR_H
#define LOOM_FUZZ_FUZZMLIR_H

// The MLIR context loom-compile uses (Loom's dialects and func), made once per
// fuzzing process, with diagnostics swallowed: an error diagnostic and a null
// module is the right answer to a bad file.

#include "dialects/dist/DistDialect.h"
#include "dialects/loom/LoomDialect.h"
#include "dialects/nn/NNDialect.h"
#include "dialects/pipe/PipeDialect.h"
#include "dialects/rt/RtDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

namespace loom::fuzz {

inline mlir::MLIRContext &loomContext() {
  static mlir::MLIRContext *context = [] {
    mlir::DialectRegistry registry;
    registry.insert<loom::LoomDialect, loom::nn::NNDialect, loom::dist::DistDialect, loom::pipe::PipeDialect,
                    loom::rt::RtDialect, mlir::func::FuncDialect, mlir::arith::ArithDialect>();
    // One context for the whole run, as in loom-compile; single-threaded so
    // a crash's stack is the harness's own.
    auto *made = new mlir::MLIRContext(registry, mlir::MLIRContext::Threading::DISABLED);
    made->loadAllAvailableDialects();
    made->printOpOnDiagnostic(false);
    made->getDiagEngine().registerHandler([](mlir::Diagnostic &) { return mlir::success(); });
    return made;
  }();
  return *context;
}

} // namespace loom::fuzz

#endif
