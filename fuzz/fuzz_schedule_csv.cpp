// Pipeline schedule CSV (runtime/schedule/Schedule): loom-compile
// --schedule=custom --schedule-file, loom-inspect FILE.csv, and the schedule
// stored in a pipelined executable. A schedule that imports is analyzed and
// drawn as loom-inspect does, and must survive an export/import round trip.

#include "fuzz/FuzzSupport.h"
#include "runtime/schedule/Schedule.h"
#include "runtime/schedule/ScheduleAnalysis.h"

using namespace loom;
using namespace loom::pipeline;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<Schedule> schedule = importCsv(text);
  if (!fuzz::succeeded(schedule))
    return 0;
  (void)formatScheduleTable(*schedule, /*withComm=*/true);
  llvm::Expected<ScheduleAnalysis> analysis = analyzeSchedule(*schedule);
  if (fuzz::succeeded(analysis)) {
    (void)analysis->format();
    (void)renderScheduleSvg(*schedule, *analysis);
    (void)scheduleToJson(*schedule, *analysis, ScheduleCosts{});
  }
  for (CsvHeader header : {CsvHeader::WhenNeeded, CsvHeader::Always}) {
    llvm::Expected<Schedule> again = importCsv(exportCsv(*schedule, header));
    LOOM_FUZZ_CHECK(again);
    LOOM_FUZZ_CHECK(again->numRanks == schedule->numRanks &&
                    again->numStages == schedule->numStages &&
                    again->numMicrobatches == schedule->numMicrobatches);
  }
  return 0;
}
