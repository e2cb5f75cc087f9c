#include "runtime/support/Npy.h"

#include "runtime/support/AtomicFile.h"
#include "runtime/support/UserFile.h"

#include <cstring>
#include <variant>

namespace loom {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
// NumPy pads the preamble + header to a multiple of this (for aligned mmap).
constexpr size_t kHeaderAlignment = 64;

struct KindInfo {
  NpyKind kind;
  std::string_view descr;
  size_t size;
  std::optional<DType> dtype;
};
constexpr KindInfo kKinds[] = {
    {NpyKind::F32, "<f4", 4, DType::F32},  {NpyKind::F64, "<f8", 8, DType::F64},
    {NpyKind::F16, "<f2", 2, DType::F16},  {NpyKind::I32, "<i4", 4, DType::I32},
    {NpyKind::I64, "<i8", 8, DType::I64},  {NpyKind::Bool, "|b1", 1, DType::I1},
    {NpyKind::U8, "|u1", 1, std::nullopt}, {NpyKind::U16, "<u2", 2, std::nullopt},
    {NpyKind::U32, "<u4", 4, std::nullopt}, {NpyKind::V1, "|V1", 1, std::nullopt},
    {NpyKind::V2, "|V2", 2, std::nullopt},
};

const KindInfo &infoFor(NpyKind kind) {
  for (const KindInfo &info : kKinds)
    if (info.kind == kind)
      return info;
  return kKinds[0]; // unreachable: every enumerator is in the table
}

llvm::Error npyError(std::string_view name, const llvm::Twine &problem) {
  return llvm::createStringError(
      std::make_error_code(std::errc::invalid_argument),
      "'" + llvm::Twine(name) + "': " + problem);
}

/// Accepts the spellings NumPy writes for each kind; for one-byte and void
/// kinds the byte-order character is irrelevant and may be '<', '|' or '='.
std::optional<NpyKind> kindFromDescr(std::string_view descr) {
  for (const KindInfo &info : kKinds) {
    if (descr == info.descr)
      return info.kind;
    if (descr.size() == 3 && info.descr[0] == '|' &&
        (descr[0] == '<' || descr[0] == '=') &&
        descr.substr(1) == info.descr.substr(1))
      return info.kind;
  }
  return std::nullopt;
}

/// Parses the Python dict literal of a .npy header.
class HeaderParser {
public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  struct Header {
    std::optional<std::string> descr;
    std::optional<bool> fortranOrder;
    std::optional<std::vector<int64_t>> shape;
  };

  /// Returns the problem as a string, or the parsed header.
  std::variant<std::string, Header> parse() {
    Header header;
    skipSpace();
    if (!consume('{'))
      return std::string("header is not a dict (no '{')");
    while (true) {
      skipSpace();
      if (consume('}'))
        break;
      std::string key;
      if (!parseString(key))
        return "expected a quoted key at header offset " + std::to_string(pos_);
      skipSpace();
      if (!consume(':'))
        return "expected ':' after key '" + key + "'";
      skipSpace();
      if (key == "descr") {
        std::string descr;
        if (!parseString(descr))
          return std::string("'descr' is not a simple type string (structured "
                             "dtypes are not supported)");
        header.descr = descr;
      } else if (key == "fortran_order") {
        if (matchWord("True"))
          header.fortranOrder = true;
        else if (matchWord("False"))
          header.fortranOrder = false;
        else
          return std::string("'fortran_order' is not True or False");
      } else if (key == "shape") {
        std::vector<int64_t> shape;
        if (auto problem = parseShape(shape))
          return *problem;
        header.shape = std::move(shape);
      } else {
        return "unexpected header key '" + key + "'";
      }
      skipSpace();
      if (consume(','))
        continue;
      skipSpace();
      if (consume('}'))
        break;
      return "expected ',' or '}' at header offset " + std::to_string(pos_);
    }
    skipSpace();
    if (pos_ != text_.size())
      return std::string("trailing characters after the header dict");
    return header;
  }

private:
  void skipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t' ||
            text_[pos_] == '\r'))
      ++pos_;
  }
  bool consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool matchWord(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word)
      return false;
    pos_ += word.size();
    return true;
  }
  bool parseString(std::string &out) {
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      return false;
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos)
      return false;
    out = std::string(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return true;
  }
  std::optional<std::string> parseShape(std::vector<int64_t> &shape) {
    if (!consume('('))
      return std::string("'shape' is not a tuple");
    while (true) {
      skipSpace();
      if (consume(')'))
        return std::nullopt;
      if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9')
        return "'shape' holds something other than a non-negative integer at "
               "header offset " +
               std::to_string(pos_);
      int64_t dim = 0;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        const int digit = text_[pos_++] - '0';
        if (__builtin_mul_overflow(dim, 10, &dim) ||
            __builtin_add_overflow(dim, digit, &dim))
          return std::string("a 'shape' dimension overflows 64 bits");
      }
      consume('L'); // Python 2 wrote long integers with a suffix
      shape.push_back(dim);
      skipSpace();
      if (consume(','))
        continue;
      skipSpace();
      if (consume(')'))
        return std::nullopt;
      return std::string("malformed 'shape' tuple");
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
};

