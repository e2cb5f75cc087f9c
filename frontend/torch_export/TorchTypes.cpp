#include "frontend/torch_export/TorchTypes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <cctype>

using namespace mlir;

namespace loom::torch_export {

llvm::Error importError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

std::string typeString(Type type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << type;
  return text;
}

// Codes from torch/_export/serde/schema.py's ScalarType (schema 8.x).
std::optional<Type> elementTypeOf(MLIRContext *context, int64_t scalarType) {
  Builder b(context);
  switch (scalarType) {
  case 4: return b.getIntegerType(32);
  case 5: return b.getIntegerType(64);
  case 6: return b.getF16Type();
  case 7: return b.getF32Type();
  case 8: return b.getF64Type();
  case 12: return b.getI1Type();
  case 13: return b.getBF16Type();
  case 29: return Type(b.getFloat8E4M3FNType());
  case 30: return Type(b.getFloat8E5M2Type());
  default: return std::nullopt;
  }
}

bool isComplexScalarType(int64_t scalarType) { return scalarType >= 9 && scalarType <= 11; }

int64_t complexComponentType(int64_t scalarType) {
  return scalarType == 9 ? 6 : scalarType == 10 ? 7 : 8; // float16, float32, float64
}

std::string scalarTypeName(int64_t scalarType) {
  switch (scalarType) {
  case 1: return "uint8";
  case 2: return "int8";
  case 3: return "int16";
  case 4: return "int32";
  case 5: return "int64";
  case 6: return "float16";
  case 7: return "float32";
  case 8: return "float64";
  case 9: return "complex32";
  case 10: return "complex64";
  case 11: return "complex128";
  case 12: return "bool";
  case 13: return "bfloat16";
  case 28: return "uint16";
  case 29: return "float8_e4m3fn";
  case 30: return "float8_e5m2";
  case 31: return "float8_e4m3fnuz";
  case 32: return "float8_e5m2fnuz";
  default: return "scalar type " + std::to_string(scalarType);
  }
}

int64_t storageBytesOf(Type elementType) {
  if (elementType.isInteger(1))
    return 1;
  return elementType.getIntOrFloatBitWidth() / 8;
}

std::optional<int64_t> SymbolValues::lookup(llvm::StringRef symbol) const {
  auto it = values_.find(symbol);
  if (it == values_.end())
    return std::nullopt;
  return it->second;
}

namespace {

int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/// Recursive descent over sympy's printed integer expressions.
class ExpressionParser {
public:
  ExpressionParser(llvm::StringRef text, const SymbolValues &symbols)
      : text_(text), symbols_(symbols) {}

  llvm::Expected<int64_t> parse() {
    auto value = sum();
    if (!value)
      return value.takeError();
    skipSpace();
    if (pos_ != text_.size())
      return error("unexpected '" + text_.substr(pos_, 1) + "'");
    return value;
  }

private:
  llvm::Error error(const llvm::Twine &what) {
    return importError("cannot evaluate the symbolic size '" + text_ + "': " + what);
  }
  void skipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
  }
  bool accept(llvm::StringRef token) {
    skipSpace();
    if (!text_.substr(pos_).starts_with(token))
      return false;
    pos_ += token.size();
    return true;
  }

  llvm::Expected<int64_t> sum() {
    auto value = product();
    if (!value)
      return value;
    int64_t result = *value;
    while (true) {
      if (accept("+")) {
        auto rhs = product();
        if (!rhs)
          return rhs;
        result += *rhs;
      } else if (accept("-")) {
        auto rhs = product();
        if (!rhs)
          return rhs;
        result -= *rhs;
      } else {
        return result;
      }
    }
  }

  llvm::Expected<int64_t> product() {
    auto value = power();
    if (!value)
      return value;
    int64_t result = *value;
    while (true) {
      bool floor = false, mod = false;
      if (accept("//"))
        floor = true;
      else if (accept("%"))
        mod = true;
      else if (!(peekStar() && accept("*")))
        return result;
      auto rhs = power();
      if (!rhs)
        return rhs;
      if ((floor || mod) && *rhs == 0)
        return error("division by zero");
      result = floor ? floorDiv(result, *rhs)
               : mod ? result - floorDiv(result, *rhs) * *rhs
                     : result * *rhs;
    }
  }
  // A single '*' (multiplication), not the '**' of a power.
  bool peekStar() {
    skipSpace();
    return text_.substr(pos_).starts_with("*") && !text_.substr(pos_).starts_with("**");
  }

