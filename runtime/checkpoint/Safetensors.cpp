#include "runtime/checkpoint/Safetensors.h"

#include "runtime/checkpoint/FileIO.h"
#include "runtime/support/UserFile.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <set>

namespace loom {

using checkpoint_io::contentError;

namespace {

struct DTypeSpelling {
  DType type;
  llvm::StringRef name;
};
constexpr DTypeSpelling kDTypeSpellings[] = {
    {DType::F32, "F32"},          {DType::F16, "F16"},        {DType::BF16, "BF16"},
    {DType::F8E4M3FN, "F8_E4M3"}, {DType::F8E5M2, "F8_E5M2"}, {DType::I64, "I64"},
    {DType::I32, "I32"},          {DType::I1, "BOOL"},        {DType::F64, "F64"},
};

constexpr size_t kLengthPrefixBytes = 8;
constexpr size_t kHeaderAlignment = 8;
constexpr llvm::StringLiteral kMetadataKey = "__metadata__";

std::string shapeString(llvm::ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

/// One tensor's header entry, before its bytes are looked at.
struct HeaderEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

/// Reads a non-negative integer (int64 or uint64 in the JSON).
std::optional<uint64_t> nonNegativeInteger(const llvm::json::Value &value) {
  if (std::optional<int64_t> signedValue = value.getAsInteger())
    return *signedValue < 0
               ? std::nullopt
               : std::optional<uint64_t>(static_cast<uint64_t>(*signedValue));
  return value.getAsUINT64();
}

llvm::Expected<HeaderEntry> parseEntry(const std::string &where, llvm::StringRef name,
                                       const llvm::json::Value &value) {
  auto bad = [&](const llvm::Twine &problem) {
    return contentError(where, "tensor '" + name + "': " + problem);
  };
  const llvm::json::Object *object = value.getAsObject();
  if (!object)
    return bad("header entry is not an object");
  for (const auto &member : *object) {
    const llvm::StringRef key = member.first;
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      return bad("unexpected key '" + key + "' in its header entry");
  }
  HeaderEntry entry;
  entry.name = name.str();
  std::optional<llvm::StringRef> dtypeName = object->getString("dtype");
  if (!dtypeName)
    return bad("no \"dtype\" string");
  std::optional<DType> dtype = parseSafetensorsDType(*dtypeName);
  if (!dtype)
    return bad("dtype '" + *dtypeName + "' is not one Loom supports");
  entry.dtype = *dtype;
  const llvm::json::Array *shape = object->getArray("shape");
  if (!shape)
    return bad("no \"shape\" array");
  for (const llvm::json::Value &dim : *shape) {
    std::optional<uint64_t> size = nonNegativeInteger(dim);
    if (!size || *size > uint64_t(INT64_MAX))
      return bad("shape has an entry that is not a non-negative integer");
    entry.shape.push_back(static_cast<int64_t>(*size));
  }
  const llvm::json::Array *offsets = object->getArray("data_offsets");
  if (!offsets)
    return bad("no \"data_offsets\" array");
  std::optional<uint64_t> begin, end;
  if (offsets->size() == 2) {
    begin = nonNegativeInteger((*offsets)[0]);
    end = nonNegativeInteger((*offsets)[1]);
  }
  if (!begin || !end)
    return bad("data_offsets is not two non-negative integers");
  if (*begin > *end)
    return bad("data_offsets [" + llvm::Twine(*begin) + ", " + llvm::Twine(*end) +
               "] end before they begin");
  entry.begin = *begin;
  entry.end = *end;
  std::optional<uint64_t> byteSize = tensorByteSize(entry.dtype, entry.shape);
  if (!byteSize)
    return bad("shape " + shapeString(entry.shape) + " has an overflowing size");
  if (*byteSize != *end - *begin)
    return bad("shape " + shapeString(entry.shape) + " of " + *dtypeName + " needs " +
               llvm::Twine(*byteSize) + " bytes, data_offsets [" + llvm::Twine(*begin) +
               ", " + llvm::Twine(*end) + "] hold " + llvm::Twine(*end - *begin));
  return entry;
}

/// The first key that the header's top-level object holds twice, if any.
/// llvm::json keeps the last of duplicate keys silently; the specification
/// forbids them (a file must not mean different things to different readers).
/// `text` is known to be valid JSON.
std::optional<std::string> duplicateTopLevelKey(llvm::StringRef text) {
  std::set<std::string> keys;
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == '"') {
      const size_t start = i;
      for (++i; text[i] != '"'; ++i)
        if (text[i] == '\\')
          ++i;
      if (depth != 1)
        continue;
      size_t next = i + 1;
      while (next < text.size() && llvm::StringRef(" \t\r\n").contains(text[next]))
        ++next;
      if (next == text.size() || text[next] != ':')
        continue; // a value, not a key
      // Unescape through the JSON parser so equal keys compare equal.
      llvm::Expected<llvm::json::Value> key =
          llvm::json::parse(text.substr(start, i + 1 - start));
      if (!key) {
        llvm::consumeError(key.takeError());
        continue;
      }
      const std::string name = key->getAsString()->str();
      if (!keys.insert(name).second)
        return name;
    }
  }
  return std::nullopt;
}

} // namespace

