// loom-inspect: what is in a Loom executable — signature, parameters,
// fused kernels (and the CUDA source generated for one), buffers and the
// memory plan per rank, streams and instructions, and the pipeline schedule a
// pipelined executable runs — or in a pipeline schedule CSV.

#include "tools/LoomVersion.h"
#include "kernels/fused/FusedKernelSource.h"
#include "runtime/abi/FusedBody.h"
#include "runtime/executable/Executable.h"
#include "runtime/executable/ExecutableListing.h"
#include "runtime/support/AtomicFile.h"
#include "runtime/support/UserFile.h"
#include "runtime/schedule/ScheduleAnalysis.h"
#include "runtime/schedule/Schedule.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/WithColor.h"

#include <optional>

namespace cl = llvm::cl;
namespace pipeline = loom::pipeline;

namespace {
cl::OptionCategory category("loom-inspect options");
cl::opt<std::string> executablePath(cl::Positional, cl::desc("<model.loomx | schedule.csv>"),
                                    cl::Required, cl::cat(category));
cl::opt<bool> json("json", cl::desc("print JSON instead of text (default off)"), cl::cat(category));
cl::opt<bool> noVerifyChecksum("no-verify-checksum",
                               cl::desc("load the executable without checking its checksums (default: checked)"),
                               cl::cat(category));
cl::opt<std::string> scheduleSvg("schedule-svg",
                                 cl::desc("draw the pipeline schedule's per-rank timeline "
                                          "(time from --schedule-costs) as SVG"),
                                 cl::value_desc("out.svg"), cl::init(""), cl::cat(category));
cl::opt<std::string> scheduleCsv("schedule-csv",
                                 cl::desc("write the pipeline schedule (the one a pipelined "
                                          "executable runs) as PyTorch pipelining's CSV"),
                                 cl::value_desc("out.csv"), cl::init(""), cl::cat(category));

cl::opt<std::string> scheduleCosts("schedule-costs",
                                   cl::desc("the cost model for a schedule's analysis and "
                                            "picture: f=1,b=2,i=1,w=1,fb=3,comm=0 (any subset; those are the "
                                            "defaults)"),
                                   cl::init(""), cl::cat(category));
cl::opt<int> fusedSource("fused-source",
                          cl::desc("print the CUDA source generated for fused kernel N (fN in "
                                   "the listing) instead of the listing"),
                          cl::value_desc("N"), cl::init(-1), cl::cat(category));

[[noreturn]] void fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "loom-inspect") << message << "\n";
  std::exit(1);
}

/// A verified schedule and its analysis under --schedule-costs.
struct AnalyzedSchedule {
  pipeline::Schedule schedule;
  pipeline::ScheduleCosts costs;
  pipeline::ScheduleAnalysis analysis;
};

/// Parses, verifies and analyses a schedule's CSV; errors start with `origin`.
AnalyzedSchedule analyzeCsv(llvm::StringRef csv, const llvm::Twine &origin) {
  auto schedule = pipeline::importCsv(csv);
  if (!schedule)
    fail(origin + ": " + llvm::toString(schedule.takeError()));
  auto costs = pipeline::parseScheduleCosts(scheduleCosts);
  if (!costs)
    fail(llvm::toString(costs.takeError()));
  auto analysis = pipeline::analyzeSchedule(*schedule, *costs);
  if (!analysis)
    fail(llvm::toString(analysis.takeError()));
  return {std::move(*schedule), std::move(*costs), std::move(*analysis)};
}

/// "dualpipev, 2 ranks, 4 stages, 4 microbatches"; a CSV without a
/// `# loom-schedule` header has no kind to name.
std::string scheduleHeadline(const pipeline::Schedule &schedule) {
  std::string kind = schedule.kind == pipeline::ScheduleKind::Custom
                         ? ""
                         : (pipeline::scheduleKindName(schedule.kind) + ", ").str();
  return llvm::formatv("{0}{1} ranks, {2} stages, {3} microbatches", kind, schedule.numRanks,
                       schedule.numStages, schedule.numMicrobatches);
}

/// The actions per rank, then the analysis table.
std::string formatSchedule(const AnalyzedSchedule &s) {
  return "pipeline schedule: " + scheduleHeadline(s.schedule) + "\n" +
         pipeline::formatScheduleTable(s.schedule) + s.analysis.format();
}

llvm::json::Value scheduleJson(const AnalyzedSchedule &s) {
  auto value = llvm::json::parse(pipeline::scheduleToJson(s.schedule, s.analysis, s.costs));
  if (!value)
    fail("internal error: the schedule's JSON does not parse: " +
         llvm::toString(value.takeError()));
  return std::move(*value);
}

