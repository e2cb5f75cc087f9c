// loom-tblgen: Loom's TableGen backends. The kernel contract (which runtime
// kernels exist, their arity and the attributes each reads) is declared once,
// in ODS, beside the nn op that lowers to the kernel (dialects/nn/NNKernels.td).
// From it this tool writes:
//   -gen-kernel-def        runtime/abi/Kernels.def: LOOM_KERNEL(NAME, MIN_INPUTS,
//                          MAX_INPUTS, NUM_OUTPUTS), one line per kernel
//   -gen-kernel-ids        runtime/abi/KernelIds.def: LOOM_KERNEL_ID(IDENT), the
//                          KernelId enumerators (nn.layer_norm: LayerNorm)
//   -gen-kernel-attr-def   runtime/abi/KernelAttrSchema.def: LOOM_KERNEL_ATTR(KERNEL,
//                          NAME, KIND, REQUIRED), the attribute schema
//   -gen-kernel-attr-fns   the compiler's op -> kernel attribute functions
//                          (dialects/nn/KernelAttributes.cpp includes them)
//   -gen-kernel-scalar-formulas
//                          runtime/abi/KernelScalarFormulas.def: what each
//                          elementwise kernel computes at one element, which
//                          the fusion code generator (kernels/fused) reads
// so the compiler, the loader and the backends cannot disagree.

#include "mlir/TableGen/Attribute.h"
#include "mlir/TableGen/GenInfo.h"
#include "mlir/TableGen/Operator.h"
#include "mlir/Tools/mlir-tblgen/MlirTblgenMain.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/TableGen/Error.h"
#include "llvm/TableGen/Record.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

using namespace llvm;
using mlir::tblgen::Operator;