llvm::StringRef safetensorsDTypeName(DType type) {
  for (const DTypeSpelling &spelling : kDTypeSpellings)
    if (spelling.type == type)
      return spelling.name;
  return "?";
}

std::optional<DType> parseSafetensorsDType(llvm::StringRef name) {
  for (const DTypeSpelling &spelling : kDTypeSpellings)
    if (spelling.name == name)
      return spelling.type;
  return std::nullopt;
}

std::optional<uint64_t> tensorByteSize(DType type, llvm::ArrayRef<int64_t> shape) {
  uint64_t total = dtypeSize(type);
  for (int64_t dim : shape)
    if (dim < 0 || __builtin_mul_overflow(total, static_cast<uint64_t>(dim), &total))
      return std::nullopt;
  return total;
}

std::vector<HostTensorView> viewsOf(llvm::ArrayRef<HostTensor> tensors) {
  std::vector<HostTensorView> views;
  views.reserve(tensors.size());
  for (const HostTensor &tensor : tensors)
    views.push_back({tensor.name, tensor.dtype, tensor.shape, tensor.data});
  return views;
}

llvm::Expected<SafetensorsLayout>
layoutSafetensors(llvm::ArrayRef<HostTensorView> tensors,
                  const std::map<std::string, std::string> &metadata,
                  const std::string &where) {
  std::set<llvm::StringRef> names;
  for (const HostTensorView &tensor : tensors) {
    if (tensor.name.empty() || tensor.name == kMetadataKey ||
        !llvm::json::isUTF8(tensor.name))
      return contentError(where, "cannot store a tensor named '" + tensor.name +
                                     "' (empty, reserved or not UTF-8)");
    if (!names.insert(tensor.name).second)
      return contentError(where, "two tensors are named '" + tensor.name + "'");
    std::optional<uint64_t> byteSize = tensorByteSize(tensor.dtype, tensor.shape);
    if (!byteSize)
      return contentError(where, "tensor '" + tensor.name + "': shape " +
                                     shapeString(tensor.shape) +
                                     " has a negative or overflowing size");
    if (*byteSize != tensor.data.size())
      return contentError(where, "tensor '" + tensor.name + "': shape " +
                                     shapeString(tensor.shape) + " of " +
                                     safetensorsDTypeName(tensor.dtype) + " needs " +
                                     llvm::Twine(*byteSize) + " bytes, got " +
                                     llvm::Twine(tensor.data.size()));
  }
  for (const auto &[key, value] : metadata)
    if (!llvm::json::isUTF8(key) || !llvm::json::isUTF8(value))
      return contentError(where, "metadata '" + key + "' is not UTF-8");

  SafetensorsLayout layout;
  layout.dataOrder.resize(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i)
    layout.dataOrder[i] = i;
  // Larger elements first: every tensor then starts at a multiple of its
  // element size (the buffer itself starts 8-aligned).
  std::sort(layout.dataOrder.begin(), layout.dataOrder.end(), [&](size_t a, size_t b) {
    const size_t sizeA = dtypeSize(tensors[a].dtype), sizeB = dtypeSize(tensors[b].dtype);
    if (sizeA != sizeB)
      return sizeA > sizeB;
    return tensors[a].name < tensors[b].name;
  });

  std::string json;
  llvm::raw_string_ostream stream(json);
  llvm::json::OStream writer(stream);
  writer.object([&] {
    if (!metadata.empty())
      writer.attributeObject(kMetadataKey, [&] {
        for (const auto &[key, value] : metadata)
          writer.attribute(key, value);
      });
    uint64_t offset = 0;
    for (size_t index : layout.dataOrder) {
      const HostTensorView &tensor = tensors[index];
      writer.attributeObject(tensor.name, [&] {
        writer.attribute("dtype", safetensorsDTypeName(tensor.dtype));
        writer.attributeArray("shape", [&] {
          for (int64_t dim : tensor.shape)
            writer.value(dim);
        });
        writer.attributeArray("data_offsets", [&] {
          writer.value(offset);
          writer.value(offset + tensor.data.size());
        });
      });
      offset += tensor.data.size();
    }
    layout.dataBytes = offset;
  });
  stream.flush();
  json.append((kHeaderAlignment - json.size() % kHeaderAlignment) % kHeaderAlignment,
              ' ');
  const uint64_t headerSize = json.size();
  for (size_t i = 0; i < kLengthPrefixBytes; ++i)
    layout.header.push_back(static_cast<uint8_t>(headerSize >> (8 * i)));
  layout.header.insert(layout.header.end(), json.begin(), json.end());
  return layout;
}

