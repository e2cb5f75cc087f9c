#include "runtime/abi/FusedBody.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

namespace loom {

namespace {

struct FormulaEntry {
  std::string_view kernel, attr, value, expr;
};
constexpr FormulaEntry kFormulas[] = {
#define LOOM_KERNEL_SCALAR_FORMULA(KERNEL, ATTR, VALUE, EXPR) {KERNEL, ATTR, VALUE, EXPR},
#include "runtime/abi/KernelScalarFormulas.def"
#undef LOOM_KERNEL_SCALAR_FORMULA
};

// Bounds that keep a damaged body from asking for absurd work.
constexpr size_t kMaxSteps = size_t(1) << 16;
constexpr size_t kMaxInputs = size_t(1) << 12;
constexpr size_t kMaxRank = 32;
constexpr size_t kMaxListLength = size_t(1) << 16;
constexpr int64_t kMaxElements = int64_t(1) << 56;

bool isWordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

/// A string attribute value the text carries as it is.
bool isPlainWord(const std::string &s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), isWordChar);
}


std::string formatShape(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t d = 0; d < shape.size(); ++d)
    text += (d ? "," : "") + std::to_string(shape[d]);
  return text + "]";
}

std::string formatAttr(const AttrValue &value) {
  if (auto *i = std::get_if<int64_t>(&value))
    return std::to_string(*i);
  if (auto *f = std::get_if<double>(&value))
    return formatAttrDouble(*f);
  if (auto *s = std::get_if<std::string>(&value))
    return *s;
  std::string text = "[";
  if (auto *is = std::get_if<std::vector<int64_t>>(&value)) {
    for (size_t k = 0; k < is->size(); ++k)
      text += (k ? ", " : "") + std::to_string((*is)[k]);
  } else {
    const auto &fs = std::get<std::vector<double>>(value);
    for (size_t k = 0; k < fs.size(); ++k)
      text += (k ? ", " : "") + formatAttrDouble(fs[k]);
  }
  return text + "]";
}

std::string formatRef(const FusedRef &ref) {
  return (ref.isInput ? "%i" : "%") + std::to_string(ref.index);
}

/// The element count of a shape, or -1 for a negative dim or an overflow.
int64_t elementCount(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return -1;
    if (d != 0 && n > kMaxElements / d)
      return -1;
    n *= d;
  }
  return n;
}

std::string checkType(const FusedTensorType &type, const std::string &what) {
  if (static_cast<int>(type.dtype) >= kNumDTypes)
    return what + " has an unknown element type (" +
           std::to_string(static_cast<int>(type.dtype)) + ")";
  if (type.shape.size() > kMaxRank)
    return what + " has rank " + std::to_string(type.shape.size()) + " (at most " +
           std::to_string(kMaxRank) + ")";
  if (elementCount(type.shape) < 0)
    return what + " has shape " + formatShape(type.shape) +
           " (a negative dim, or too many elements)";
  return {};
}

std::string memberLabel(const FusedBody &body, size_t i) {
  std::string label = "member %" + std::to_string(i);
  if (static_cast<size_t>(body.steps[i].kernel) < kNumKernels)
    label += " (" + std::string(kernelName(body.steps[i].kernel)) + ")";
  return label;
}

/// A recursive-descent reader of the text; every error names the character
/// where it was found.
class BodyParser {
public:
  explicit BodyParser(std::string_view text) : text_(text) {}