void writeFile(const std::string &path, llvm::StringRef text) {
  if (llvm::Error err = loom::writeFileAtomically(path, text.data(), text.size()))
    fail("cannot write: " + llvm::toString(std::move(err)));
}

/// --schedule-svg and --schedule-csv.
void writeScheduleFiles(const AnalyzedSchedule &s) {
  if (!scheduleSvg.empty())
    writeFile(scheduleSvg, pipeline::renderScheduleSvg(s.schedule, s.analysis));
  if (!scheduleCsv.empty())
    writeFile(scheduleCsv, pipeline::exportCsv(s.schedule));
}

/// A schedule file (PyTorch pipelining's CSV): verify, analyse, draw.
int inspectScheduleFile() {
  auto buffer = loom::openRegularFile(executablePath);
  if (!buffer)
    fail(llvm::toString(buffer.takeError()));
  AnalyzedSchedule s = analyzeCsv((*buffer)->getBuffer(), "'" + executablePath + "'");
  if (json)
    llvm::outs() << pipeline::scheduleToJson(s.schedule, s.analysis, s.costs) << "\n";
  else
    llvm::outs() << formatSchedule(s);
  writeScheduleFiles(s);
  return 0;
}

/// The first option given that needs a pipeline schedule, or null.
const char *scheduleOptionGiven() {
  if (!scheduleSvg.empty())
    return "--schedule-svg";
  if (!scheduleCsv.empty())
    return "--schedule-csv";
  if (scheduleCosts.getNumOccurrences())
    return "--schedule-costs";
  return nullptr;
}

/// --fused-source=N: the kernel the CUDA backend generates for fN.
int printFusedSource(const loom::Executable &exe) {
  std::vector<loom::FusedKernelUse> kernels = loom::listFusedKernels(exe);
  if (kernels.empty())
    fail("'" + executablePath +
         "' has no fused kernels (it was compiled without --fuse, or no fusion group was one "
         "the code generator takes)");
  if (fusedSource < 0 || static_cast<size_t>(fusedSource) >= kernels.size())
    fail("--fused-source=" + llvm::Twine(fusedSource.getValue()) + ": '" + executablePath +
         "' has fused kernels f0 to f" + llvm::Twine(kernels.size() - 1));
  llvm::Expected<loom::FusedBody> body = loom::parseFusedBody(kernels[fusedSource].body);
  if (!body)
    fail("fused kernel f" + llvm::Twine(fusedSource.getValue()) + ": body: " +
         llvm::toString(body.takeError()));
  llvm::Expected<loom::fused::FusedKernelSource> kernel = loom::fused::generateFusedKernel(*body);
  if (!kernel)
    fail("fused kernel f" + llvm::Twine(fusedSource.getValue()) +
         ": no kernel can be generated: " + llvm::toString(kernel.takeError()));
  llvm::outs() << kernel->source;
  return 0;
}

/// An executable: the listing, then the stored schedule (if pipelined) as
/// a schedule file shows it.
int inspectExecutable() {
  llvm::Expected<loom::Executable> exe = loom::loadExecutableFile(executablePath, !noVerifyChecksum);
  if (!exe)
    fail(llvm::toString(exe.takeError()));
  if (fusedSource.getNumOccurrences())
    return printFusedSource(*exe);
  std::optional<AnalyzedSchedule> schedule;
  if (!exe->scheduleCsv.empty())
    schedule = analyzeCsv(exe->scheduleCsv,
                          "'" + executablePath + "': stored pipeline schedule");
  else if (const char *option = scheduleOptionGiven())
    fail("'" + executablePath + "' has no pipeline schedule (" +
         (llvm::is_contained(exe->mesh.axes, "pp")
              ? "it was compiled before executables stored their schedule"
              : "it was compiled without --pp") +
         "); " + option + " needs one");
  if (json) {
    llvm::json::Value listing = loom::executableToJson(*exe);
    if (schedule)
      listing.getAsObject()->try_emplace("schedule", scheduleJson(*schedule));
    llvm::outs() << llvm::formatv("{0:2}", listing) << "\n";
  } else {
    loom::printExecutable(*exe, llvm::outs(),
                          schedule ? scheduleHeadline(schedule->schedule) : "");
    if (schedule)
      llvm::outs() << "\n" << formatSchedule(*schedule);
  }
  if (schedule)
    writeScheduleFiles(*schedule);
  return 0;
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  loom::setVersionPrinter();
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(argc, argv,
                              "loom-inspect: show what is in a Loom executable or a pipeline "
                              "schedule CSV\n");
  if (llvm::StringRef(executablePath).ends_with(".csv")) {
    if (fusedSource.getNumOccurrences())
      fail("--fused-source needs an executable, not a schedule CSV");
    return inspectScheduleFile();
  }
  return inspectExecutable();
}
