// The command-line parsers of loom-compile, loom-run and loom-inspect. The
// option parsing itself (llvm::cl over global options) lives in each tool's
// main(), so this harness fuzzes the library-level parsers those flags go
// through, and what the tools do right after with the parsed value:
//   byte 0 % 4 == 0: --schedule-costs (parseScheduleCosts), then a 1F1B,
//                    ZB-H1 and DualPipeV schedule analyzed and drawn with them
//                    as loom-inspect does;
//   1: --schedule (parseScheduleKind), then the schedule generated for
//      --pp/--vpp/--microbatches taken from bytes 1..3 (small);
//   2: a schedule action in PyTorch's notation (Action::parse, each CSV cell);
//   3: dtype names (--precision's element types, safetensors/npy dtypes,
//      token dtypes of --data files, collective kinds and reduce ops).

#include "fuzz/FuzzSupport.h"
#include "runtime/schedule/Schedule.h"
#include "runtime/schedule/ScheduleAnalysis.h"
#include "runtime/schedule/ScheduleGenerators.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/abi/Collective.h"
#include "runtime/data/TokenCorpus.h"
#include "runtime/abi/DType.h"

#include <cmath>

using namespace loom;
using namespace loom::pipeline;

static void analyzeWith(const ScheduleCosts &costs) {
  for (ScheduleKind kind : {ScheduleKind::OneFOneB, ScheduleKind::ZBH1, ScheduleKind::DualPipeV}) {
    llvm::Expected<Schedule> schedule = generateSchedule(kind, 2, 1, 4);
    LOOM_FUZZ_CHECK(schedule);
    llvm::Expected<ScheduleAnalysis> analysis = analyzeSchedule(*schedule, costs);
    if (!fuzz::succeeded(analysis))
      continue;
    LOOM_FUZZ_CHECK(std::isfinite(analysis->makespan));
    (void)analysis->format();
    (void)renderScheduleSvg(*schedule, *analysis);
    (void)scheduleToJson(*schedule, *analysis, costs);
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  const uint8_t selector = data[0] % 4;
  llvm::StringRef text(reinterpret_cast<const char *>(data + 1), size - 1);
  switch (selector) {
  case 0: {
    llvm::Expected<ScheduleCosts> costs = parseScheduleCosts(text);
    if (fuzz::succeeded(costs))
      analyzeWith(*costs);
    break;
  }
  case 1: {
    if (size < 4)
      return 0;
    int pp = 1 + data[1] % 8, vpp = 1 + data[2] % 4, microbatches = 1 + data[3] % 16;
    llvm::Expected<ScheduleKind> kind = parseScheduleKind(text.drop_front(3));
    if (!fuzz::succeeded(kind) || *kind == ScheduleKind::Custom)
      return 0;
    llvm::Expected<Schedule> schedule = generateSchedule(*kind, pp, vpp, microbatches);
    if (fuzz::succeeded(schedule))
      (void)exportCsv(*schedule);
    break;
  }
  case 2: {
    llvm::Expected<Action> action = Action::parse(text);
    if (fuzz::succeeded(action)) {
      llvm::Expected<Action> again = Action::parse(action->str());
      LOOM_FUZZ_CHECK(again && *again == *action);
    }
    break;
  }
  case 3: {
    std::string_view name(text.data(), text.size());
    if (std::optional<DType> type = parseDType(name))
      (void)dtypeSize(*type);
    if (std::optional<DType> type = parseSafetensorsDType(text))
      LOOM_FUZZ_CHECK(safetensorsDTypeName(*type) == text);
    if (std::optional<TokenDType> type = parseTokenDType(name))
      (void)tokenDTypeSize(*type);
    (void)parseCollectiveKind(name);
    (void)parseReduceOp(name);
    break;
  }
  }
  return 0;
}