  llvm::Expected<FusedBody> parse() {
    FusedBody body;
    if (!parseBody(body))
      return llvm::createStringError(std::errc::invalid_argument, "at character %zu: %s",
                                     errorPos_ + 1, error_.c_str());
    if (std::string problem = checkFusedBody(body); !problem.empty())
      return llvm::createStringError(std::errc::invalid_argument, "%s", problem.c_str());
    return body;
  }

private:
  bool fail(const std::string &what) {
    if (error_.empty()) {
      error_ = what;
      errorPos_ = pos_;
    }
    return false;
  }
  void skipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t' ||
            text_[pos_] == '\r'))
      ++pos_;
  }
  bool peek(char c) {
    skipSpace();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  bool consume(char c) {
    if (!peek(c))
      return false;
    ++pos_;
    return true;
  }
  bool expect(char c) {
    if (consume(c))
      return true;
    std::string found = pos_ < text_.size() ? std::string("'") + text_[pos_] + "'" : "the end";
    return fail(std::string("expected '") + c + "', found " + found);
  }
  std::string_view word() {
    skipSpace();
    size_t start = pos_;
    while (pos_ < text_.size() && isWordChar(text_[pos_]))
      ++pos_;
    return text_.substr(start, pos_ - start);
  }
  bool integer(int64_t &value, const char *what) {
    skipSpace();
    size_t start = pos_;
    bool negative = pos_ < text_.size() && text_[pos_] == '-';
    if (negative)
      ++pos_;
    if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') {
      pos_ = start;
      return fail(std::string("expected ") + what);
    }
    uint64_t magnitude = 0;
    const uint64_t limit = negative ? uint64_t(INT64_MAX) + 1 : uint64_t(INT64_MAX);
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      uint64_t digit = text_[pos_] - '0';
      if (magnitude > (limit - digit) / 10) {
        pos_ = start;
        return fail(std::string(what) + " out of range");
      }
      magnitude = magnitude * 10 + digit;
      ++pos_;
    }
    value = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
    return true;
  }
  bool index(uint32_t &value, const char *what) {
    int64_t v;
    size_t start = pos_;
    if (!integer(v, what))
      return false;
    if (v < 0 || v > int64_t(UINT32_MAX)) {
      pos_ = start;
      return fail(std::string(what) + " out of range");
    }
    value = static_cast<uint32_t>(v);
    return true;
  }
  bool number(double &value) {
    skipSpace();
    size_t start = pos_;
    while (pos_ < text_.size() && (isWordChar(text_[pos_]) || text_[pos_] == '+'))
      ++pos_;
    std::string token(text_.substr(start, pos_ - start));
    char *end = nullptr;
    value = token.empty() ? 0.0 : std::strtod(token.c_str(), &end);
    if (token.empty() || end != token.c_str() + token.size()) {
      pos_ = start;
      return fail("expected a number");
    }
    return true;
  }
  bool type(FusedTensorType &t) {
    size_t start = (skipSpace(), pos_);
    std::string_view name = word();
    std::optional<DType> dtype = parseDType(name);
    if (!dtype) {
      pos_ = start;
      return fail("expected an element type (f32, bf16, ...), found '" + std::string(name) + "'");
    }
    t.dtype = *dtype;
    t.shape.clear();
    if (!expect('['))
      return false;
    if (consume(']'))
      return true;
    do {
      int64_t dim;
      if (!integer(dim, "a dim"))
        return false;
      if (t.shape.size() == kMaxRank)
        return fail("more than " + std::to_string(kMaxRank) + " dims");
      t.shape.push_back(dim);
    } while (consume(','));
    return expect(']');
  }
  bool ref(FusedRef &r) {
    if (!expect('%'))
      return false;
    r.isInput = pos_ < text_.size() && text_[pos_] == 'i';
    if (r.isInput)
      ++pos_;
    return index(r.index, r.isInput ? "an input number" : "a member number");
  }
  bool attrValue(AttrKind kind, AttrValue &value) {
    switch (kind) {
    case AttrKind::Int: {
      int64_t v;
      if (!integer(v, "an integer"))
        return false;
      value = v;
      return true;
    }
    case AttrKind::F64: {
      double v;
      if (!number(v))
        return false;
      value = v;
      return true;
    }
    case AttrKind::Str: {
      std::string_view w = word();
      if (w.empty())
        return fail("expected a word");
      value = std::string(w);
      return true;
    }
    case AttrKind::Ints:
    case AttrKind::F64s: {
      if (!expect('['))
        return false;
      std::vector<int64_t> ints;
      std::vector<double> floats;
      if (!consume(']')) {
        do {
          if (ints.size() + floats.size() == kMaxListLength)
            return fail("a list of more than " + std::to_string(kMaxListLength) + " values");
          if (kind == AttrKind::Ints) {
            int64_t v;
            if (!integer(v, "an integer"))
              return false;
            ints.push_back(v);
          } else {
            double v;
            if (!number(v))
              return false;
            floats.push_back(v);
          }
        } while (consume(','));
        if (!expect(']'))
          return false;
      }
      if (kind == AttrKind::Ints)
        value = std::move(ints);
      else
        value = std::move(floats);
      return true;
    }
    case AttrKind::Retired:
      break;
    }
    return fail("an attribute no kernel reads any more");
  }
  bool attrs(KernelId kernel, std::vector<NamedAttr> &out) {
    do {
      size_t start = (skipSpace(), pos_);
      std::string name(word());
      if (name.empty())
        return fail("expected an attribute name");
      KernelAttrRange schema = kernelAttrSchema(kernel);
      const KernelAttrInfo *info = std::find_if(
          schema.begin(), schema.end(), [&](const KernelAttrInfo &a) { return a.name == name; });
      if (info == schema.end() || info->kind == AttrKind::Retired) {
        pos_ = start;
        return fail("'" + name + "' is not an attribute " + std::string(kernelName(kernel)) +
                    " reads");
      }
      if (!expect('='))
        return false;
      AttrValue value;
      if (!attrValue(info->kind, value))
        return false;
      out.push_back({std::move(name), std::move(value)});
    } while (consume(','));
    return expect('}');
  }
  bool step(FusedBody &body) {
    if (body.steps.size() == kMaxSteps)
      return fail("more than " + std::to_string(kMaxSteps) + " members");
    FusedStep s;
    FusedRef self;
    size_t start = (skipSpace(), pos_);
    if (!ref(self))
      return false;
    if (self.isInput || self.index != body.steps.size()) {
      pos_ = start;
      return fail("expected member %" + std::to_string(body.steps.size()) + " here");
    }
    if (!expect('='))
      return false;
    size_t kernelStart = (skipSpace(), pos_);
    std::string_view name = word();
    std::optional<KernelId> kernel = findKernel(name);
    if (!kernel) {
      pos_ = kernelStart;
      return fail("unknown kernel '" + std::string(name) + "'");
    }
    s.kernel = *kernel;
    if (!expect('('))
      return false;
    if (!consume(')')) {
      do {
        FusedRef r;
        if (!ref(r))
          return false;
        if (s.operands.size() == kMaxInputs)
          return fail("too many operands");
        s.operands.push_back(r);
      } while (consume(','));
      if (!expect(')'))
        return false;
    }
    if (consume('{') && !attrs(s.kernel, s.attrs))
      return false;
    if (!expect(':') || !type(s.result) || !expect(';'))
      return false;
    body.steps.push_back(std::move(s));
    return true;
  }
  bool parseBody(FusedBody &body) {
    if (!expect('('))
      return false;
    if (!consume(')')) {
      do {
        if (body.inputs.size() == kMaxInputs)
          return fail("more than " + std::to_string(kMaxInputs) + " inputs");
        FusedTensorType t;
        if (!type(t))
          return false;
        body.inputs.push_back(std::move(t));
      } while (consume(','));
      if (!expect(')'))
        return false;
    }
    if (!expect('{'))
      return false;
    for (;;) {
      skipSpace();
      size_t start = pos_;
      if (word() == "yield")
        break;
      pos_ = start;
      if (!peek('%'))
        return fail("expected a member ('%" + std::to_string(body.steps.size()) +
                    " = ...') or 'yield'");
      if (!step(body))
        return false;
    }
    do {
      FusedRef r;
      size_t start = (skipSpace(), pos_);
      if (!ref(r))
        return false;
      if (r.isInput) {
        pos_ = start;
        return fail("a group yields its members' values, not its inputs");
      }
      if (body.yields.size() == kMaxSteps)
        return fail("too many yields");
      body.yields.push_back(r.index);
    } while (consume(','));
    if (!expect('}'))
      return false;
    skipSpace();
    if (pos_ != text_.size())
      return fail("unexpected text after the body");
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string error_;
  size_t errorPos_ = 0;
};

} // namespace

