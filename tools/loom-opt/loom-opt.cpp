// loom-opt: mlir-opt with Loom's dialects and passes registered, for lit tests
// and for running one pass at a time while debugging, or loom-compile's whole
// pipeline (--loom-compile-pipeline).

#include "tools/LoomVersion.h"
#include "dialects/dist/DistDialect.h"
#include "dialects/loom/LoomDialect.h"
#include "dialects/nn/NNDialect.h"
#include "dialects/pipe/PipeDialect.h"
#include "dialects/rt/RtDialect.h"
#include "frontend/raising/Passes.h"
#include "passes/Pipelines.h"
#include "passes/lowering/Passes.h"
#include "passes/fusion/Passes.h"
#include "passes/memory/Passes.h"
#include "passes/pipeline/Passes.h"
#include "passes/sharding/Passes.h"
#include "passes/fp8/Passes.h"
#include "passes/training/Passes.h"
#include "runtime/support/UserFile.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/ToolOutputFile.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/WithColor.h"

/// The help text's overview: what the tool is, then every op of Loom's own
/// dialects, so `loom-opt --help` is also the op index.
static std::string overview(const mlir::DialectRegistry &registry) {
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  std::string text = "Loom optimizer driver: mlir-opt with Loom's dialects and passes\n";
  for (llvm::StringRef dialect : {"nn", "dist", "pipe", "rt"}) {
    text += "\n" + dialect.str() + " dialect ops:\n ";
    std::vector<llvm::StringRef> names;
    for (mlir::RegisteredOperationName op : context.getRegisteredOperations())
      if (op.getDialectNamespace() == dialect)
        names.push_back(op.getStringRef());
    llvm::sort(names);
    size_t column = 1;
    for (llvm::StringRef name : names) {
      if (column + name.size() + 1 > 78) {
        text += "\n ";
        column = 1;
      }
      text += " " + name.str();
      column += name.size() + 1;
    }
    text += "\n";
  }
  return text;
}

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<loom::LoomDialect, loom::nn::NNDialect, loom::dist::DistDialect, loom::pipe::PipeDialect, loom::rt::RtDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect>();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  mlir::registerInlinerPass();
  loom::registerRaisingPasses();
  loom::registerLoweringPasses();
  loom::registerMemoryPasses();
  loom::registerFusionPasses();
  loom::registerPipelinePasses();
  loom::registerTrainingPasses();
  loom::registerFp8Passes();
  loom::registerShardingPasses();
  // loom-compile's pipeline, as --loom-compile-pipeline='OPTIONS' (passes/Pipelines.h).
  loom::PipelineHooks hooks;
  hooks.buildRaising = loom::buildRaisingPipeline;
  loom::registerLoomPipeline(hooks);
  loom::setVersionPrinter();
  auto [inputPath, outputPath] =
      mlir::registerAndParseCLIOptions(argc, argv, overview(registry), registry);
  // MLIR's parser recurses per nesting level: refuse what would overflow the
  // stack, and devices that would be read forever, before it runs; standard
  // input ('-') is read whole and checked the same way.
  auto fail = [](llvm::Error err) {
    llvm::WithColor::error(llvm::errs(), "loom-opt") << llvm::toString(std::move(err)) << "\n";
    return 1;
  };
  std::unique_ptr<llvm::MemoryBuffer> input;
  if (inputPath == "-") {
    auto in = llvm::MemoryBuffer::getSTDIN();
    if (!in)
      return fail(llvm::createStringError(in.getError(), "cannot read standard input"));
    input = std::move(*in);
  } else {
    auto file = loom::openRegularFile(inputPath);
    if (!file)
      return fail(file.takeError());
    input = std::move(*file);
  }
  if (llvm::Error err = loom::checkNestingDepth(input->getBuffer(), loom::NestingSyntax::Mlir,
                                                inputPath == "-" ? "<stdin>" : inputPath))
    return fail(std::move(err));
  std::string message;
  auto output = mlir::openOutputFile(outputPath, &message);
  if (!output)
    return fail(llvm::createStringError(llvm::inconvertibleErrorCode(), message));
  if (mlir::failed(mlir::MlirOptMain(output->os(), std::move(input), registry,
                                     mlir::MlirOptMainConfig::createFromCLOptions())))
    return 1;
  output->keep();
  return 0;
}
