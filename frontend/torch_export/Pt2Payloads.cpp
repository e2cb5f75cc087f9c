#include "frontend/torch_export/Pt2Payloads.h"
#include "runtime/support/UserFile.h"

#include "llvm/Support/FormatVariadic.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;

namespace loom::torch_export {

llvm::Expected<Pt2Payloads> Pt2Payloads::load(const Pt2Archive &archive) {
  std::string byteOrderEntry = (archive.root() + "byteorder").str();
  if (archive.contains(byteOrderEntry)) {
    auto order = archive.read(byteOrderEntry);
    if (!order)
      return order.takeError();
    if (llvm::StringRef(*order).trim() != "little")
      return importError("the archive stores tensors in byte order '" +
                         llvm::StringRef(*order).trim() + "'; only 'little' is supported");
  }
  Pt2Payloads payloads(archive);
  for (llvm::StringRef folder : {"weights", "constants"})
    if (llvm::Error err = payloads.addConfig(folder))
      return std::move(err);
  return payloads;
}

llvm::Error Pt2Payloads::addConfig(llvm::StringRef folder) {
  std::string dir = (archive_->root() + "data/" + folder + "/").str();
  std::string configEntry = dir + "model_" + folder.str() + "_config.json";
  if (!archive_->contains(configEntry))
    return llvm::Error::success();
  auto text = archive_->read(configEntry);
  if (!text)
    return text.takeError();
  if (llvm::Error err = loom::checkNestingDepth(*text, loom::NestingSyntax::Json, configEntry))
    return importError(llvm::toString(std::move(err)));
  auto parsed = llvm::json::parse(*text);
  if (!parsed)
    return importError(configEntry + " is not valid JSON: " +
                       llvm::toString(parsed.takeError()));
  const llvm::json::Object *root = parsed->getAsObject();
  const llvm::json::Object *config = root ? root->getObject("config") : nullptr;
  if (!config)
    return importError(configEntry + " has no 'config' object");
  for (const auto &[fqn, value] : *config) {
    const llvm::json::Object *payload = value.getAsObject();
    std::optional<llvm::StringRef> path = payload ? payload->getString("path_name") : std::nullopt;
    if (!path)
      return importError(configEntry + ": entry '" + fqn.str() + "' has no 'path_name'");
    Entry entry;
    entry.file = dir + path->str();
    entry.pickled = payload->getBoolean("use_pickle").value_or(false);
    if (const llvm::json::Value *meta = payload->get("tensor_meta"))
      entry.meta = *meta;
    entries_[fqn.str()] = std::move(entry);
  }
  return llvm::Error::success();
}

std::optional<std::string> Pt2Payloads::storageKey(llvm::StringRef fqn) const {
  auto it = entries_.find(fqn);
  if (it == entries_.end() || it->second.pickled)
    return std::nullopt;
  std::string key = it->second.file;
  if (const llvm::json::Object *meta = it->second.meta.getAsObject())
    for (llvm::StringRef field : {"dtype", "sizes", "strides", "storage_offset"})
      if (const llvm::json::Value *value = meta->get(field))
        key += "|" + llvm::formatv("{0}", *value).str();
  return key;
}

llvm::Expected<DenseElementsAttr> Pt2Payloads::tensor(llvm::StringRef fqn,
                                                      RankedTensorType expected) const {
  auto it = entries_.find(fqn);
  if (it == entries_.end())
    return importError("tensor '" + fqn + "' is not stored in the archive");
  const Entry &entry = it->second;
  if (entry.pickled)
    return importError("tensor '" + fqn +
                       "' is stored pickled (a tensor subclass?); only plain tensors are supported");
  const llvm::json::Object *meta = entry.meta.getAsObject();
  if (!meta)
    return importError("tensor '" + fqn + "' has no tensor_meta");

  // The stored tensor is a strided view of its file; Loom reads contiguous ones.
  SymbolValues noSymbols;
  auto stored = tensorTypeOf(expected.getContext(), entry.meta, noSymbols);
  if (!stored)
    return importError("tensor '" + fqn + "': " + llvm::toString(stored.takeError()));
  if (*stored != expected)
    return importError("tensor '" + fqn + "' is stored as " + typeString(*stored) +
                       " but the program uses it as " + typeString(expected));
  const llvm::json::Array *strides = meta->getArray("strides");
  if (!strides || strides->size() != size_t(expected.getRank()))
    return importError("tensor '" + fqn + "': malformed strides");
  // A tensor of no elements (a shared expert of size 0) has no layout to
  // check: torch gives it whatever strides its view had.
  bool empty = expected.getNumElements() == 0;
  int64_t contiguousStride = 1;
  for (int64_t d = expected.getRank() - 1; d >= 0 && !empty; --d) {
    auto stride = symIntValue((*strides)[d], noSymbols);
    if (!stride)
      return importError("tensor '" + fqn + "': " + llvm::toString(stride.takeError()));
    int64_t size = expected.getDimSize(d);
    if (size != 1 && *stride != contiguousStride)
      return importError("tensor '" + fqn +
                         "' is not contiguous (strides do not match its sizes); only contiguous tensors are supported");
    contiguousStride *= size;
  }
  int64_t offset = 0;
  if (const llvm::json::Value *storageOffset = meta->get("storage_offset")) {
    auto value = symIntValue(*storageOffset, noSymbols);
    if (!value)
      return importError("tensor '" + fqn + "': " + llvm::toString(value.takeError()));
    offset = *value;
  }
  if (offset < 0 || offset > kMaxTensorElements)
    return importError("tensor '" + fqn + "' has an invalid storage offset " + llvm::Twine(offset));

  auto bytes = archive_->read(entry.file);
  if (!bytes)
    return bytes.takeError();
  int64_t elementBytes = storageBytesOf(expected.getElementType());
  int64_t count = expected.getNumElements();
  uint64_t needed = uint64_t(offset + count) * uint64_t(elementBytes);
  if (bytes->size() < needed)
    return importError("tensor '" + fqn + "': its file " + entry.file + " has " +
                       llvm::Twine(bytes->size()) + " bytes, but shape and storage offset need " +
                       llvm::Twine(needed));
  const char *data = bytes->data() + offset * elementBytes;
  if (expected.getElementType().isInteger(1)) {
    llvm::SmallVector<bool> values;
    values.reserve(count);
    for (int64_t i = 0; i < count; ++i)
      values.push_back(data[i] != 0);
    return DenseElementsAttr::get(expected, llvm::ArrayRef<bool>(values));
  }
  return DenseElementsAttr::getFromRawBuffer(
      expected, llvm::ArrayRef<char>(data, size_t(count * elementBytes)));
}

} // namespace loom::torch_export
