// loom-inspect: what is in a Loom executable — signature, parameters,
// buffers and the memory plan per rank, streams and instructions.

#include "runtime/executable/Executable.h"
#include "runtime/executable/ExecutableListing.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/WithColor.h"

namespace cl = llvm::cl;

namespace {
cl::OptionCategory category("loom-inspect options");
cl::opt<std::string> executablePath(cl::Positional, cl::desc("<model.loomx>"),
                                    cl::Required, cl::cat(category));
cl::opt<bool> json("json", cl::desc("print JSON instead of text"), cl::cat(category));
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(argc, argv,
                              "loom-inspect: show what is in a Loom executable\n");
  llvm::Expected<loom::Executable> exe = loom::loadExecutableFile(executablePath);
  if (!exe) {
    llvm::WithColor::error(llvm::errs(), "loom-inspect")
        << llvm::toString(exe.takeError()) << "\n";
    return 1;
  }
  if (json)
    llvm::outs() << llvm::formatv("{0:2}", loom::executableToJson(*exe)) << "\n";
  else
    loom::printExecutable(*exe, llvm::outs());
  return 0;
}