std::string formatFusedType(const FusedTensorType &type) {
  std::string name = static_cast<int>(type.dtype) < kNumDTypes
                         ? std::string(dtypeName(type.dtype))
                         : "dtype(" + std::to_string(static_cast<int>(type.dtype)) + ")";
  return name + formatShape(type.shape);
}

std::string printFusedBody(const FusedBody &body) {
  std::string text = "(";
  for (size_t i = 0; i < body.inputs.size(); ++i)
    text += (i ? ", " : "") + formatFusedType(body.inputs[i]);
  text += ") {";
  for (size_t i = 0; i < body.steps.size(); ++i) {
    const FusedStep &s = body.steps[i];
    text += " %" + std::to_string(i) + " = " + std::string(kernelName(s.kernel)) + "(";
    for (size_t k = 0; k < s.operands.size(); ++k)
      text += (k ? ", " : "") + formatRef(s.operands[k]);
    text += ")";
    if (!s.attrs.empty()) {
      text += " {";
      for (size_t k = 0; k < s.attrs.size(); ++k)
        text += (k ? ", " : "") + s.attrs[k].name + " = " + formatAttr(s.attrs[k].value);
      text += "}";
    }
    text += " : " + formatFusedType(s.result) + ";";
  }
  text += " yield ";
  for (size_t k = 0; k < body.yields.size(); ++k)
    text += (k ? ", %" : "%") + std::to_string(body.yields[k]);
  return text + " }";
}

