// The .npy header: the magic, the version, the dict literal and the size checks (npy_format.h).
#include "data/npy_format.h"

#include <cstring>
#include <limits>
#include <optional>

#include "base/integer.h"

namespace cumulus::data {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;
constexpr char kSupported[] =
    "supported: uint8, uint16, int16, int32, int64, float16, float32, float64, little-endian";
constexpr char kResave[] = "; save the array again with numpy.save";

// One value of the header dict. Python's literals as numpy writes them; nothing else is needed.
struct Value {
  enum class Kind { kString, kBool, kTuple } kind = Kind::kString;
  std::string text;            // kString
  bool flag = false;           // kBool
  std::vector<int64_t> items;  // kTuple
};

// A recursive-descent reader of "{'key': value, ...}" where a value is a quoted string, True,
// False or a tuple of non-negative integers. Every error names the byte offset in the header.
class DictReader {
 public:
  DictReader(const std::string& path, const char* text, size_t size)
      : path_(path), text_(text), size_(size) {}

  // Calls onEntry(key, value) for each entry, in order; the dict must be all that is there but
  // spaces and newlines.
  template <typename OnEntry>
  void read(OnEntry&& onEntry) {
    skipSpace();
    expect('{');
    skipSpace();
    while (!at('}')) {
      const std::string key = readString();
      skipSpace();
      expect(':');
      skipSpace();
      onEntry(key, readValue());
      skipSpace();
      if (at('}')) break;
      expect(',');
      skipSpace();
    }
    ++pos_;
    skipSpace();
    if (pos_ != size_) malformed("text after the closing '}'");
  }

  [[noreturn]] void malformed(const std::string& what) const {
    failOn(path_,
           "malformed header dictionary at byte " + std::to_string(pos_) + ": " + what + kResave);
  }

 private:
  bool at(char c) const { return pos_ < size_ && text_[pos_] == c; }
  void skipSpace() {
    while (pos_ < size_ && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\r' ||
                            text_[pos_] == '\n')) {
      ++pos_;
    }
  }
  void expect(char c) {
    if (!at(c)) malformed(std::string("expected '") + c + "'" + found());
    ++pos_;
  }
  std::string found() const {
    if (pos_ >= size_) return ", found the end of the header";
    const char c = text_[pos_];
    if (c >= 0x20 && c < 0x7f) return std::string(", found '") + c + "'";
    return ", found byte " + std::to_string(static_cast<uint8_t>(c));
  }

  std::string readString() {
    if (!at('\'') && !at('"')) malformed("expected a quoted string" + found());
    const char quote = text_[pos_++];
    const size_t begin = pos_;
    while (pos_ < size_ && text_[pos_] != quote) {
      if (text_[pos_] == '\n') break;
      if (text_[pos_] == '\\') malformed("escapes in strings are not supported");
      ++pos_;
    }
    if (pos_ >= size_ || text_[pos_] != quote) malformed("unterminated string");
    return std::string(text_ + begin, text_ + pos_++);
  }

  bool readWord(const char* word) {
    const size_t n = std::strlen(word);
    if (size_ - pos_ < n || std::memcmp(text_ + pos_, word, n) != 0) return false;
    pos_ += n;
    return true;
  }

  Value readValue() {
    Value v;
    if (at('\'') || at('"')) {
      v.text = readString();
    } else if (readWord("True")) {
      v.kind = Value::Kind::kBool;
      v.flag = true;
    } else if (readWord("False")) {
      v.kind = Value::Kind::kBool;
    } else if (at('(')) {
      v.kind = Value::Kind::kTuple;
      v.items = readTuple();
    } else if (at('[')) {
      failOn(path_,
             "structured dtypes (a list as 'descr') are not supported; " + std::string(kSupported));
    } else {
      malformed("expected a string, True, False or a tuple" + found());
    }
    return v;
  }

  // "()", "(3,)", "(2, 5)", "(2, 5,)"; "(3)" is the integer 3 in Python, not a tuple.
  std::vector<int64_t> readTuple() {
    expect('(');
    skipSpace();
    std::vector<int64_t> items;
    bool comma = true;
    while (!at(')')) {
      if (!comma) malformed("expected ',' or ')'" + found());
      items.push_back(readInteger());
      skipSpace();
      comma = at(',');
      if (comma) ++pos_;
      skipSpace();
    }
    if (items.size() == 1 && !comma) malformed("a one-element shape is written (n,), not (n)");
    ++pos_;
    return items;
  }

