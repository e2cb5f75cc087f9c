// The NCCL communicator's entry points in a build without CUDA or NCCL.

#include "runtime/comm/Communicator.h"

namespace loom {

namespace {
llvm::Error noNccl() {
  return llvm::createStringError(std::errc::not_supported,
                                 "this build of Loom has no NCCL (no CUDA toolkit with NCCL at "
                                 "build time)");
}
} // namespace

bool haveNccl() { return false; }

llvm::Expected<std::vector<std::unique_ptr<Communicator>>>
createNcclCommunicators(const Mesh &, llvm::ArrayRef<int>,
                        llvm::ArrayRef<std::vector<std::string>>,
                        llvm::ArrayRef<std::vector<int64_t>>, llvm::ArrayRef<Communicator *>) {
  return noNccl();
}

llvm::Expected<std::unique_ptr<Communicator>>
createNcclCommunicator(const Mesh &, int, Communicator &,
                       llvm::ArrayRef<std::vector<std::string>>, llvm::ArrayRef<int64_t>) {
  return noNccl();
}

} // namespace loom