llvm::Expected<FusedBody> parseFusedBody(std::string_view text) {
  return BodyParser(text).parse();
}

std::string checkFusedBody(const FusedBody &body) {
  if (body.inputs.size() > kMaxInputs)
    return "more than " + std::to_string(kMaxInputs) + " inputs";
  if (body.steps.empty())
    return "a body needs at least one member";
  if (body.steps.size() > kMaxSteps)
    return "more than " + std::to_string(kMaxSteps) + " members";
  if (body.yields.empty())
    return "a body yields at least one value";
  for (size_t i = 0; i < body.inputs.size(); ++i)
    if (std::string p = checkType(body.inputs[i], "input %i" + std::to_string(i)); !p.empty())
      return p;
  for (size_t i = 0; i < body.steps.size(); ++i) {
    const FusedStep &s = body.steps[i];
    if (static_cast<size_t>(s.kernel) >= kNumKernels)
      return "member %" + std::to_string(i) + " has an unknown kernel id";
    std::string label = memberLabel(body, i);
    if (s.kernel == KernelId::Fused)
      return label + ": a group cannot hold another";
    if (std::string arity = checkKernelArity(s.kernel, s.operands.size(), 1); !arity.empty())
      return label + " " + arity;
    for (size_t k = 0; k < s.operands.size(); ++k) {
      const FusedRef &r = s.operands[k];
      if (r.isInput ? r.index >= body.inputs.size() : r.index >= i)
        return label + " reads " + formatRef(r) + ", which is not " +
               (r.isInput ? "an input of the group" : "an earlier member");
    }
    if (std::string problem = checkKernelAttrs(s.kernel, s.attrs); !problem.empty())
      return label + ": " + problem;
    std::set<std::string> names;
    for (const NamedAttr &a : s.attrs) {
      if (!names.insert(a.name).second)
        return label + ": attribute '" + a.name + "' is given twice";
      if (auto *str = std::get_if<std::string>(&a.value); str && !isPlainWord(*str))
        return label + ": attribute '" + a.name + "' is \"" + *str +
               "\", which a body cannot carry (a plain word of letters, digits, '_', "
               "'.' and '-' is needed)";
      if (auto *list = std::get_if<std::vector<int64_t>>(&a.value);
          list && list->size() > kMaxListLength)
        return label + ": attribute '" + a.name + "' is too long";
      if (auto *list = std::get_if<std::vector<double>>(&a.value);
          list && list->size() > kMaxListLength)
        return label + ": attribute '" + a.name + "' is too long";
    }
    if (std::string p = checkType(s.result, label + "'s result"); !p.empty())
      return p;
  }
  std::set<uint32_t> yielded;
  for (uint32_t y : body.yields) {
    if (y >= body.steps.size())
      return "yield of %" + std::to_string(y) + ", which is not a member";
    if (!yielded.insert(y).second)
      return "%" + std::to_string(y) + " is yielded twice";
  }
  return {};
}

std::string checkFusedCall(const FusedBody &body, const std::vector<FusedTensorType> &inputs,
                           const std::vector<FusedTensorType> &outputs) {
  if (inputs.size() != body.inputs.size())
    return "the body reads " + std::to_string(body.inputs.size()) + " inputs, the call passes " +
           std::to_string(inputs.size());
  if (outputs.size() != body.yields.size())
    return "the body yields " + std::to_string(body.yields.size()) +
           " values, the call writes " + std::to_string(outputs.size()) + " outputs";
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i] != body.inputs[i])
      return "input " + std::to_string(i) + " is " + formatFusedType(inputs[i]) +
             ", the body declares " + formatFusedType(body.inputs[i]);
  for (size_t o = 0; o < outputs.size(); ++o) {
    const FusedTensorType &want = body.steps[body.yields[o]].result;
    if (outputs[o] != want)
      return "output " + std::to_string(o) + " is " + formatFusedType(outputs[o]) +
             ", the body yields " + formatFusedType(want) + " (%" +
             std::to_string(body.yields[o]) + ")";
  }
  return {};
}