  int64_t readInteger() {
    if (pos_ >= size_ || text_[pos_] < '0' || text_[pos_] > '9') {
      malformed("expected a non-negative integer" + found());
    }
    uint64_t n = 0;
    while (pos_ < size_ && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const auto digit = static_cast<uint64_t>(text_[pos_++] - '0');
      if (n > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - digit) / 10) {
        failOn(path_, "a dimension in 'shape' does not fit in 63 bits" + std::string(kResave));
      }
      n = n * 10 + digit;
    }
    if (at('L')) ++pos_;  // Python 2's numpy wrote longs as 3L.
    return static_cast<int64_t>(n);
  }

  const std::string& path_;
  const char* text_;
  size_t size_;
  size_t pos_ = 0;
};

// '<f4' and friends. The byte-order mark is '<' (little), '|' (not applicable), '=' (native,
// little on every host we build for) or '>' (big: refused unless the items are single bytes).
NpyDType parseDescr(const std::string& path, const std::string& descr) {
  static const struct {
    const char* code;
    NpyDType dtype;
  } kCodes[] = {{"u1", NpyDType::kUInt8},   {"u2", NpyDType::kUInt16}, {"i2", NpyDType::kInt16},
                {"i4", NpyDType::kInt32},   {"i8", NpyDType::kInt64},  {"f2", NpyDType::kFloat16},
                {"f4", NpyDType::kFloat32}, {"f8", NpyDType::kFloat64}};
  const bool has_order =
      !descr.empty() && (descr[0] == '<' || descr[0] == '>' || descr[0] == '|' || descr[0] == '=');
  const std::string code = has_order ? descr.substr(1) : std::string();
  for (const auto& c : kCodes) {
    if (code != c.code) continue;
    if (descr[0] == '>' && itemSizeOf(c.dtype) > 1) {
      failOn(path, "big-endian data ('" + descr + "') is not supported; save a.astype('<" + code +
                       "') instead");
    }
    return c.dtype;
  }
  static const struct {
    char kind;
    const char* name;
  } kKinds[] = {{'b', "bool"}, {'i', "int"}, {'u', "uint"}, {'f', "float"}, {'c', "complex"}};
  std::string name;
  for (const auto& k : kKinds) {
    if (code.size() < 2 || code[0] != k.kind) continue;
    const std::string digits = code.substr(1);
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 2) break;
    name = std::string(" (") + k.name;
    if (k.kind != 'b') name += std::to_string(8 * base::parseInteger(digits, 0, 99).value_or(0));
    name += ")";
  }
  failOn(path, "unsupported dtype '" + descr + "'" + name + "; " + kSupported);
}

// The three entries, checked for presence, duplicates, unknown keys and value kinds.
struct HeaderDict {
  std::optional<Value> descr, fortran_order, shape;
};

HeaderDict readDict(const std::string& path, const char* text, size_t size) {
  HeaderDict dict;
  DictReader reader(path, text, size);
  reader.read([&](const std::string& key, Value value) {
    std::optional<Value>* slot = key == "descr"           ? &dict.descr
                                 : key == "fortran_order" ? &dict.fortran_order
                                 : key == "shape"         ? &dict.shape
                                                          : nullptr;
    if (slot == nullptr) {
      failOn(path, "unexpected key '" + key +
                       "' in the header (a .npy header has descr, fortran_order and shape)" +
                       kResave);
    }
    if (slot->has_value()) failOn(path, "the header has '" + key + "' twice" + kResave);
    *slot = std::move(value);
  });
  const auto need = [&](const std::optional<Value>& v, const char* key, Value::Kind kind,
                        const char* what) {
    if (!v) failOn(path, std::string("the header has no '") + key + "'" + kResave);
    if (v->kind != kind) failOn(path, std::string("'") + key + "' must be " + what + kResave);
  };
  need(dict.descr, "descr", Value::Kind::kString, "a dtype string such as '<f4'");
  need(dict.fortran_order, "fortran_order", Value::Kind::kBool, "True or False");
  need(dict.shape, "shape", Value::Kind::kTuple, "a tuple such as (3,) or (2, 5)");
  return dict;
}

// Fortran and C order lay out the same bytes when at most one dimension exceeds 1.
bool sameInBothOrders(const std::vector<int64_t>& shape) {
  int longer = 0;
  for (const int64_t n : shape) longer += n > 1 ? 1 : 0;
  return longer <= 1;
}

