#ifndef LOOM_RUNTIME_ABI_KERNELLIST_H
#define LOOM_RUNTIME_ABI_KERNELLIST_H

// The kernel contract as data: the kernels of Kernels.def with their arity
// and attribute schema (KernelAttrSchema.def), both generated from the nn
// dialect's ODS by loom-tblgen. An executable names each kernel once; the
// loader resolves the name to a KernelId (its position in the list), and
// backends dispatch on the id through a table, never by comparing strings at
// a launch. Kernels generated at compile time (fusion) would get ids past
// kNumKernels, resolved to handles by the backend that compiled them.

#include "runtime/abi/KernelAttrs.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

/// One enumerator per kernel, in Kernels.def's order (nn.layer_norm:
/// KernelId::LayerNorm); kernels serving several ids switch on it.
enum class KernelId : uint16_t {
#define LOOM_KERNEL_ID(IDENT) IDENT,
#include "runtime/abi/KernelIds.def"
#undef LOOM_KERNEL_ID
};

struct KernelInfo {
  std::string_view name;
  int minInputs;
  int maxInputs;  // -1: no upper bound
  int numOutputs; // -1: one or more
};

/// What an attribute holds (KernelAttrs.h's AttrValue alternatives).
/// Retired: a name the kernel no longer reads (refused, even by the loader).
enum class AttrKind : uint8_t { Int, F64, Str, Ints, F64s, Retired };

struct KernelAttrInfo {
  std::string_view kernel;
  std::string_view name;
  AttrKind kind;
  bool required; // the compiler always writes it
};

inline constexpr KernelInfo kKernelInfos[] = {
#define LOOM_KERNEL(NAME, MIN_INPUTS, MAX_INPUTS, NUM_OUTPUTS)                 \
  {NAME, MIN_INPUTS, MAX_INPUTS, NUM_OUTPUTS},
#include "runtime/abi/Kernels.def"
#undef LOOM_KERNEL
};
inline constexpr size_t kNumKernels = sizeof(kKernelInfos) / sizeof(kKernelInfos[0]);

inline const KernelInfo &kernelInfo(KernelId id) {
  return kKernelInfos[static_cast<size_t>(id)];
}
inline std::string_view kernelName(KernelId id) { return kernelInfo(id).name; }
inline size_t kernelIndex(KernelId id) { return static_cast<size_t>(id); }

/// The kernel named `name`, or none.
std::optional<KernelId> findKernel(std::string_view name);

/// The attributes `id` reads, in name order.
struct KernelAttrRange {
  const KernelAttrInfo *first, *last;
  const KernelAttrInfo *begin() const { return first; }
  const KernelAttrInfo *end() const { return last; }
};
KernelAttrRange kernelAttrSchema(KernelId id);

const char *attrKindName(AttrKind kind);
AttrKind attrKindOf(const AttrValue &value);

/// Checks a call's attributes against the kernel's schema: each one known and
/// of its kind (an Int where an F64 is read is fine). A required attribute
/// may be missing (hand-written IR, older executables): kernels read it with
/// its ODS default. Returns the problem in one line, or an empty string.
/// With `ignoreUnknown` (the loader), attributes the kernel does not read
/// are let through, as a reader skips fields it does not know; the compiler's
/// rt.kernel verifier rejects them.
std::string checkKernelAttrs(KernelId id,
                             const std::vector<std::pair<std::string_view, AttrKind>> &attrs,
                             bool ignoreUnknown = false);
std::string checkKernelAttrs(KernelId id, const std::vector<NamedAttr> &attrs,
                             bool ignoreUnknown = false);

/// "takes 2 inputs" / "takes 1 to 3 inputs" / "takes 1 or more inputs", or
/// empty when the counts fit the kernel's arity. `epilogueOutputs`: outputs
/// beyond the kernel's own that an epilogue writes (kFp8ScaleOf).
std::string checkKernelArity(KernelId id, size_t numInputs, size_t numOutputs,
                             size_t epilogueOutputs = 0);

/// The FP8 scale epilogue, which any kernel may carry
/// (--loom-fuse-fp8-quantize): attribute `fp8_scale_of` lists outputs of the
/// kernel (indices), and the kernel writes one more output per entry, after
/// its own, each a rank-0 f32: nn.fp8_scale (attributes `fp8_format`,
/// `fp8_margin`, as nn.fp8_scale's `format` and `margin`) of nn.amax of
/// that output. Bitwise what nn.amax and nn.fp8_scale write after the
/// kernel; a backend runs them so unless the kernel finishes the amax
/// itself while it writes the output (one pass over memory fewer).
inline constexpr std::string_view kFp8ScaleOfAttr = "fp8_scale_of";
inline constexpr std::string_view kFp8FormatAttr = "fp8_format";
inline constexpr std::string_view kFp8MarginAttr = "fp8_margin";
/// Whether `name` is one of the epilogue's attributes, and its kind.
std::optional<AttrKind> fp8EpilogueAttrKind(std::string_view name);

/// A call's attributes split into the epilogue's and the kernel's own.
struct Fp8ScaleEpilogueAttrs {
  std::vector<int64_t> outputs; // fp8_scale_of; empty: no epilogue
  std::string format = "e4m3";
  int64_t margin = 0;
  std::vector<NamedAttr> kernelAttrs; // every other attribute
};
/// Splits `attrs` of a call with `numOutputs` outputs in all (the
/// epilogue's included). Returns the problem in one line (fp8_scale_of
/// listing nothing, as many outputs as the call has, or one it does not
/// have), or an empty string.
std::string splitFp8ScaleEpilogue(const std::vector<NamedAttr> &attrs, size_t numOutputs,
                                  Fp8ScaleEpilogueAttrs &split);

} // namespace loom

#endif