  llvm::Expected<int64_t> power() {
    auto base = unary();
    if (!base)
      return base;
    if (!accept("**"))
      return base;
    auto exponent = power();
    if (!exponent)
      return exponent;
    if (*exponent < 0)
      return error("negative exponent");
    int64_t result = 1;
    for (int64_t i = 0; i < *exponent; ++i)
      result *= *base;
    return result;
  }

  llvm::Expected<int64_t> unary() {
    if (accept("-")) {
      auto value = unary();
      if (!value)
        return value;
      return -*value;
    }
    return atom();
  }

  llvm::Expected<int64_t> atom() {
    skipSpace();
    if (accept("(")) {
      auto value = sum();
      if (!value)
        return value;
      if (!accept(")"))
        return error("missing ')'");
      return value;
    }
    size_t start = pos_;
    if (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])))
        ++pos_;
      int64_t value = 0;
      if (text_.substr(start, pos_ - start).getAsInteger(10, value))
        return error("number out of range");
      return value;
    }
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))
      ++pos_;
    llvm::StringRef name = text_.substr(start, pos_ - start);
    if (name.empty())
      return error(pos_ < text_.size() ? "unexpected '" + text_.substr(pos_, 1) + "'"
                                       : llvm::Twine("unexpected end"));
    if (accept("("))
      return call(name);
    if (std::optional<int64_t> value = symbols_.lookup(name))
      return *value;
    return importError("symbolic size '" + name + "' has no value" +
                       (name == text_ ? "" : " (in '" + text_ + "')") +
                       ": fix it with --dim " + name + "=N (or --batch/--seq)");
  }

  /// 'text' or "text", for sympy's srepr: Symbol('s72', positive=True).
  std::optional<llvm::StringRef> quoted() {
    skipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      return std::nullopt;
    char quote = text_[pos_];
    size_t end = text_.find(quote, pos_ + 1);
    if (end == llvm::StringRef::npos)
      return std::nullopt;
    llvm::StringRef inside = text_.slice(pos_ + 1, end);
    pos_ = end + 1;
    return inside;
  }

  /// Symbol('name', assumption=True, ...): the bound value of name.
  llvm::Expected<int64_t> symbolCall() {
    std::optional<llvm::StringRef> name = quoted();
    if (!name)
      return error("expected a quoted name in Symbol(...)");
    // Assumptions (positive=True, integer=True) do not change the value.
    while (accept(",")) {
      skipSpace();
      while (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != ')')
        ++pos_;
    }
    if (!accept(")"))
      return error("missing ')'");
    if (std::optional<int64_t> value = symbols_.lookup(*name))
      return *value;
    return importError("symbolic size '" + *name + "' has no value (in '" + text_ +
                       "'): fix it with --dim " + *name + "=N (or --batch/--seq)");
  }

  llvm::Expected<int64_t> call(llvm::StringRef function) {
    if (function == "Symbol")
      return symbolCall();
    llvm::SmallVector<int64_t> args;
    if (!accept(")")) {
      while (true) {
        auto value = sum();
        if (!value)
          return value;
        args.push_back(*value);
        if (accept(")"))
          break;
        if (!accept(","))
          return error("expected ',' or ')'");
      }
    }
    // sympy's srepr: Integer(4), Add(a, b, ...), Mul(a, b, ...), Pow(a, n).
    if (function == "Integer" && args.size() == 1)
      return args[0];
    if (function == "Add" && !args.empty()) {
      int64_t result = 0;
      for (int64_t v : args)
        result += v;
      return result;
    }
    if (function == "Mul" && !args.empty()) {
      int64_t result = 1;
      for (int64_t v : args)
        result *= v;
      return result;
    }
    if (function == "Pow" && args.size() == 2 && args[1] >= 0) {
      int64_t result = 1;
      for (int64_t i = 0; i < args[1]; ++i)
        result *= args[0];
      return result;
    }
    if ((function == "Max" || function == "Min") && !args.empty()) {
      int64_t result = args[0];
      for (int64_t v : args)
        result = function == "Max" ? std::max(result, v) : std::min(result, v);
      return result;
    }
    if (args.size() == 2 && args[1] != 0) {
      if (function == "FloorDiv")
        return floorDiv(args[0], args[1]);
      if (function == "CleanDiv")
        return floorDiv(args[0], args[1]);
      if (function == "CeilDiv")
        return -floorDiv(-args[0], args[1]);
      if (function == "Mod" || function == "PythonMod")
        return args[0] - floorDiv(args[0], args[1]) * args[1];
    }
    return error("unsupported function '" + function + "'");
  }

  llvm::StringRef text_;
  size_t pos_ = 0;
  const SymbolValues &symbols_;
};

} // namespace

