// What every backend shares: collectives through the attached communicator.

#include "runtime/backends/Backend.h"

namespace loom {

llvm::Error Backend::collective(const CollectiveDesc &desc, const DeviceTensor *in,
                                const DeviceTensor *out, unsigned stream) {
  if (!communicator_)
    return llvm::createStringError(std::errc::invalid_argument,
                                   "%s needs a communicator, and none is attached",
                                   collectiveKindName(desc.kind).c_str());
  CollectiveOperands operands;
  operands.dtype = in ? in->dtype : out ? out->dtype : DType::F32;
  if (in)
    operands.inShape = in->shape;
  if (out)
    operands.outShape = out->shape;
  if (name() == "cpu") { // host memory: the communicator works in place
    operands.in = in ? in->data : nullptr;
    operands.out = out ? out->data : nullptr;
    return communicator_->run(desc, operands);
  }
  // Device memory: wait for the stream's work, run on host copies.
  if (auto err = synchronize())
    return err;
  std::vector<uint8_t> hostIn(in ? in->sizeInBytes() : 0), hostOut(out ? out->sizeInBytes() : 0);
  if (in)
    if (auto err = copyToHost(hostIn.data(), in->data, hostIn.size()))
      return err;
  operands.in = in ? hostIn.data() : nullptr;
  operands.out = out ? hostOut.data() : nullptr;
  if (auto err = communicator_->run(desc, operands))
    return err;
  if (out)
    return copyToDevice(out->data, hostOut.data(), hostOut.size());
  return llvm::Error::success();
}

} // namespace loom