namespace {

/// One attribute a kernel reads.
struct AttrSpec {
  std::string name;
  std::string kind; // Int, F64, Str, Ints, F64s
  bool required = false;
  std::string code; // C++ statement writing it from `o` (the typed op); empty: set later by a pass
};

/// One scalar formula of an elementwise kernel (NN_ScalarFormula).
struct FormulaSpec {
  std::string expr;
  std::string attr, value; // empty: for every call
};

struct KernelSpec {
  std::string name;
  std::string doc;
  std::string opClass; // empty for a kernel with no nn op
  int minInputs = 0, maxInputs = 0, numOutputs = 0;
  std::vector<AttrSpec> attrs;
  std::vector<FormulaSpec> formulas;
};

std::string stripDollarOp(StringRef code) {
  std::string out;
  for (size_t i = 0; i < code.size();) {
    if (code.substr(i).starts_with("$_op")) {
      out += "o";
      i += 4;
    } else {
      out += code[i++];
    }
  }
  return out;
}

void addExtras(const Record &def, KernelSpec &spec) {
  for (const Record *extra : def.getValueAsListOfDefs("kernelExtraAttrs")) {
    AttrSpec a;
    a.name = extra->getValueAsString("name").str();
    a.kind = extra->getValueAsString("kind").str();
    StringRef value = extra->getValueAsString("value");
    a.required = extra->getValueAsBit("required");
    if (!value.empty())
      a.code = formatv("w.set(\"{0}\", {1}({2}));", a.name,
                       a.kind == "Int" ? "int64_t" : a.kind == "F64" ? "double" : "",
                       stripDollarOp(value))
                   .str();
    if (a.kind != "Int" && a.kind != "F64" && a.kind != "Str" && a.kind != "Ints" &&
        a.kind != "F64s" && a.kind != "Retired")
      PrintFatalError(&def, "kernel attribute '" + a.name + "' has unknown kind '" + a.kind +
                                "' (Int, F64, Str, Ints, F64s or Retired)");
    auto same = llvm::find_if(spec.attrs, [&](const AttrSpec &s) { return s.name == a.name; });
    if (same != spec.attrs.end())
      *same = a; // a derived value replaces the op's own attribute
    else
      spec.attrs.push_back(a);
  }
}

/// The kernel's scalar formulas; a formula keyed by an attribute must name a
/// string attribute the kernel reads.
void addFormulas(const Record &def, KernelSpec &spec) {
  if (!def.getValue("kernelScalarFormulas"))
    return;
  for (const Record *f : def.getValueAsListOfDefs("kernelScalarFormulas")) {
    FormulaSpec formula;
    formula.expr = f->getValueAsString("expr").str();
    formula.attr = f->getValueAsString("attr").str();
    formula.value = f->getValueAsString("value").str();
    if (formula.expr.empty())
      PrintFatalError(&def, "a scalar formula of '" + spec.name + "' is empty");
    for (char c : formula.expr + formula.attr + formula.value)
      if (c == '"' || c == '\\' || c == '\n' || c == ';' || c == '{' || c == '}' || c == '#')
        PrintFatalError(&def, "scalar formula '" + formula.expr + "' of '" + spec.name +
                                  "' holds a character an expression does not need "
                                  "(quote, backslash, newline, ';', braces or '#')");
    if (!formula.attr.empty()) {
      auto attr = llvm::find_if(spec.attrs, [&](const AttrSpec &a) { return a.name == formula.attr; });
      if (attr == spec.attrs.end() || attr->kind != "Str")
        PrintFatalError(&def, "scalar formula of '" + spec.name + "' is keyed by '" +
                                  formula.attr + "', which is not a string attribute it reads");
    }
    spec.formulas.push_back(std::move(formula));
  }
}

/// The kernel attribute an ODS attribute becomes.
AttrSpec attrSpecFor(const Record &def, const Operator &op, const mlir::tblgen::NamedAttribute &na) {
  mlir::tblgen::Attribute attr = na.attr;
  bool optional = attr.isOptional();
  mlir::tblgen::Attribute base = attr.getBaseAttr();
  StringRef storage = base.getStorageType();
  std::string getter = "o." + op.getGetterName(na.name) + "()";
  AttrSpec a;
  a.name = na.name.str();
  a.required = !optional;
  auto write = [&](StringRef kind, StringRef valueOf) {
    a.kind = kind.str();
    if (optional)
      a.code = formatv("if (auto v = {0}) w.set(\"{1}\", {2});", getter, a.name,
                       formatv(valueOf.data(), "(*v)").str())
                   .str();
    else
      a.code = formatv("w.set(\"{0}\", {1});", a.name, formatv(valueOf.data(), getter).str())
                   .str();
  };
  if (storage == "::mlir::UnitAttr" || storage == "::mlir::BoolAttr") {
    // Flags are always written: 0 or 1.
    a.kind = "Int";
    a.required = true;
    a.code = formatv("w.set(\"{0}\", int64_t({1} ? 1 : 0));", a.name, getter).str();
  } else if (storage == "::mlir::IntegerAttr") {
    write("Int", "int64_t({0})");
  } else if (storage == "::mlir::FloatAttr") {
    write("F64", "{0}.convertToDouble()");
  } else if (storage == "::mlir::StringAttr") {
    write("Str", "{0}.str()");
  } else if (storage == "::mlir::DenseI64ArrayAttr") {
    write("Ints", "::llvm::ArrayRef<int64_t>({0})");
  } else if (storage == "::mlir::DenseF64ArrayAttr") {
    write("F64s", "::llvm::ArrayRef<double>({0})");
  } else if (base.getDef().isSubClassOf("EnumAttr") || base.isEnumAttr()) {
    const Record *info = base.getDef().isSubClassOf("EnumAttr")
                             ? base.getDef().getValueAsDef("enum")
                             : &base.getDef();
    mlir::tblgen::EnumAttr enumAttr(info);
    std::string fn = (enumAttr.getCppNamespace() + "::" + enumAttr.getSymbolToStringFnName()).str();
    write("Str", fn + "({0}).str()");
  } else {
    PrintFatalError(&def, "attribute '" + a.name + "' (" + storage +
                              ") has no kernel form: give the kernel an Int, F64, Str, "
                              "Ints or F64s attribute");
  }
  return a;
}

std::vector<KernelSpec> collectKernels(const RecordKeeper &records) {
  std::vector<KernelSpec> kernels;
  for (const Record *def : records.getAllDerivedDefinitions("NN_Kernel")) {
    Operator op(def);
    KernelSpec spec;
    spec.name = op.getOperationName();
    spec.opClass = op.getQualCppClassName();
    spec.doc = def->getValueAsString("kernelDoc").str();
    if (spec.doc.empty())
      spec.doc = op.getSummary().str();
    for (int i = 0, e = op.getNumOperands(); i < e; ++i) {
      const mlir::tblgen::NamedTypeConstraint &operand = op.getOperand(i);
      if (operand.isOptional()) {
        spec.maxInputs += spec.maxInputs >= 0 ? 1 : 0;
        AttrSpec has;
        has.name = "has_" + operand.name.str();
        has.kind = "Int";
        has.required = true;
        has.code = formatv("w.set(\"{0}\", int64_t(o.{1}() ? 1 : 0));", has.name,
                           op.getGetterName(operand.name))
                       .str();
        spec.attrs.push_back(has);
      } else if (operand.isVariadic()) {
        spec.minInputs += 1; // one or more
        spec.maxInputs = -1;
      } else {
        spec.minInputs += 1;
        spec.maxInputs += spec.maxInputs >= 0 ? 1 : 0;
      }
    }
    if (int extra = def->getValueAsInt("kernelExtraInputs"); extra > 0 && spec.maxInputs >= 0)
      spec.maxInputs += extra;
    for (int i = 0, e = op.getNumResults(); i < e; ++i) {
      if (op.getResult(i).isVariableLength())
        spec.numOutputs = -1;
      else if (spec.numOutputs >= 0)
        spec.numOutputs += 1;
    }
    if (int extra = def->getValueAsInt("kernelExtraOutputs"); extra > 0 && spec.numOutputs >= 0)
      spec.numOutputs += extra;
    for (const mlir::tblgen::NamedAttribute &na : op.getAttributes())
      if (!na.attr.isDerivedAttr())
        spec.attrs.push_back(attrSpecFor(*def, op, na));
    addExtras(*def, spec);
    addFormulas(*def, spec);
    kernels.push_back(std::move(spec));
  }
  for (const Record *def : records.getAllDerivedDefinitionsIfDefined("NN_RuntimeKernel")) {
    KernelSpec spec;
    spec.name = def->getValueAsString("kernelName").str();
    spec.doc = def->getValueAsString("kernelDoc").str();
    spec.minInputs = def->getValueAsInt("minInputs");
    spec.maxInputs = def->getValueAsInt("maxInputs");
    spec.numOutputs = def->getValueAsInt("numOutputs");
    addExtras(*def, spec);
    kernels.push_back(std::move(spec));
  }
  // A stable order: the contract's order is the kernel ids' order.
  llvm::sort(kernels, [](const KernelSpec &a, const KernelSpec &b) { return a.name < b.name; });
  for (size_t i = 1; i < kernels.size(); ++i)
    if (kernels[i].name == kernels[i - 1].name)
      PrintFatalError("kernel '" + kernels[i].name + "' is declared twice");
  for (KernelSpec &k : kernels)
    llvm::sort(k.attrs, [](const AttrSpec &a, const AttrSpec &b) { return a.name < b.name; });
  return kernels;
}

void emitComment(raw_ostream &os, StringRef text) {
  SmallVector<StringRef> lines;
  text.trim().split(lines, '\n');
  for (StringRef line : lines)
    os << "// " << line.trim() << "\n";
}

const char *kHeader =
    "// Generated by loom-tblgen from dialects/nn/*.td (the kernel contract\n"
    "// each nn op declares, dialects/nn/NNKernels.td). Do not edit.\n";

bool emitKernelDef(const RecordKeeper &records, raw_ostream &os) {
  os << kHeader;
  os << R"(//
// The kernels a Loom executable may call, shared by the compiler (which
// emits them), the loader (which resolves and checks them) and every backend
// (which must implement them all).
//
// LOOM_KERNEL(NAME, MIN_INPUTS, MAX_INPUTS, NUM_OUTPUTS)
// A NUM_OUTPUTS or MAX_INPUTS of -1 means "one or more". A kernel's id is its
// position in this list. All tensors are contiguous row-major. Unless said
// otherwise, inputs and outputs share one element type.

#ifndef LOOM_KERNEL
#error "define LOOM_KERNEL before including Kernels.def"
#endif

)";
  for (const KernelSpec &k : collectKernels(records)) {
    emitComment(os, k.doc);
    os << formatv("LOOM_KERNEL(\"{0}\", {1}, {2}, {3})\n", k.name, k.minInputs, k.maxInputs,
                  k.numOutputs);
  }
  return false;
}

