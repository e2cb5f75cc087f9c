// The .pt2 importer's entry: reads the archive, checks the program's schema
// version, fixes symbolic sizes, and builds `func.func @main` whose
// arguments are the user inputs and whose results are the user outputs, with
// parameters and buffers as named nn.parameter ops carrying their weights.

#include "frontend/torch_export/TorchExportImporter.h"

#include "dialects/loom/LoomDialect.h"
#include "dialects/nn/NNOps.h"
#include "frontend/torch_export/GraphImporter.h"
#include "frontend/torch_export/Pt2Archive.h"
#include "frontend/torch_export/Pt2Payloads.h"
#include "runtime/support/UserFile.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;

namespace loom {
namespace torch_export {
namespace {

/// Schema majors whose layout this importer was checked against (torch 2.11
/// writes 8.17). A new major means a breaking change to the format.
constexpr int64_t kSupportedSchemaMajor = 8;

using llvm::Error;
using llvm::Expected;

Error checkSchemaVersion(const llvm::json::Object &program) {
  const llvm::json::Object *version = program.getObject("schema_version");
  std::optional<int64_t> major = version ? version->getInteger("major") : std::nullopt;
  std::optional<int64_t> minor = version ? version->getInteger("minor") : std::nullopt;
  if (!major || !minor)
    return importError("the program has no schema_version {major, minor}");
  if (*major != kSupportedSchemaMajor)
    return importError("unsupported torch.export schema version " + llvm::Twine(*major) + "." +
                       llvm::Twine(*minor) + " (supported: " +
                       llvm::Twine(kSupportedSchemaMajor) + ".x)");
  return Error::success();
}

/// The example's value of a serialized expression: {"hint": {"as_int": n}}
/// (schema 8.x) or {"hint": n}.
std::optional<int64_t> hintOf(const llvm::json::Object &expr) {
  if (const llvm::json::Object *hint = expr.getObject("hint"))
    return hint->getInteger("as_int");
  return expr.getInteger("hint");
}

/// Symbols get their values from --dim by name, else --batch for a user
/// input's dim 0 and --seq for its dim 1, else the size of the example the
/// program was exported with (the serialized hint), where it has one.
Expected<SymbolValues> bindSymbols(const llvm::json::Object &program,
                                   const llvm::json::Object &graph,
                                   const llvm::json::Array &inputSpecs,
                                   const ImportOptions &options) {
  SymbolValues symbols;
  for (const auto &[name, value] : options.dims)
    symbols.bind(name, value);
  const llvm::json::Object *tensorValues = graph.getObject("tensor_values");
  for (const llvm::json::Value &spec : inputSpecs) {
    const llvm::json::Object *user = spec.getAsObject() ? spec.getAsObject()->getObject("user_input") : nullptr;
    const llvm::json::Object *arg = user ? user->getObject("arg") : nullptr;
    const llvm::json::Object *tensor = arg ? arg->getObject("as_tensor") : nullptr;
    std::optional<llvm::StringRef> name = tensor ? tensor->getString("name") : std::nullopt;
    const llvm::json::Object *meta =
        name && tensorValues ? tensorValues->getObject(*name) : nullptr;
    const llvm::json::Array *sizes = meta ? meta->getArray("sizes") : nullptr;
    if (!sizes)
      continue;
    for (auto [dim, size] : llvm::enumerate(*sizes)) {
      const llvm::json::Object *sizeObject = size.getAsObject();
      const llvm::json::Object *expr = sizeObject ? sizeObject->getObject("as_expr") : nullptr;
      std::optional<llvm::StringRef> text = expr ? expr->getString("expr_str") : std::nullopt;
      std::optional<llvm::StringRef> symbol = text ? symbolNameOf(*text) : std::nullopt;
      if (symbol && options.usage && options.dims.count(symbol->str()))
        options.usage->dims.insert(symbol->str());
      if (!symbol || symbols.lookup(*symbol))
        continue;
      if (dim == 0 && options.batch)
        symbols.bind(*symbol, *options.batch);
      else if (dim == 1 && options.seq) {
        symbols.bind(*symbol, *options.seq);
        if (options.usage)
          options.usage->seq = true;
      }
      else if (std::optional<int64_t> example = hintOf(*expr))
        symbols.bind(*symbol, *example);
    }
  }
  // The values must lie in the ranges the program was exported for.
  if (const llvm::json::Object *ranges = program.getObject("range_constraints")) {
    for (const auto &[symbol, range] : *ranges) {
      if (options.usage && options.dims.count(llvm::StringRef(symbol).str()))
        options.usage->dims.insert(llvm::StringRef(symbol).str());
      std::optional<int64_t> value = symbols.lookup(symbol);
      const llvm::json::Object *bounds = range.getAsObject();
      if (!value || !bounds)
        continue;
      std::optional<int64_t> low = bounds->getInteger("min_val");
      std::optional<int64_t> high = bounds->getInteger("max_val");
      if ((low && *value < *low) || (high && *value > *high))
        return importError("symbolic size '" + llvm::StringRef(symbol) + "' = " +
                           llvm::Twine(*value) + " is outside the exported range [" +
                           (low ? std::to_string(*low) : std::string("-inf")) + ", " +
                           (high ? std::to_string(*high) : std::string("inf")) + "]");
    }
  }
  return symbols;
}

/// The tensor name of an input spec's `arg` ({"name": ...} or {"as_tensor": {"name": ...}}).
std::optional<llvm::StringRef> specTensorName(const llvm::json::Object &spec) {
  const llvm::json::Object *arg = spec.getObject("arg");
  if (!arg)
    return std::nullopt;
  if (const llvm::json::Object *tensor = arg->getObject("as_tensor"))
    return tensor->getString("name");
  return arg->getString("name");
}

/// Removes ops nothing uses (folded constant chains); parameters stay.
void eraseDeadOps(Block &block) {
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block))) {
    if (op.hasTrait<OpTrait::IsTerminator>() || isa<nn::ParameterOp>(op))
      continue;
    if (op.use_empty() && op.getDialect() &&
        op.getDialect()->getNamespace() == nn::NNDialect::getDialectNamespace())
      op.erase();
  }
}

