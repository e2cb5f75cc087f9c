#ifndef LOOM_RUNTIME_ABI_KERNELATTRS_H
#define LOOM_RUNTIME_ABI_KERNELATTRS_H

// What a kernel call carries besides its buffers: the op's attributes as
// typed values, named as Kernels.def lists them. Shared by the compiler
// (which writes them) and the kernels (which read them).

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace loom {

/// Kernel attributes: the `nn` op's attributes, carried as typed values.
using AttrValue = std::variant<int64_t, double, std::string,
                               std::vector<int64_t>, std::vector<double>>;
struct NamedAttr {
  std::string name;
  AttrValue value;
};

/// An f64 attribute as text: the shortest decimal that reads back as the
/// same double; integral values keep a ".0" so they do not read back as
/// integer attributes; "nan", "inf", "-inf".
std::string formatAttrDouble(double value);

} // namespace loom

#endif