std::optional<llvm::StringRef> symbolNameOf(llvm::StringRef expression) {
  llvm::StringRef text = expression.trim();
  auto isName = [](llvm::StringRef name) {
    return !name.empty() &&
           (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') &&
           llvm::all_of(name, [](char c) {
             return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
           });
  };
  if (isName(text))
    return text;
  // Symbol('s72', positive=True, integer=True)
  if (text.consume_front("Symbol(") && text.consume_back(")")) {
    text = text.trim();
    if (text.size() >= 2 && (text[0] == '\'' || text[0] == '"')) {
      size_t end = text.find(text[0], 1);
      if (end != llvm::StringRef::npos && isName(text.slice(1, end)))
        return text.slice(1, end);
    }
  }
  return std::nullopt;
}

llvm::Expected<int64_t> SymbolValues::evaluate(llvm::StringRef expression) const {
  return ExpressionParser(expression, *this).parse();
}

llvm::Expected<int64_t> symIntValue(const llvm::json::Value &symInt,
                                    const SymbolValues &symbols) {
  const llvm::json::Object *object = symInt.getAsObject();
  if (object) {
    if (std::optional<int64_t> value = object->getInteger("as_int"))
      return *value;
    if (const llvm::json::Object *expr = object->getObject("as_expr"))
      if (std::optional<llvm::StringRef> text = expr->getString("expr_str"))
        return symbols.evaluate(*text);
  }
  return importError("malformed SymInt (expected as_int or as_expr)");
}

llvm::Expected<int64_t> scalarTypeOfMeta(const llvm::json::Value &meta) {
  const llvm::json::Object *object = meta.getAsObject();
  std::optional<int64_t> dtype = object ? object->getInteger("dtype") : std::nullopt;
  if (!dtype)
    return importError("malformed TensorMeta: no integer 'dtype'");
  return *dtype;
}

llvm::Expected<RankedTensorType> tensorTypeOf(MLIRContext *context,
                                              const llvm::json::Value &meta,
                                              const SymbolValues &symbols) {
  auto dtype = scalarTypeOfMeta(meta);
  if (!dtype)
    return dtype.takeError();
  // A complex tensor is imported as its real view (view_as_real's layout):
  // the component type, with a trailing dim of 2 for (real, imaginary).
  const bool complex = isComplexScalarType(*dtype);
  std::optional<Type> element =
      elementTypeOf(context, complex ? complexComponentType(*dtype) : *dtype);
  if (!element)
    return importError("unsupported dtype " + scalarTypeName(*dtype));
  const llvm::json::Array *sizes = meta.getAsObject()->getArray("sizes");
  if (!sizes)
    return importError("malformed TensorMeta: no 'sizes' list");
  llvm::SmallVector<int64_t> shape;
  int64_t elements = 1;
  for (const llvm::json::Value &size : *sizes) {
    auto value = symIntValue(size, symbols);
    if (!value)
      return value.takeError();
    if (*value < 0)
      return importError("negative size " + llvm::Twine(*value));
    // Sizes this large are damage, not models; they would overflow byte counts.
    if (*value > 0 && elements > kMaxTensorElements / *value)
      return importError("a tensor of more than 2^48 elements");
    elements *= *value;
    shape.push_back(*value);
  }
  if (complex)
    shape.push_back(2);
  return RankedTensorType::get(shape, *element);
}

} // namespace loom::torch_export
