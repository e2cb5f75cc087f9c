// loom-inspect: what is in a Loom executable — signature, parameters,
// buffers and the memory plan per rank, streams and instructions.

#include "runtime/executable/Executable.h"
#include "runtime/executable/ExecutableListing.h"
#include "passes/pipeline/ScheduleAnalysis.h"
#include "passes/pipeline/Schedule.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/WithColor.h"

namespace cl = llvm::cl;

namespace {
cl::OptionCategory category("loom-inspect options");
cl::opt<std::string> executablePath(cl::Positional, cl::desc("<model.loomx | schedule.csv>"),
                                    cl::Required, cl::cat(category));
cl::opt<bool> json("json", cl::desc("print JSON instead of text"), cl::cat(category));
cl::opt<std::string> scheduleSvg("schedule-svg",
                                 cl::desc("draw the pipeline schedule's per-rank timeline "
                                          "(time from --schedule-costs) as SVG"),
                                 cl::value_desc("out.svg"), cl::init(""), cl::cat(category));

cl::opt<std::string> scheduleCosts("schedule-costs",
                                   cl::desc("the cost model for a schedule's analysis and "
                                            "picture: f=1,b=2,i=1,w=1,fb=3,comm=0 (any subset)"),
                                   cl::init(""), cl::cat(category));

[[noreturn]] void fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "loom-inspect") << message << "\n";
  std::exit(1);
}

/// A schedule file (PyTorch pipelining's CSV): verify, analyse, draw.
int inspectSchedule() {
  auto buffer = llvm::MemoryBuffer::getFile(executablePath);
  if (!buffer)
    fail("cannot read '" + executablePath + "': " + buffer.getError().message());
  auto schedule = loom::pipeline::importCsv((*buffer)->getBuffer());
  if (!schedule)
    fail("'" + executablePath + "': " + llvm::toString(schedule.takeError()));
  auto costs = loom::pipeline::parseScheduleCosts(scheduleCosts);
  if (!costs)
    fail(llvm::toString(costs.takeError()));
  auto analysis = loom::pipeline::analyzeSchedule(*schedule, *costs);
  if (!analysis)
    fail(llvm::toString(analysis.takeError()));
  if (json)
    llvm::outs() << loom::pipeline::scheduleToJson(*schedule, *analysis, *costs) << "\n";
  else
    llvm::outs() << llvm::formatv("pipeline schedule: {0} ranks, {1} stages, {2} microbatches\n",
                                schedule->numRanks, schedule->numStages,
                                schedule->numMicrobatches)
               << loom::pipeline::formatScheduleTable(*schedule) << analysis->format();
  if (!scheduleSvg.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream out(scheduleSvg, ec);
    if (ec)
      fail("cannot write '" + scheduleSvg + "': " + ec.message());
    out << loom::pipeline::renderScheduleSvg(*schedule, *analysis);
  }
  return 0;
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(argc, argv,
                              "loom-inspect: show what is in a Loom executable\n");
  if (llvm::StringRef(executablePath).ends_with(".csv"))
    return inspectSchedule();
  llvm::Expected<loom::Executable> exe = loom::loadExecutableFile(executablePath);
  if (!exe) {
    llvm::WithColor::error(llvm::errs(), "loom-inspect")
        << llvm::toString(exe.takeError()) << "\n";
    return 1;
  }
  if (!scheduleSvg.empty())
    fail("'" + executablePath + "': executables do not carry their pipeline schedule yet; "
         "pass the schedule CSV (loom-compile --schedule-csv)");
  if (json)
    llvm::outs() << llvm::formatv("{0:2}", loom::executableToJson(*exe)) << "\n";
  else
    loom::printExecutable(*exe, llvm::outs());
  return 0;
}
