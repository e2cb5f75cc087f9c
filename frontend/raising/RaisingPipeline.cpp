#include "frontend/raising/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

void loom::buildRaisingPipeline(mlir::OpPassManager &pm, bool raise) {
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(createFoldConstants());
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
  if (!raise)
    return;
  // Small patterns first: attention's scores and RoPE's inputs are then
  // already in their final form.
  pm.addPass(createRaiseMatmulForms());
  pm.addPass(createRaiseSilu());
  pm.addPass(createRaiseGelu());
  pm.addPass(createRaiseRmsNorm());
  pm.addPass(createRaiseLayerNorm());
  pm.addPass(createRaiseRope());
  pm.addPass(createRaiseAttention());
  pm.addPass(createRaiseGroupedGemm());
  pm.addPass(createRaiseRouter());
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
}
