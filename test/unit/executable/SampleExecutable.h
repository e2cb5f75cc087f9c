#ifndef LOOM_TEST_UNIT_EXECUTABLE_SAMPLEEXECUTABLE_H
#define LOOM_TEST_UNIT_EXECUTABLE_SAMPLEEXECUTABLE_H

#include "runtime/executable/Executable.h"

namespace loom::test {

/// A small valid executable that uses every field, every instruction kind,
/// every attribute kind, every init kind but Zeros/Ones, and two ranks.
/// Rank 0's buffers (by index): 0 w, 1 b, 2 gamma (persistent); 3 x, 4 h,
/// 5 h_flat (a view of h), 6 y, 7 y_out (scratch).
Executable makeSampleExecutable();

/// Field-by-field comparison with GoogleTest expectations.
void expectSameExecutable(const Executable &expected, const Executable &actual);

/// The error's message, or "(no error)".
std::string errorMessage(llvm::Error err);

/// Expects verifyExecutable(exe), and loading exe's serialized bytes, each to
/// fail with one line that contains `expected`.
void expectVerifyAndLoadReport(const Executable &exe, const std::string &expected);

} // namespace loom::test

#endif
