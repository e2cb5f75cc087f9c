// The MPI communicator's entry points in a build without MPI.

#include "runtime/comm/Communicator.h"

namespace loom {

bool haveMpi() { return false; }

llvm::Expected<std::unique_ptr<Communicator>> createMpiCommunicator(const Mesh &, std::chrono::milliseconds) {
  return llvm::createStringError(
      std::errc::not_supported,
      "this build of Loom has no MPI (libopenmpi-dev was missing at build time: "
      "run scripts/setup-deps.sh and rebuild)");
}

} // namespace loom