Expected<OwningOpRef<ModuleOp>> importProgram(MLIRContext *context, llvm::StringRef path,
                                              const ImportOptions &options, Location loc) {
  auto archive = Pt2Archive::open(path);
  if (!archive)
    return archive.takeError();
  auto text = (*archive)->read((*archive)->programEntry());
  if (!text)
    return text.takeError();
  if (llvm::Error err =
          loom::checkNestingDepth(*text, loom::NestingSyntax::Json, (*archive)->programEntry().str()))
    return importError(llvm::toString(std::move(err)));
  auto parsed = llvm::json::parse(*text);
  if (!parsed)
    return importError((*archive)->programEntry() + " is not valid JSON: " +
                       llvm::toString(parsed.takeError()));
  const llvm::json::Object *program = parsed->getAsObject();
  if (!program)
    return importError((*archive)->programEntry() + " is not a JSON object");
  if (Error err = checkSchemaVersion(*program))
    return std::move(err);
  const llvm::json::Object *graphModule = program->getObject("graph_module");
  const llvm::json::Object *graph = graphModule ? graphModule->getObject("graph") : nullptr;
  const llvm::json::Object *signature = graphModule ? graphModule->getObject("signature") : nullptr;
  const llvm::json::Array *inputSpecs = signature ? signature->getArray("input_specs") : nullptr;
  const llvm::json::Array *outputSpecs = signature ? signature->getArray("output_specs") : nullptr;
  if (!graph || !inputSpecs || !outputSpecs)
    return importError("the program has no graph_module.graph or graph_module.signature");

  auto payloads = Pt2Payloads::load(**archive);
  if (!payloads)
    return payloads.takeError();
  auto symbols = bindSymbols(*program, *graph, *inputSpecs, options);
  if (!symbols)
    return symbols.takeError();

  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  OpBuilder builder(context);
  builder.setInsertionPointToEnd(module->getBody());
  auto func = builder.create<func::FuncOp>(loc, "main", builder.getFunctionType({}, {}));
  Block *body = func.addEntryBlock();
  builder.setInsertionPointToStart(body);

  GraphImporter importer(builder, loc, *symbols);
  importer.pushScope(*graph);
  llvm::SmallVector<Type> argumentTypes;
  llvm::SmallVector<std::string> argumentNames;
  // Weights saved once under several names (tied: torch.export lists both
  // the embedding and the output projection) are one parameter, named by
  // the first name in the signature (the one a checkpoint keeps).
  llvm::StringMap<Value> weightByStorage;
  for (const llvm::json::Value &specValue : *inputSpecs) {
    const llvm::json::Object *spec = specValue.getAsObject();
    if (!spec || spec->size() != 1)
      return importError("malformed input spec in the signature");
    llvm::StringRef kind = spec->begin()->first;
    const llvm::json::Object *detail = spec->begin()->second.getAsObject();
    std::optional<llvm::StringRef> name = detail ? specTensorName(*detail) : std::nullopt;
    if (!name)
      return importError("input spec '" + kind + "' is not a tensor; only tensor inputs are supported");
    auto type = importer.typeOf(*name);
    if (!type)
      return type.takeError();
    if (kind == "user_input") {
      argumentTypes.push_back(*type);
      argumentNames.push_back(name->str());
      importer.scope().tensors[*name] = body->addArgument(*type, loc);
      continue;
    }
    std::optional<llvm::StringRef> fqn;
    bool parameter = kind == "parameter", persistent = false;
    if (parameter) {
      fqn = detail->getString("parameter_name");
    } else if (kind == "buffer") {
      fqn = detail->getString("buffer_name");
      persistent = detail->getBoolean("persistent").value_or(true);
    } else if (kind == "tensor_constant") {
      fqn = detail->getString("tensor_constant_name");
    } else {
      return importError("input '" + *name + "' is a " + kind + ", which is not supported");
    }
    if (!fqn)
      return importError("input spec '" + kind + "' for '" + *name + "' has no name");
    std::optional<std::string> storage =
        parameter || persistent ? payloads->storageKey(*fqn) : std::nullopt;
    if (storage) {
      auto tied = weightByStorage.find(*storage);
      if (tied != weightByStorage.end() && tied->second.getType() == *type) {
        importer.scope().tensors[*name] = tied->second;
        continue;
      }
    }
    // The module that holds the weight: a state-dict name is the module's
    // path and the attribute's name, which has no dot.
    auto withModulePath = [&](nn::ParameterOp param) {
      auto [modulePath, attribute] = fqn->rsplit('.');
      if (!attribute.empty())
        param.setModulePath(modulePath);
      return param;
    };
    if ((parameter || persistent) && !options.embedWeights) {
      // Values come at run time (loom-run --weights); until then, a seeded init.
      Value weight = withModulePath(builder.create<nn::ParameterOp>(
          loc, *type, builder.getStringAttr(*fqn), parameter ? UnitAttr() : builder.getUnitAttr(),
          nn::InitKindAttr::get(context, parameter ? nn::InitKind::normal : nn::InitKind::zeros),
          builder.getF64FloatAttr(parameter ? 0.02 : 0.0), ElementsAttr()));
      importer.scope().tensors[*name] = weight;
      if (storage)
        weightByStorage[*storage] = weight;
      continue;
    }
    auto value = payloads->tensor(*fqn, *type);
    if (!value)
      return value.takeError();
    Value bound;
    if (parameter || persistent)
      bound = withModulePath(builder.create<nn::ParameterOp>(
          loc, *type, builder.getStringAttr(*fqn),
          parameter ? UnitAttr() : builder.getUnitAttr(),
          nn::InitKindAttr::get(context, nn::InitKind::zeros), builder.getF64FloatAttr(0.0),
          *value));
    else
      bound = importer.constant(*value);
    importer.scope().tensors[*name] = bound;
    if (storage)
      weightByStorage[*storage] = bound;
  }

  // Nodes (their errors already name the node and operator).
  if (auto results = importer.importGraph(*graph); !results)
    return results.takeError();

  // User outputs first (a training forward returns logits first), then the
  // new values of mutated buffers and inputs, named after what they update.
  llvm::SmallVector<Value> results, updates;
  llvm::SmallVector<std::string> resultNames, updateNames;
  for (const llvm::json::Value &specValue : *outputSpecs) {
    const llvm::json::Object *spec = specValue.getAsObject();
    if (!spec || spec->size() != 1)
      return importError("malformed output spec in the signature");
    llvm::StringRef kind = spec->begin()->first;
    const llvm::json::Object *detail = spec->begin()->second.getAsObject();
    std::optional<llvm::StringRef> name = detail ? specTensorName(*detail) : std::nullopt;
    bool user = kind == "user_output" || kind == "loss_output";
    std::optional<llvm::StringRef> mutated;
    if (kind == "buffer_mutation")
      mutated = detail ? detail->getString("buffer_name") : std::nullopt;
    else if (kind == "user_input_mutation")
      mutated = detail ? detail->getString("user_input_name") : std::nullopt;
    else if (!user)
      return importError("the program has a '" + kind +
                         "' output; Loom imports user outputs and the mutations of buffers "
                         "and inputs");
    if (!user && !mutated)
      return importError("the '" + kind + "' output spec names no buffer or input");
    if (!name)
      return importError("output " + llvm::Twine(results.size() + updates.size()) +
                         " is not a tensor; only tensor outputs are supported");
    if (!importer.scope().tensors.count(*name))
      return importError("output '" + *name + "' is not defined by any node");
    auto value = importer.valueOf(*name);
    if (!value)
      return value.takeError();
    if (user) {
      results.push_back(*value);
      resultNames.push_back("output" + std::to_string(resultNames.size()));
    } else {
      updates.push_back(*value);
      updateNames.push_back(mutated->str() + ".updated");
    }
  }
  size_t numUserOutputs = results.size();
  results.append(updates.begin(), updates.end());
  resultNames.append(updateNames.begin(), updateNames.end());
  builder.setInsertionPointToEnd(body);
  builder.create<func::ReturnOp>(loc, results);
  func.setFunctionType(builder.getFunctionType(argumentTypes, ValueRange(results).getTypes()));
  for (auto [i, name] : llvm::enumerate(argumentNames))
    loom::setArgName(func, i, name);
  for (auto [i, name] : llvm::enumerate(resultNames)) {
    loom::setResultName(func, i, name);
    if (i >= numUserOutputs)
      loom::setResultUpdates(func, i, llvm::StringRef(name).drop_back(strlen(".updated")));
  }
  eraseDeadOps(*body);
  if (Error err = importer.verify(*module))
    return std::move(err);
  return module;
}

} // namespace
} // namespace torch_export

OwningOpRef<ModuleOp> importTorchExportModel(MLIRContext *context, llvm::StringRef path,
                                             const ImportOptions &options) {
  context->loadDialect<nn::NNDialect, loom::LoomDialect, func::FuncDialect>();
  Location loc = FileLineColLoc::get(context, path, 0, 0);
  llvm::Expected<OwningOpRef<ModuleOp>> module = [&] {
    // Only the one diagnostic below reaches the user.
    ScopedDiagnosticHandler quiet(context, [](Diagnostic &) { return success(); });
    return torch_export::importProgram(context, path, options, loc);
  }();
  if (!module) {
    emitError(loc) << llvm::toString(module.takeError());
    return nullptr;
  }
  return std::move(*module);
}

} // namespace loom