uint32_t littleEndian(const uint8_t* p, size_t bytes) {
  uint32_t v = 0;
  for (size_t i = bytes; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

// Checks the preamble and returns the header text's [begin, end).
std::pair<size_t, size_t> readPreamble(const std::string& path, const uint8_t* data, size_t size) {
  if (size < kMagicBytes + 2 || std::memcmp(data, kMagic, kMagicBytes) != 0) {
    failOn(path, "not a .npy file (numpy.save writes one): it does not start with \"\\x93NUMPY\"");
  }
  const uint8_t major = data[6];
  const uint8_t minor = data[7];
  if (minor != 0 || major < 1 || major > 3) {
    failOn(path, ".npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                     " is not supported (1.0, 2.0 and 3.0 are)" + kResave);
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t begin = kMagicBytes + 2 + length_bytes;
  if (size < begin) failOn(path, "truncated header: the file ends in its header length field");
  const uint64_t length = littleEndian(data + kMagicBytes + 2, length_bytes);
  if (length > kMaxNpyHeaderBytes) {
    failOn(path, "the header length " + std::to_string(length) + " is more than the " +
                     std::to_string(kMaxNpyHeaderBytes) + " bytes we accept" + kResave);
  }
  if (size - begin < length) {
    failOn(path, "truncated header: it says it ends at byte " + std::to_string(begin + length) +
                     " but the file has " + std::to_string(size) + " bytes");
  }
  return {begin, begin + static_cast<size_t>(length)};
}

uint64_t checkedProduct(const std::string& path, const std::vector<int64_t>& shape, size_t from,
                        uint64_t start) {
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t product = start;
  for (size_t i = from; i < shape.size(); ++i) {
    const auto n = static_cast<uint64_t>(shape[i]);
    if (n != 0 && product > kMax / n) {
      failOn(path, "shape " + shapeText(shape) + " is too large: its byte count overflows 63 bits" +
                       kResave);
    }
    product *= n;
  }
  return product;
}

}  // namespace

std::string dtypeName(NpyDType dtype) {
  switch (dtype) {
    case NpyDType::kUInt8:
      return "uint8";
    case NpyDType::kUInt16:
      return "uint16";
    case NpyDType::kInt16:
      return "int16";
    case NpyDType::kInt32:
      return "int32";
    case NpyDType::kInt64:
      return "int64";
    case NpyDType::kFloat16:
      return "float16";
    case NpyDType::kFloat32:
      return "float32";
    case NpyDType::kFloat64:
      return "float64";
  }
  return "unknown";
}

bool isFloating(NpyDType dtype) {
  return dtype == NpyDType::kFloat16 || dtype == NpyDType::kFloat32 || dtype == NpyDType::kFloat64;
}

size_t itemSizeOf(NpyDType dtype) {
  switch (dtype) {
    case NpyDType::kUInt8:
      return 1;
    case NpyDType::kUInt16:
    case NpyDType::kInt16:
    case NpyDType::kFloat16:
      return 2;
    case NpyDType::kInt32:
    case NpyDType::kFloat32:
      return 4;
    case NpyDType::kInt64:
    case NpyDType::kFloat64:
      return 8;
  }
  return 0;
}

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + (shape.size() == 1 ? ",)" : ")");
}

NpyLayout checkNpy(const std::string& path, const uint8_t* data, size_t size) {
  const auto [begin, end] = readPreamble(path, data, size);
  const HeaderDict dict = readDict(path, reinterpret_cast<const char*>(data) + begin, end - begin);
  NpyLayout layout;
  layout.dtype = parseDescr(path, dict.descr->text);
  layout.shape = dict.shape->items;
  if (layout.shape.empty()) {
    failOn(path,
           "a 0-d array (shape ()) has no rows; save a 1-D or larger array, e.g. "
           "numpy.atleast_1d(a)");
  }
  if (dict.fortran_order->flag && !sameInBothOrders(layout.shape)) {
    failOn(path, "Fortran order is not supported; save numpy.ascontiguousarray(a)");
  }
  layout.header_bytes = end;
  layout.row_bytes = checkedProduct(path, layout.shape, 1, itemSizeOf(layout.dtype));
  layout.data_bytes = checkedProduct(path, layout.shape, 0, itemSizeOf(layout.dtype));
  if (layout.data_bytes != size - end) {
    failOn(path, "holds " + std::to_string(size - end) + " bytes of data after its " +
                     std::to_string(end) + "-byte header, but shape " + shapeText(layout.shape) +
                     " of " + dtypeName(layout.dtype) + " needs " +
                     std::to_string(layout.data_bytes) + "; the file is truncated or damaged");
  }
  return layout;
}

}  // namespace cumulus::data