uint32_t readLittleEndian(const uint8_t *bytes, int count) {
  uint32_t value = 0;
  for (int i = count - 1; i >= 0; --i)
    value = (value << 8) | bytes[i];
  return value;
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    text += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size())
      text += shape.size() == 1 ? "," : ", ";
  }
  return text + ")";
}

/// Byte size of an array, or nullopt when a dim is negative or it overflows.
std::optional<uint64_t> byteSize(const std::vector<int64_t> &shape,
                                 size_t elementSize) {
  uint64_t total = elementSize;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(total, static_cast<uint64_t>(dim), &total))
      return std::nullopt;
  }
  if (total > static_cast<uint64_t>(INT64_MAX))
    return std::nullopt;
  return total;
}

} // namespace

int64_t NpyArray::numElements() const {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

size_t npyKindSize(NpyKind kind) { return infoFor(kind).size; }
std::string_view npyDescr(NpyKind kind) { return infoFor(kind).descr; }
std::optional<DType> npyKindToDType(NpyKind kind) { return infoFor(kind).dtype; }

std::optional<NpyKind> dtypeToNpyKind(DType type) {
  for (const KindInfo &info : kKinds)
    if (info.dtype == type)
      return info.kind;
  return std::nullopt;
}

NpyKind npyRawKindFor(DType type) {
  switch (type) {
  case DType::BF16:
    return NpyKind::U16;
  case DType::F8E4M3FN:
  case DType::F8E5M2:
    return NpyKind::U8;
  default:
    return *dtypeToNpyKind(type);
  }
}

llvm::Expected<NpyArray> parseNpy(const uint8_t *bytes, size_t size,
                                  std::string_view name) {
  if (size < kMagicSize + 2 || std::memcmp(bytes, kMagic, kMagicSize) != 0)
    return npyError(name, "not a .npy file (bad magic)");
  const int major = bytes[6], minor = bytes[7];
  if (major != 1 && major != 2)
    return npyError(name, "unsupported .npy format version " +
                              llvm::Twine(major) + "." + llvm::Twine(minor));
  const size_t lengthBytes = major == 1 ? 2 : 4;
  const size_t preamble = kMagicSize + 2 + lengthBytes;
  if (size < preamble)
    return npyError(name, "truncated before the header length");
  const uint64_t headerLength = readLittleEndian(bytes + 8, lengthBytes);
  if (size - preamble < headerLength)
    return npyError(name, "truncated header: it claims " +
                              llvm::Twine(headerLength) + " bytes, the file has " +
                              llvm::Twine(size - preamble));
  std::string_view headerText(reinterpret_cast<const char *>(bytes + preamble),
                              headerLength);
  auto parsed = HeaderParser(headerText).parse();
  if (auto *problem = std::get_if<std::string>(&parsed))
    return npyError(name, "unparsable header: " + *problem);
  auto &header = std::get<HeaderParser::Header>(parsed);
  if (!header.descr || !header.fortranOrder || !header.shape)
    return npyError(name, "header lacks one of 'descr', 'fortran_order', 'shape'");
  if (*header.fortranOrder)
    return npyError(name, "Fortran-order arrays are not supported");
  std::optional<NpyKind> kind = kindFromDescr(*header.descr);
  if (!kind)
    return npyError(name, "unsupported dtype '" + *header.descr +
                              "' (supported: <f4 <f8 <f2 <i4 <i8 |b1 |u1 <u2 "
                              "<u4 |V1 |V2)");

  NpyArray array;
  array.kind = *kind;
  array.shape = std::move(*header.shape);
  std::optional<uint64_t> dataSize = byteSize(array.shape, npyKindSize(*kind));
  if (!dataSize)
    return npyError(name, "shape " + shapeString(array.shape) +
                              " is too large (its byte size overflows)");
  const size_t dataOffset = preamble + headerLength;
  const uint64_t available = size - dataOffset;
  if (available < *dataSize)
    return npyError(name, "data is truncated: shape " + shapeString(array.shape) +
                              " needs " + llvm::Twine(*dataSize) +
                              " bytes, the file has " + llvm::Twine(available));
  if (available > *dataSize)
    return npyError(name, llvm::Twine(available - *dataSize) +
                              " unexpected bytes after the data");
  array.data.assign(bytes + dataOffset, bytes + size);
  return array;
}

llvm::Expected<NpyArray> readNpy(const std::string &path) {
  // Refuses devices and FIFOs; a file that shrank while being read comes back
  // short and parseNpy reports the truncation.
  llvm::Expected<std::vector<uint8_t>> bytes = readRegularFile(path);
  if (!bytes)
    return bytes.takeError();
  return parseNpy(bytes->data(), bytes->size(), path);
}

llvm::Expected<NpyArray> readNpyAs(const std::string &path, DType expected) {
  llvm::Expected<NpyArray> array = readNpy(path);
  if (!array)
    return array.takeError();
  std::optional<NpyKind> exact = dtypeToNpyKind(expected);
  bool accepted = exact && array->kind == *exact;
  if (!exact) {
    const size_t width = dtypeSize(expected);
    accepted = (width == 2 && (array->kind == NpyKind::U16 || array->kind == NpyKind::V2)) ||
               (width == 1 && (array->kind == NpyKind::U8 || array->kind == NpyKind::V1));
  }
  if (!accepted)
    return npyError(path, "holds '" + llvm::Twine(npyDescr(array->kind)) +
                              "' elements, expected " +
                              llvm::Twine(dtypeName(expected)));
  return array;
}

llvm::Expected<std::vector<uint8_t>> serializeNpy(const NpyArray &array) {
  std::optional<uint64_t> dataSize = byteSize(array.shape, npyKindSize(array.kind));
  if (!dataSize)
    return npyError("<npy>", "shape " + shapeString(array.shape) +
                                 " has a negative or overflowing size");
  if (*dataSize != array.data.size())
    return npyError("<npy>", "shape " + shapeString(array.shape) + " needs " +
                                 llvm::Twine(*dataSize) + " bytes of data, got " +
                                 llvm::Twine(array.data.size()));
  std::string header = "{'descr': '" + std::string(npyDescr(array.kind)) +
                       "', 'fortran_order': False, 'shape': " +
                       shapeString(array.shape) + ", }";
  const size_t lengthBytes = header.size() + 1 + 10 > 65535 ? 4 : 2;
  const size_t preamble = kMagicSize + 2 + lengthBytes;
  // Pad with spaces so the data starts aligned; the header ends in '\n'.
  const size_t unpadded = preamble + header.size() + 1;
  header.append((kHeaderAlignment - unpadded % kHeaderAlignment) % kHeaderAlignment,
                ' ');
  header.push_back('\n');

  std::vector<uint8_t> bytes(kMagic, kMagic + kMagicSize);
  bytes.push_back(lengthBytes == 2 ? 1 : 2);
  bytes.push_back(0);
  for (size_t i = 0; i < lengthBytes; ++i)
    bytes.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), array.data.begin(), array.data.end());
  return bytes;
}

llvm::Error writeNpy(const std::string &path, const NpyArray &array) {
  llvm::Expected<std::vector<uint8_t>> bytes = serializeNpy(array);
  if (!bytes)
    return llvm::createStringError(
        std::make_error_code(std::errc::invalid_argument),
        "cannot write '" + path + "': " + llvm::toString(bytes.takeError()));

  return writeFileAtomically(path, bytes->data(), bytes->size());
}

} // namespace loom
