#include "support/npy.h"

#include <fmt/ranges.h>

#include <cstring>
#include <regex>
#include <string>

#include "support/error.h"
#include "support/file.h"
#include "support/half.h"

namespace kiln {

namespace {
struct NpyType { const char* descr; DType dtype; };
constexpr NpyType kTypes[] = {
    {"f4", DType::f32}, {"f8", DType::f64}, {"f2", DType::f16}, {"i1", DType::i8},
    {"i2", DType::i16}, {"i4", DType::i32}, {"i8", DType::i64}, {"u1", DType::u8},
    {"u2", DType::u16}, {"u4", DType::u32}, {"u8", DType::u64}, {"b1", DType::boolean},
};

[[noreturn]] void bad(const std::string& what, const std::string& why) {
  fail(ErrorCode::invalid_input, "{}: not a valid .npy file: {}", what, why);
}
}  // namespace

Tensor parse_npy(const uint8_t* data, size_t size, const std::string& what) {
  if (size < 10 || std::memcmp(data, "\x93NUMPY", 6) != 0) bad(what, "missing the \\x93NUMPY magic");
  int major = data[6];
  size_t header_len, off;
  if (major == 1) {
    header_len = data[8] | (data[9] << 8);
    off = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) bad(what, "truncated header");
    header_len = data[8] | (data[9] << 8) | (data[10] << 16) | (static_cast<size_t>(data[11]) << 24);
    off = 12;
  } else {
    bad(what, fmt::format("unknown format version {}", major));
  }
  if (off + header_len > size) bad(what, "truncated header");
  std::string header(reinterpret_cast<const char*>(data + off), header_len);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex(R"('descr'\s*:\s*'([<>|=])([a-z]\d+)')"))) {
    // Say which dtype it is when there is one: strings, objects and records
    // are valid .npy files, just not tensors kiln takes.
    if (std::regex_search(header, m, std::regex(R"('descr'\s*:\s*'([^']*)')")))
      bad(what, fmt::format("dtype '{}' is not supported (numeric and bool arrays only)", m[1].str()));
    if (std::regex_search(header, std::regex(R"('descr'\s*:\s*\[)")))
      bad(what, "structured (record) arrays are not supported (numeric and bool arrays only)");
    bad(what, "header has no 'descr'");
  }
  std::string order = m[1], code = m[2];
  if (order == ">") bad(what, "big-endian data is not supported (use '<' byte order)");
  const NpyType* type = nullptr;
  for (auto& t : kTypes)
    if (code == t.descr) type = &t;
  if (!type) bad(what, fmt::format("dtype '{}' is not supported", code));
  if (std::regex_search(header, std::regex(R"('fortran_order'\s*:\s*True)")))
    bad(what, "Fortran-order arrays are not supported (save with np.ascontiguousarray)");
  if (!std::regex_search(header, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))"))) bad(what, "header has no 'shape'");
  // The tuple must be non-negative integers separated by commas ("(1, 3,)",
  // "()"): "-64" or "6a" is a bad header, not a dim of 64 or 6.
  std::vector<int64_t> shape;
  const std::string dims = m[1];
  if (!std::regex_match(dims, std::regex(R"(\s*(\d+L?\s*(,\s*\d+L?\s*)*,?\s*)?)")))
    bad(what, fmt::format("shape ({}) is not a tuple of non-negative integers", dims));
  std::regex num(R"(\d+)");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator(); ++it) {
    if (it->str().size() > 15) bad(what, fmt::format("shape ({}) has a dim too large", dims));
    shape.push_back(std::stoll(it->str()));
  }
  Tensor t(type->dtype, shape);
  size_t payload = size - off - header_len;
  if (payload != t.nbytes())
    bad(what, fmt::format("shape ({}) of {} needs {} data bytes, the file has {}", fmt::join(shape, ","),
                          dtype_name(type->dtype), t.nbytes(), payload));
  if (t.nbytes()) std::memcpy(t.raw(), data + off + header_len, t.nbytes());
  return t;
}

Tensor read_npy(const std::filesystem::path& p) {
  auto bytes = read_file(p);
  return parse_npy(bytes.data(), bytes.size(), "'" + p.string() + "'");
}

void write_npy(const std::filesystem::path& p, const Tensor& in) {
  Tensor t = in;
  if (t.dtype() == DType::bf16) {
    Tensor w(DType::f32, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) w.data<float>()[i] = bf16_to_float(t.data<uint16_t>()[i]);
    t = w;
  }
  const char* descr = nullptr;
  for (auto& k : kTypes)
    if (k.dtype == t.dtype()) descr = k.descr;
  if (!descr) fail(ErrorCode::invalid_input, "cannot write {} as .npy", t.describe());
  std::string shape;
  for (auto d : t.shape()) shape += std::to_string(d) + ",";
  if (t.rank() > 1) shape.pop_back();
  std::string header = fmt::format("{{'descr': '{}{}', 'fortran_order': False, 'shape': ({}), }}",
                                   t.dtype() == DType::boolean || dtype_size(t.dtype()) == 1 ? "|" : "<", descr, shape);
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back(1);
  out.push_back(0);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  out.append(static_cast<const char*>(t.raw()), t.nbytes());
  atomic_write(p, out.data(), out.size(), Links::follow);  // outputs go where the user points
}

}  // namespace kiln
