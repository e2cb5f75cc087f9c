#include "runtime/abi/KernelList.h"

#include <algorithm>

namespace loom {

namespace {

constexpr KernelAttrInfo kAttrSchema[] = {
#define LOOM_KERNEL_ATTR(KERNEL, NAME, KIND, REQUIRED)                         \
  {KERNEL, NAME, AttrKind::KIND, REQUIRED != 0},
#include "runtime/abi/KernelAttrSchema.def"
#undef LOOM_KERNEL_ATTR
};

// KernelIds.def and Kernels.def come from one list: same length, same order.
constexpr KernelId kAllIds[] = {
#define LOOM_KERNEL_ID(IDENT) KernelId::IDENT,
#include "runtime/abi/KernelIds.def"
#undef LOOM_KERNEL_ID
};
static_assert(std::size(kAllIds) == kNumKernels, "KernelIds.def and Kernels.def disagree");

// Both lists are generated in name order; lookups binary-search them.
bool sortedByName() {
  for (size_t i = 1; i < kNumKernels; ++i)
    if (!(kKernelInfos[i - 1].name < kKernelInfos[i].name))
      return false;
  return true;
}

} // namespace

std::optional<KernelId> findKernel(std::string_view name) {
  static const bool sorted = sortedByName();
  if (sorted) {
    const KernelInfo *end = kKernelInfos + kNumKernels;
    const KernelInfo *it = std::lower_bound(
        kKernelInfos, end, name,
        [](const KernelInfo &k, std::string_view n) { return k.name < n; });
    if (it != end && it->name == name)
      return static_cast<KernelId>(it - kKernelInfos);
    return std::nullopt;
  }
  for (size_t i = 0; i < kNumKernels; ++i)
    if (kKernelInfos[i].name == name)
      return static_cast<KernelId>(i);
  return std::nullopt;
}

KernelAttrRange kernelAttrSchema(KernelId id) {
  std::string_view name = kernelName(id);
  const KernelAttrInfo *first = kAttrSchema, *last = kAttrSchema + std::size(kAttrSchema);
  first = std::find_if(first, last, [&](const KernelAttrInfo &a) { return a.kernel == name; });
  const KernelAttrInfo *end =
      std::find_if(first, last, [&](const KernelAttrInfo &a) { return a.kernel != name; });
  return {first, end};
}

const char *attrKindName(AttrKind kind) {
  switch (kind) {
  case AttrKind::Int: return "an integer";
  case AttrKind::F64: return "a float";
  case AttrKind::Str: return "a string";
  case AttrKind::Ints: return "an integer list";
  case AttrKind::F64s: return "a float list";
  case AttrKind::Retired: return "retired";
  }
  return "?";
}

AttrKind attrKindOf(const AttrValue &value) {
  switch (value.index()) {
  case 0: return AttrKind::Int;
  case 1: return AttrKind::F64;
  case 2: return AttrKind::Str;
  case 3: return AttrKind::Ints;
  default: return AttrKind::F64s;
  }
}

std::string checkKernelAttrs(KernelId id,
                             const std::vector<std::pair<std::string_view, AttrKind>> &attrs,
                             bool ignoreUnknown) {
  KernelAttrRange schema = kernelAttrSchema(id);
  for (const auto &[name, kind] : attrs) {
    const KernelAttrInfo *info =
        std::find_if(schema.begin(), schema.end(),
                     [&, n = name](const KernelAttrInfo &a) { return a.name == n; });
    if (info == schema.end()) {
      if (std::optional<AttrKind> epilogue = fp8EpilogueAttrKind(name)) {
        if (kind != *epilogue)
          return "attribute '" + std::string(name) + "' must be " + attrKindName(*epilogue) +
                 ", not " + attrKindName(kind);
        continue;
      }
      if (ignoreUnknown)
        continue;
      return "attribute '" + std::string(name) + "' is not one " + std::string(kernelName(id)) +
             " reads";
    }
    if (info->kind == AttrKind::Retired)
      return "attribute '" + std::string(name) + "' is no longer read by " +
             std::string(kernelName(id)) + " (an executable from an older Loom: recompile the model)";
    bool fits = kind == info->kind || (kind == AttrKind::Int && info->kind == AttrKind::F64);
    if (!fits)
      return "attribute '" + std::string(name) + "' must be " + attrKindName(info->kind) +
             ", not " + attrKindName(kind);
  }
  return {};
}

std::string checkKernelAttrs(KernelId id, const std::vector<NamedAttr> &attrs,
                             bool ignoreUnknown) {
  std::vector<std::pair<std::string_view, AttrKind>> kinds;
  kinds.reserve(attrs.size());
  for (const NamedAttr &a : attrs)
    kinds.emplace_back(a.name, attrKindOf(a.value));
  return checkKernelAttrs(id, kinds, ignoreUnknown);
}

std::optional<AttrKind> fp8EpilogueAttrKind(std::string_view name) {
  if (name == kFp8ScaleOfAttr)
    return AttrKind::Ints;
  if (name == kFp8FormatAttr)
    return AttrKind::Str;
  if (name == kFp8MarginAttr)
    return AttrKind::Int;
  return std::nullopt;
}

std::string splitFp8ScaleEpilogue(const std::vector<NamedAttr> &attrs, size_t numOutputs,
                                  Fp8ScaleEpilogueAttrs &split) {
  split = Fp8ScaleEpilogueAttrs();
  bool listed = false;
  for (const NamedAttr &a : attrs) {
    if (a.name == kFp8ScaleOfAttr) {
      const auto *list = std::get_if<std::vector<int64_t>>(&a.value);
      if (!list)
        return "fp8_scale_of must be an integer list";
      split.outputs = *list;
      listed = true;
    } else if (a.name == kFp8FormatAttr && std::holds_alternative<std::string>(a.value)) {
      split.format = std::get<std::string>(a.value);
    } else if (a.name == kFp8MarginAttr && std::holds_alternative<int64_t>(a.value)) {
      split.margin = std::get<int64_t>(a.value);
    } else if (a.name != kFp8FormatAttr && a.name != kFp8MarginAttr) {
      split.kernelAttrs.push_back(a);
    }
  }
  if (!listed)
    return {};
  const size_t extra = split.outputs.size();
  if (extra == 0 || extra >= numOutputs)
    return "fp8_scale_of lists " + std::to_string(extra) + " outputs of a call with " +
           std::to_string(numOutputs) + " in all";
  for (int64_t i : split.outputs)
    if (i < 0 || static_cast<size_t>(i) >= numOutputs - extra)
      return "fp8_scale_of names output " + std::to_string(i) + ", not one of the kernel's " +
             std::to_string(numOutputs - extra);
  return {};
}

std::string checkKernelArity(KernelId id, size_t numInputs, size_t numOutputs,
                             size_t epilogueOutputs) {
  if (numOutputs < epilogueOutputs)
    return "has " + std::to_string(epilogueOutputs) + " epilogue outputs but " +
           std::to_string(numOutputs) + " outputs in all";
  numOutputs -= epilogueOutputs;
  const KernelInfo &k = kernelInfo(id);
  const bool inputsOk = static_cast<int64_t>(numInputs) >= k.minInputs &&
                        (k.maxInputs < 0 || static_cast<int64_t>(numInputs) <= k.maxInputs);
  if (!inputsOk) {
    std::string expected = k.maxInputs < 0 ? std::to_string(k.minInputs) + " or more"
                           : k.minInputs == k.maxInputs
                               ? std::to_string(k.minInputs)
                               : std::to_string(k.minInputs) + " to " + std::to_string(k.maxInputs);
    return "takes " + expected + " inputs, got " + std::to_string(numInputs);
  }
  const bool outputsOk = k.numOutputs < 0 ? numOutputs >= 1
                                          : static_cast<int64_t>(numOutputs) == k.numOutputs;
  if (!outputsOk)
    return "produces " + (k.numOutputs < 0 ? std::string("1 or more") : std::to_string(k.numOutputs)) +
           " outputs, got " + std::to_string(numOutputs);
  return {};
}

} // namespace loom