/// "nn.layer_norm" -> "LayerNorm": the kernel's KernelId enumerator.
std::string kernelIdent(StringRef name) {
  std::string ident;
  bool upper = true;
  for (char c : name.substr(name.find('.') + 1)) {
    if (c == '_') {
      upper = true;
      continue;
    }
    ident += upper ? char(toupper(c)) : c;
    upper = false;
  }
  return ident;
}

bool emitKernelIds(const RecordKeeper &records, raw_ostream &os) {
  os << kHeader;
  os << R"(//
// LOOM_KERNEL_ID(IDENT): the KernelId enumerators, in Kernels.def's order
// (nn.layer_norm is KernelId::LayerNorm), so kernels switch on an enum.

#ifndef LOOM_KERNEL_ID
#error "define LOOM_KERNEL_ID before including KernelIds.def"
#endif

)";
  for (const KernelSpec &k : collectKernels(records))
    os << "LOOM_KERNEL_ID(" << kernelIdent(k.name) << ")\n";
  return false;
}

bool emitKernelAttrDef(const RecordKeeper &records, raw_ostream &os) {
  os << kHeader;
  os << R"(//
// The attributes each kernel reads: LOOM_KERNEL_ATTR(KERNEL, NAME, KIND,
// REQUIRED). KIND is Int, F64, Str, Ints or F64s (runtime/abi/KernelAttrs.h's
// AttrValue); an Int is accepted where an F64 is read. REQUIRED: the compiler
// always writes it. Retired: a name no longer read, refused everywhere.

#ifndef LOOM_KERNEL_ATTR
#error "define LOOM_KERNEL_ATTR before including KernelAttrSchema.def"
#endif

)";
  for (const KernelSpec &k : collectKernels(records))
    for (const AttrSpec &a : k.attrs)
      os << formatv("LOOM_KERNEL_ATTR(\"{0}\", \"{1}\", {2}, {3})\n", k.name, a.name, a.kind,
                    a.required ? 1 : 0);
  return false;
}

