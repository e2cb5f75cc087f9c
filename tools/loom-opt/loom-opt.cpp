// loom-opt: mlir-opt with Loom's dialects and passes registered, for lit tests
// and for running one pass at a time while debugging.

#include "dialects/nn/NNDialect.h"
#include "dialects/rt/RtDialect.h"
#include "passes/lowering/Passes.h"
#include "passes/memory/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<loom::nn::NNDialect, loom::rt::RtDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect>();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  mlir::registerInlinerPass();
  loom::registerLoweringPasses();
  loom::registerMemoryPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "Loom optimizer driver\n", registry));
}
