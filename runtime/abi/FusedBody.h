#ifndef LOOM_RUNTIME_ABI_FUSEDBODY_H
#define LOOM_RUNTIME_ABI_FUSEDBODY_H

// The body of an nn.fused call: a fusion group's member kernels in program
// order, as plain data and as the text its `body` attribute carries. The
// compiler writes it (nn::FusedOp::kernelBody), the loader checks it against
// the call's buffers, the CPU backend runs its members one by one through
// their own kernels, and the CUDA backend generates one kernel from the
// members' scalar formulas (KernelScalarFormulas.def, from the nn ODS).
//
// The text, whitespace free between tokens:
//
//   (bf16[2,12,64], bf16[2,12,64]) {
//     %0 = nn.silu(%i0) : bf16[2,12,64];
//     %1 = nn.mul(%0, %i1) : bf16[2,12,64];
//     %2 = nn.gelu(%1) {approximate = tanh} : f32[2,12,64];
//     yield %0, %2 }
//
// The group's input types, then one member per `;`: its kernel, its operands
// (`%iN` group input N, `%N` member N, always an earlier one), its kernel
// attributes (Int, F64, Str as a plain word, Ints and F64s as `[a, b]`, of the
// kinds its schema gives them) and its result type; then the members yielded,
// one call output each, in order.

#include "runtime/abi/DType.h"
#include "runtime/abi/KernelList.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

struct FusedTensorType {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  bool operator==(const FusedTensorType &o) const {
    return dtype == o.dtype && shape == o.shape;
  }
  bool operator!=(const FusedTensorType &o) const { return !(*this == o); }
};

/// What a member reads: group input `index`, or member `index`'s result.
struct FusedRef {
  bool isInput = false;
  uint32_t index = 0;
};

/// One member of the group: a call of `kernel` with one result.
struct FusedStep {
  KernelId kernel{};
  std::vector<FusedRef> operands;
  std::vector<NamedAttr> attrs;
  FusedTensorType result;
};

struct FusedBody {
  std::vector<FusedTensorType> inputs;
  std::vector<FusedStep> steps;
  /// The members whose results the call writes, one output each.
  std::vector<uint32_t> yields;
};

/// The text form of a body that checkFusedBody accepts.
std::string printFusedBody(const FusedBody &body);

/// Parses and checks (checkFusedBody) a body's text. An error is one line
/// naming the place ("at character 41: expected ')'") or the problem.
llvm::Expected<FusedBody> parseFusedBody(std::string_view text);

/// What makes `body` malformed, or an empty string: operands that are not
/// group inputs or earlier members, a member that is not a one-result
/// kernel of the contract (or is nn.fused itself), attributes its schema does
/// not give (or a Str value that is not a plain word), yields out of range or
/// repeated, negative or overflowing shapes.
std::string checkFusedBody(const FusedBody &body);

/// Whether the call's operands are the body's: one input per declared input
/// type and one output per yield, of those types. Empty when they are.
std::string checkFusedCall(const FusedBody &body,
                           const std::vector<FusedTensorType> &inputs,
                           const std::vector<FusedTensorType> &outputs);

/// The scalar formula (KernelScalarFormulas.def) of a call of `kernel` with
/// `attrs`, or none: the kernel is not elementwise, or no formula is for its
/// attributes.
std::optional<std::string_view> scalarFormula(KernelId kernel,
                                              const std::vector<NamedAttr> &attrs);

/// NumPy broadcasting: whether `from` broadcasts to `to` (aligned at the
/// innermost dim, each dim equal or 1, `from` of no higher rank).
bool broadcastsTo(const std::vector<int64_t> &from, const std::vector<int64_t> &to);

/// The shape every member's result broadcasts to: the index space of the
/// generated kernel. None when two members' shapes do not broadcast together.
std::optional<std::vector<int64_t>> fusedLoopShape(const FusedBody &body);

/// Why the fusion code generator cannot make one kernel of a well-formed
/// body, or an empty string: a value that is not f32, bf16, f16 or i1, a member
/// without a scalar formula for its attributes, an operand that does not
/// broadcast to its member's shape, a member whose value nothing yields or
/// reads, members whose shapes do not broadcast together. What the generated kernel computes is then exactly what the
/// members compute one by one, up to the math library's last bits.
std::string fusedCodegenProblem(const FusedBody &body);

/// "nn.silu, nn.mul -> bf16[2,12,64], bf16[2,12,64]": a short description of
/// a body for listings and errors.
std::string describeFusedBody(const FusedBody &body);

/// "bf16[2,12,64]".
std::string formatFusedType(const FusedTensorType &type);

} // namespace loom

#endif
