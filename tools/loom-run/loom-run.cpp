// loom-run: runs a Loom executable. Inference: named inputs from .npy files,
// outputs to .npy files, checked against the program's signature.

#include "runtime/backends/Backend.h"
#include "runtime/backends/ProgramExecutor.h"
#include "runtime/executable/Executable.h"
#include "runtime/support/Npy.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/WithColor.h"

#include <chrono>

namespace cl = llvm::cl;
using namespace loom;

namespace {

cl::OptionCategory category("loom-run options");
cl::opt<std::string> executablePath(cl::Positional, cl::desc("<model.loomx>"),
                                    cl::Required, cl::cat(category));
cl::list<std::string> inputs(
    "input",
    cl::desc("an input as a .npy file: PATH (in the program's input order) or NAME=PATH"),
    cl::value_desc("[name=]path"), cl::cat(category));
cl::list<std::string> outputs(
    "output",
    cl::desc("where to write an output .npy: PATH (in the program's output order) or NAME=PATH"),
    cl::value_desc("[name=]path"), cl::cat(category));
cl::opt<std::string> backendName("backend", cl::desc("cpu or cuda"), cl::init("cpu"),
                                 cl::cat(category));
cl::opt<int> threads("threads", cl::desc("CPU threads per kernel (0: all cores)"),
                     cl::init(0), cl::cat(category));
cl::opt<uint64_t> seed("seed", cl::desc("seed for parameters without stored values"),
                       cl::init(0), cl::cat(category));

[[noreturn]] void fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "loom-run") << message << "\n";
  std::exit(1);
}

template <typename T> T check(llvm::Expected<T> value) {
  if (!value)
    fail(llvm::toString(value.takeError()));
  return std::move(*value);
}
void check(llvm::Error err) {
  if (err)
    fail(llvm::toString(std::move(err)));
}

/// Splits NAME=PATH; a bare PATH takes the name at `position` in `bindings`.
std::pair<std::string, std::string> bindingFor(const std::string &arg, size_t position,
                                               const std::vector<IOBinding> &bindings,
                                               const char *what) {
  size_t eq = arg.find('=');
  if (eq != std::string::npos)
    return {arg.substr(0, eq), arg.substr(eq + 1)};
  if (position >= bindings.size())
    fail(llvm::Twine("more --") + what + " files than the program has " + what + "s (" +
         llvm::Twine(bindings.size()) + ")");
  return {bindings[position].name, arg};
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "loom-run: run a Loom executable\n\n"
      "  loom-run model.loomx --input x.npy --output y.npy\n");

  Executable exe = check(loadExecutableFile(executablePath));
  if (exe.mode != "infer")
    fail("'" + executablePath + "' is a " + exe.mode +
         " executable; this build of loom-run runs inference executables");
  std::unique_ptr<Backend> backend = check(createBackend(backendName, threads));
  std::unique_ptr<ProgramExecutor> executor =
      check(ProgramExecutor::create(exe, /*rank=*/0, *backend, seed));
  const RankProgram &program = executor->program();

  if (inputs.size() != program.inputs.size()) {
    std::string expected;
    for (const IOBinding &b : program.inputs) {
      const BufferDesc &buf = program.buffers[b.buffer];
      expected += (expected.empty() ? "" : ", ") + b.name + " (" +
                  std::string(dtypeName(buf.dtype)) + ")";
    }
    fail("the program takes " + llvm::Twine(program.inputs.size()) + " inputs (" +
         expected + "), got " + llvm::Twine(inputs.size()) + " --input files");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto [name, path] = bindingFor(inputs[i], i, program.inputs, "input");
    const BufferDesc *buffer = nullptr;
    for (const IOBinding &b : program.inputs)
      if (b.name == name)
        buffer = &program.buffers[b.buffer];
    if (!buffer)
      fail("the program has no input named '" + name + "'");
    NpyArray array = check(readNpyAs(path, buffer->dtype));
    HostTensor value{buffer->dtype, array.shape, std::move(array.data)};
    check(executor->setInput(name, value));
  }

  auto start = std::chrono::steady_clock::now();
  check(executor->run());
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  for (size_t i = 0; i < outputs.size(); ++i) {
    auto [name, path] = bindingFor(outputs[i], i, program.outputs, "output");
    HostTensor value = check(executor->getOutput(name));
    NpyArray array;
    array.kind = npyRawKindFor(value.dtype);
    array.shape = value.shape;
    array.data = std::move(value.data);
    check(writeNpy(path, array));
  }
  llvm::errs() << "loom-run: ran " << program.instructions.size() << " instructions on "
               << backend->name() << " in " << llvm::format("%.3f", seconds * 1e3)
               << " ms\n";
  return 0;
}