bool emitKernelAttrFns(const RecordKeeper &records, raw_ostream &os) {
  os << kHeader;
  os << "// One function per nn op with a kernel: the kernel attributes of one op\n"
        "// (its own attributes with defaults made explicit, enums as strings,\n"
        "// flags as 0/1, has_<operand> for optional operands, derived values).\n\n";
  std::vector<KernelSpec> kernels = collectKernels(records);
  for (const KernelSpec &k : kernels) {
    if (k.opClass.empty())
      continue;
    std::string fn = "kernelAttrs_" + StringRef(k.name).substr(3).str();
    os << "static void " << fn << "(::mlir::Operation *op, KernelAttrWriter &w) {\n";
    os << "  auto o = ::llvm::cast<" << k.opClass << ">(op);\n  (void)o;\n";
    for (const AttrSpec &a : k.attrs)
      if (!a.code.empty())
        os << "  " << a.code << "\n";
    os << "}\n\n";
  }
  os << "static const KernelAttrsEntry kKernelAttrsEntries[] = {\n";
  for (const KernelSpec &k : kernels)
    if (!k.opClass.empty())
      os << formatv("    {{\"{0}\", &kernelAttrs_{1}},\n", k.name, StringRef(k.name).substr(3));
  os << "};\n";
  return false;
}

bool emitKernelScalarFormulas(const RecordKeeper &records, raw_ostream &os) {
  os << kHeader;
  os << R"(//
// LOOM_KERNEL_SCALAR_FORMULA(KERNEL, ATTR, VALUE, EXPR): what an elementwise
// kernel computes at one element, a CUDA C++ expression in f32 over its
// operands' values $0, $1, ... (dialects/nn/NNKernels.td, NN_ScalarFormula).
// With ATTR non-empty, only for calls whose string attribute ATTR is VALUE.
// The fusion code generator (kernels/fused) builds its kernels from these.

#ifndef LOOM_KERNEL_SCALAR_FORMULA
#error "define LOOM_KERNEL_SCALAR_FORMULA before including KernelScalarFormulas.def"
#endif

)";
  for (const KernelSpec &k : collectKernels(records))
    for (const FormulaSpec &f : k.formulas)
      os << formatv("LOOM_KERNEL_SCALAR_FORMULA(\"{0}\", \"{1}\", \"{2}\", \"{3}\")\n", k.name,
                    f.attr, f.value, f.expr);
  return false;
}

mlir::GenRegistration genKernelDef("gen-kernel-def", "the kernel list (Kernels.def)",
                                   emitKernelDef);
mlir::GenRegistration genKernelIds("gen-kernel-ids", "the KernelId enumerators (KernelIds.def)",
                                   emitKernelIds);
mlir::GenRegistration genKernelAttrDef("gen-kernel-attr-def",
                                       "the kernels' attribute schema (KernelAttrSchema.def)",
                                       emitKernelAttrDef);
mlir::GenRegistration genKernelScalarFormulas(
    "gen-kernel-scalar-formulas",
    "the elementwise kernels' scalar formulas (KernelScalarFormulas.def)",
    emitKernelScalarFormulas);
mlir::GenRegistration genKernelAttrFns("gen-kernel-attr-fns",
                                       "the compiler's op to kernel attribute functions",
                                       emitKernelAttrFns);

} // namespace

int main(int argc, char **argv) { return mlir::MlirTblgenMain(argc, argv); }