std::optional<std::string_view> scalarFormula(KernelId kernel,
                                              const std::vector<NamedAttr> &attrs) {
  if (static_cast<size_t>(kernel) >= kNumKernels)
    return std::nullopt;
  std::string_view name = kernelName(kernel);
  for (const FormulaEntry &f : kFormulas) {
    if (f.kernel != name)
      continue;
    if (f.attr.empty())
      return f.expr;
    for (const NamedAttr &a : attrs)
      if (a.name == f.attr)
        if (auto *s = std::get_if<std::string>(&a.value); s && *s == f.value)
          return f.expr;
  }
  return std::nullopt;
}

bool broadcastsTo(const std::vector<int64_t> &from, const std::vector<int64_t> &to) {
  if (from.size() > to.size())
    return false;
  size_t offset = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d)
    if (from[d] != to[offset + d] && from[d] != 1)
      return false;
  return true;
}

std::optional<std::vector<int64_t>> fusedLoopShape(const FusedBody &body) {
  std::vector<int64_t> loop;
  for (const FusedStep &s : body.steps) {
    const std::vector<int64_t> &shape = s.result.shape;
    std::vector<int64_t> merged(std::max(loop.size(), shape.size()), 1);
    for (size_t d = 0; d < merged.size(); ++d) {
      int64_t a = d + loop.size() >= merged.size() ? loop[d + loop.size() - merged.size()] : 1;
      int64_t b = d + shape.size() >= merged.size() ? shape[d + shape.size() - merged.size()] : 1;
      if (a != b && a != 1 && b != 1)
        return std::nullopt;
      merged[d] = a == 1 ? b : a;
    }
    loop = std::move(merged);
  }
  return loop;
}

std::string fusedCodegenProblem(const FusedBody &body) {
  if (std::string malformed = checkFusedBody(body); !malformed.empty())
    return malformed;
  auto supported = [](DType t) {
    return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::I1;
  };
  for (size_t i = 0; i < body.inputs.size(); ++i)
    if (!supported(body.inputs[i].dtype))
      return "input %i" + std::to_string(i) + " is " + formatFusedType(body.inputs[i]) +
             ": generated kernels take f32, bf16, f16 and i1";
  for (size_t i = 0; i < body.steps.size(); ++i) {
    const FusedStep &s = body.steps[i];
    std::string label = memberLabel(body, i);
    if (!supported(s.result.dtype))
      return label + " gives " + formatFusedType(s.result) +
             ": generated kernels take f32, bf16, f16 and i1";
    if (!scalarFormula(s.kernel, s.attrs)) {
      bool any = std::any_of(std::begin(kFormulas), std::end(kFormulas),
                             [&](const FormulaEntry &f) { return f.kernel == kernelName(s.kernel); });
      return label + " has no scalar formula" + (any ? " for its attributes" : "") +
             " (NN_ScalarFormula in its ODS)";
    }
    for (size_t k = 0; k < s.operands.size(); ++k) {
      const FusedRef &r = s.operands[k];
      const FusedTensorType &t = r.isInput ? body.inputs[r.index] : body.steps[r.index].result;
      if (!broadcastsTo(t.shape, s.result.shape))
        return label + ": operand " + std::to_string(k) + " (" + formatFusedType(t) +
               ") does not broadcast to its result " + formatFusedType(s.result);
    }
  }
  // Every value reaches a yield, so the kernel's index space (the largest
  // member's shape) is that of an output: no work beyond the call's buffers.
  std::vector<bool> live(body.steps.size(), false);
  for (uint32_t y : body.yields)
    live[y] = true;
  for (size_t i = body.steps.size(); i-- > 0;)
    if (live[i])
      for (const FusedRef &r : body.steps[i].operands)
        if (!r.isInput)
          live[r.index] = true;
  for (size_t i = 0; i < body.steps.size(); ++i)
    if (!live[i])
      return memberLabel(body, i) + " gives a value nothing yields or reads";
  if (!fusedLoopShape(body))
    return "the members' shapes do not broadcast to one shape";
  return {};
}

std::string describeFusedBody(const FusedBody &body) {
  std::string text;
  for (size_t i = 0; i < body.steps.size(); ++i) {
    std::string name = static_cast<size_t>(body.steps[i].kernel) < kNumKernels
                           ? std::string(kernelName(body.steps[i].kernel))
                           : "?";
    text += (i ? ", " : "") + name;
  }
  text += " ->";
  for (size_t k = 0; k < body.yields.size(); ++k) {
    text += k ? ", " : " ";
    text += body.yields[k] < body.steps.size()
                ? formatFusedType(body.steps[body.yields[k]].result)
                : std::string("?");
  }
  return text;
}

} // namespace loom