llvm::Expected<SafetensorsFile> parseSafetensors(llvm::ArrayRef<uint8_t> bytes,
                                                 const std::string &where) {
  if (bytes.size() < kLengthPrefixBytes)
    return contentError(where, "truncated: " + llvm::Twine(bytes.size()) +
                                   " bytes, fewer than the 8-byte header size");
  uint64_t headerSize = 0;
  for (size_t i = 0; i < kLengthPrefixBytes; ++i)
    headerSize |= uint64_t(bytes[i]) << (8 * i);
  if (headerSize > kMaxSafetensorsHeaderBytes)
    return contentError(where,
                        "header size " + llvm::Twine(headerSize) +
                            " exceeds the 100 MiB limit (not a safetensors file?)");
  const uint64_t afterPrefix = bytes.size() - kLengthPrefixBytes;
  if (headerSize > afterPrefix)
    return contentError(where, "truncated: the header size is " +
                                   llvm::Twine(headerSize) + " bytes but only " +
                                   llvm::Twine(afterPrefix) + " follow");
  const llvm::StringRef headerText(
      reinterpret_cast<const char *>(bytes.data() + kLengthPrefixBytes), headerSize);
  if (!headerText.starts_with("{"))
    return contentError(where, "the header does not begin with '{'");
  if (llvm::Error err = checkNestingDepth(headerText, NestingSyntax::Json, where))
    return std::move(err);
  llvm::Expected<llvm::json::Value> header = llvm::json::parse(headerText);
  if (!header)
    return contentError(where, "the header is not valid JSON: " +
                                   llvm::toString(header.takeError()));
  const llvm::json::Object *root = header->getAsObject();
  if (!root)
    return contentError(where, "the header is not a JSON object");
  if (std::optional<std::string> duplicate = duplicateTopLevelKey(headerText))
    return contentError(where, "the header names '" + *duplicate + "' twice");

  SafetensorsFile file;
  std::vector<HeaderEntry> entries;
  for (const auto &member : *root) {
    const llvm::StringRef key = member.first;
    if (key == kMetadataKey) {
      const llvm::json::Object *metadata = member.second.getAsObject();
      if (!metadata)
        return contentError(where, "__metadata__ is not an object");
      for (const auto &item : *metadata) {
        std::optional<llvm::StringRef> text = item.second.getAsString();
        if (!text)
          return contentError(where, "__metadata__ value '" + item.first.str() +
                                         "' is not a string");
        file.metadata[item.first.str()] = text->str();
      }
      continue;
    }
    llvm::Expected<HeaderEntry> entry = parseEntry(where, key, member.second);
    if (!entry)
      return entry.takeError();
    entries.push_back(std::move(*entry));
  }

  // The tensors must tile the byte buffer: sorted by offset, each begins
  // where the previous ended, and the last ends at the end of the file.
  std::sort(entries.begin(), entries.end(),
            [](const HeaderEntry &a, const HeaderEntry &b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  const uint64_t bufferSize = afterPrefix - headerSize;
  uint64_t covered = 0;
  const HeaderEntry *previous = nullptr;
  for (const HeaderEntry &entry : entries) {
    if (entry.end > bufferSize)
      return contentError(where, "truncated: tensor '" + entry.name + "' ends at byte " +
                                     llvm::Twine(entry.end) + " of the data, which has " +
                                     llvm::Twine(bufferSize));
    if (entry.begin < covered)
      return contentError(where, "tensors '" + previous->name + "' and '" + entry.name +
                                     "' overlap");
    if (entry.begin > covered)
      return contentError(where, "bytes " + llvm::Twine(covered) + " to " +
                                     llvm::Twine(entry.begin) +
                                     " of the data belong to no tensor");
    covered = entry.end;
    previous = &entry;
  }
  if (covered != bufferSize)
    return contentError(where, llvm::Twine(bufferSize - covered) +
                                   " bytes after the last tensor belong to no tensor");

  const uint8_t *buffer = bytes.data() + kLengthPrefixBytes + headerSize;
  for (HeaderEntry &entry : entries)
    file.tensors.push_back(
        {std::move(entry.name), entry.dtype, std::move(entry.shape),
         std::vector<uint8_t>(buffer + entry.begin, buffer + entry.end)});
  return file;
}

llvm::Expected<SafetensorsFile> readSafetensors(const std::string &path) {
  llvm::Expected<std::vector<uint8_t>> bytes = checkpoint_io::readWholeFile(path);
  if (!bytes)
    return bytes.takeError();
  return parseSafetensors(*bytes, path);
}

llvm::Error writeSafetensors(const std::string &path,
                             llvm::ArrayRef<HostTensorView> tensors,
                             const std::map<std::string, std::string> &metadata) {
  llvm::Expected<SafetensorsLayout> layout = layoutSafetensors(tensors, metadata, path);
  if (!layout)
    return layout.takeError();
  return checkpoint_io::replaceFileAtomically(
      path,
      [&](AtomicFileWriter &file) -> llvm::Error {
        if (llvm::Error err = file.write(layout->header.data(), layout->header.size()))
          return err;
        for (size_t index : layout->dataOrder)
          if (llvm::Error err =
                  file.write(tensors[index].data.data(), tensors[index].data.size()))
            return err;
        return llvm::Error::success();
      },
      /*space=*/nullptr);
}

} // namespace loom
