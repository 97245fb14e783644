// TensorProto -> kiln::Tensor (onnx.proto "message TensorProto"), including
// external data ("External Data" in docs/ExternalData.md of the ONNX repo).
#include "onnx/tensor_proto.h"

#include <fmt/ranges.h>

#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>

#include "support/error.h"

namespace kiln::onnx_import {

namespace fs = std::filesystem;

namespace {
[[noreturn]] void bad(const std::string& where, const std::string& why) {
  fail(ErrorCode::invalid_model, "{}: {}", where, why);
}

fs::path external_path(const fs::path& base_dir, const std::string& location, const std::string& where) {
  fs::path rel(location);
  if (location.empty() || rel.is_absolute())
    bad(where, fmt::format("external data location '{}' must be a relative path", location));
  for (auto& part : rel)
    if (part == "..") bad(where, fmt::format("external data location '{}' must not leave the model's directory", location));
  return base_dir / rel;
}

/// Parses an external_data `offset` / `length` value: the whole text must be
/// a non-negative decimal integer (ExternalData.md), else invalid_model.
int64_t parse_extent(const std::string& text, const std::string& key, const std::string& where) {
  int64_t v = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || v < 0)
    bad(where, fmt::format("external data '{}' is '{}', not a non-negative integer", key, text));
  return v;
}

/// Where an initializer's external bytes are: the file and offset, checked
/// against the file's size before anything is allocated.
struct ExternalExtent {
  fs::path path;
  int64_t offset = 0;
};

ExternalExtent locate_external(const onnx::TensorProto& tp, const fs::path& base_dir, const std::string& where,
                               size_t nbytes) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (auto& kv : tp.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = parse_extent(kv.value(), "offset", where);
    else if (kv.key() == "length") length = parse_extent(kv.value(), "length", where);
  }
  fs::path p = external_path(base_dir, location, where);
  if (length >= 0 && static_cast<size_t>(length) != nbytes)
    bad(where, fmt::format("external data length {} does not match the tensor's {} bytes", length, nbytes));
  std::error_code ec;
  const auto file_bytes = fs::file_size(p, ec);
  if (ec) fail(ErrorCode::io, "{}: cannot open external data file '{}': {}", where, p.string(), ec.message());
  if (static_cast<uint64_t>(offset) > file_bytes || file_bytes - static_cast<uint64_t>(offset) < nbytes)
    bad(where, fmt::format("external data file '{}' is too short (need {} bytes at offset {}, it has {})", p.string(),
                           nbytes, offset, file_bytes));
  return {p, offset};
}

void read_external(const ExternalExtent& ext, const std::string& where, void* dst, size_t nbytes) {
  std::ifstream f(ext.path, std::ios::binary);
  if (!f) fail(ErrorCode::io, "{}: cannot open external data file '{}'", where, ext.path.string());
  f.seekg(ext.offset);
  f.read(static_cast<char*>(dst), static_cast<std::streamsize>(nbytes));
  if (static_cast<size_t>(f.gcount()) != nbytes)
    fail(ErrorCode::io, "{}: reading {} bytes at offset {} of '{}' failed", where, nbytes, ext.offset,
         ext.path.string());
}

/// Element count of `shape`; invalid_model on a negative dimension or when
/// the count or its byte size (elem_bytes each) overflows.
int64_t checked_numel(const std::vector<int64_t>& shape, size_t elem_bytes, const std::string& where) {
  int64_t n = 1;
  const int64_t limit = std::numeric_limits<int64_t>::max() / static_cast<int64_t>(elem_bytes);
  for (auto d : shape) {
    if (d < 0) bad(where, fmt::format("negative dimension {}", d));
    if (d != 0 && n > limit / d) bad(where, fmt::format("shape [{}] is too large", fmt::join(shape, ",")));
    n *= d;
  }
  return n;
}

/// How many values the typed repeated field that carries `dt` holds
/// (onnx.proto: which field each data_type uses).
int64_t typed_field_size(const onnx::TensorProto& tp, DType dt) {
  switch (dt) {
    case DType::f32: return tp.float_data_size();
    case DType::f64: return tp.double_data_size();
    case DType::i64: return tp.int64_data_size();
    case DType::u32: case DType::u64: return tp.uint64_data_size();
    default: return tp.int32_data_size();
  }
}

template <class Src, class Dst>
void copy_field(const google::protobuf::RepeatedField<Src>& f, Tensor& t, const std::string& where) {
  if (static_cast<int64_t>(f.size()) != t.numel())
    bad(where, fmt::format("has {} values for shape [{}] ({} elements)", f.size(), fmt::join(t.shape(), ","), t.numel()));
  Dst* d = t.data<Dst>();
  for (int i = 0; i < f.size(); ++i) {
    Src v = f.Get(i);
    if constexpr (std::is_same_v<Dst, uint16_t> || std::is_same_v<Dst, int16_t> || std::is_same_v<Dst, int8_t> ||
                  std::is_same_v<Dst, uint8_t>) {
      std::memcpy(&d[i], &v, sizeof(Dst));  // 16/8-bit types are stored in int32_data, low bits
    } else {
      d[i] = static_cast<Dst>(v);
    }
  }
}

/// ONNX packs 4-bit integers two per byte, element 2k in the low nibble of
/// byte k (onnx.proto, "INT4"/"UINT4"); kiln stores them one per byte, i4
/// sign-extended (see kiln/dtype.h). `packed` holds ceil(numel/2) bytes.
void unpack_4bit(const uint8_t* packed, Tensor& t) {
  const bool is_signed = t.dtype() == DType::i4;
  uint8_t* d = t.data<uint8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint8_t v = static_cast<uint8_t>((packed[i / 2] >> (4 * (i % 2))) & 0x0Fu);
    if (is_signed && (v & 0x08u)) v = static_cast<uint8_t>(v | 0xF0u);
    d[i] = v;
  }
}

/// Reads a 4-bit tensor from raw_data, int32_data (one packed byte per
/// entry) or external data `ext`; tensor_from_proto checked the sizes.
void read_4bit(const onnx::TensorProto& tp, const std::optional<ExternalExtent>& ext, const std::string& where,
               Tensor& t) {
  const size_t packed_bytes = static_cast<size_t>((t.numel() + 1) / 2);
  std::vector<uint8_t> packed(packed_bytes);
  if (ext) {
    read_external(*ext, where, packed.data(), packed_bytes);
  } else if (tp.has_raw_data()) {
    if (packed_bytes) std::memcpy(packed.data(), tp.raw_data().data(), packed_bytes);
  } else {
    for (size_t i = 0; i < packed_bytes; ++i) packed[i] = static_cast<uint8_t>(tp.int32_data(static_cast<int>(i)));
  }
  unpack_4bit(packed.data(), t);
}
}  // namespace

DType dtype_from_onnx(int elem_type, const std::string& where) {
  switch (elem_type) {
    case 1: return DType::f32;
    case 2: return DType::u8;
    case 3: return DType::i8;
    case 4: return DType::u16;
    case 5: return DType::i16;
    case 6: return DType::i32;
    case 7: return DType::i64;
    case 9: return DType::boolean;
    case 10: return DType::f16;
    case 11: return DType::f64;
    case 12: return DType::u32;
    case 13: return DType::u64;
    case 16: return DType::bf16;
    case 8: fail(ErrorCode::unsupported, "{}: string tensors are not supported", where);
    case 14: case 15: fail(ErrorCode::unsupported, "{}: complex tensors are not supported", where);
    case 17: return DType::f8e4m3fn;
    case 18: return DType::f8e4m3fnuz;
    case 19: return DType::f8e5m2;
    case 20: return DType::f8e5m2fnuz;
    case 21: return DType::u4;
    case 22: return DType::i4;
    case 23: fail(ErrorCode::unsupported, "{}: float4 (FLOAT4E2M1) tensors are not supported", where);
    default: fail(ErrorCode::invalid_model, "{}: unknown element type {}", where, elem_type);
  }
}

Tensor tensor_from_proto(const onnx::TensorProto& tp, const fs::path& base_dir, const std::string& where) {
  DType dt = dtype_from_onnx(tp.data_type(), where);
  std::vector<int64_t> shape(tp.dims().begin(), tp.dims().end());
  const bool four_bit = dt == DType::u4 || dt == DType::i4;
  const int64_t numel = checked_numel(shape, four_bit ? 1 : dtype_size(dt), where);
  if (tp.has_segment()) fail(ErrorCode::unsupported, "{}: segmented tensors are not supported", where);
  // Every size check comes before the Tensor is allocated: a model that
  // declares huge dims with little data must be refused, not allocated.
  const size_t nbytes = four_bit ? static_cast<size_t>((numel + 1) / 2) : static_cast<size_t>(numel) * dtype_size(dt);
  std::optional<ExternalExtent> ext;
  if (tp.data_location() == onnx::TensorProto::EXTERNAL) {
    ext = locate_external(tp, base_dir, where, nbytes);
  } else if (tp.has_raw_data()) {
    if (tp.raw_data().size() != nbytes)
      bad(where, fmt::format("raw_data has {} bytes, shape [{}] of {} needs {}", tp.raw_data().size(),
                             fmt::join(shape, ","), dtype_name(dt), nbytes));
  } else {
    const int64_t have = typed_field_size(tp, dt);
    const int64_t need = four_bit ? static_cast<int64_t>(nbytes) : numel;
    if (have != need)
      bad(where, fmt::format("has {} values for shape [{}] ({} {})", have, fmt::join(shape, ","), need,
                             four_bit ? "packed bytes" : "elements"));
  }
  Tensor t(dt, shape);
  if (four_bit) {
    read_4bit(tp, ext, where, t);
    return t;
  }
  if (ext) {
    read_external(*ext, where, t.raw(), nbytes);
    return t;
  }
  if (tp.has_raw_data()) {
    if (tp.raw_data().size() != nbytes)
      bad(where, fmt::format("raw_data has {} bytes, shape [{}] of {} needs {}", tp.raw_data().size(),
                             fmt::join(shape, ","), dtype_name(dt), nbytes));
    if (nbytes) std::memcpy(t.raw(), tp.raw_data().data(), nbytes);
    return t;
  }
  switch (dt) {
    case DType::f32: copy_field<float, float>(tp.float_data(), t, where); break;
    case DType::f64: copy_field<double, double>(tp.double_data(), t, where); break;
    case DType::i64: copy_field<int64_t, int64_t>(tp.int64_data(), t, where); break;
    case DType::u32: copy_field<uint64_t, uint32_t>(tp.uint64_data(), t, where); break;
    case DType::u64: copy_field<uint64_t, uint64_t>(tp.uint64_data(), t, where); break;
    case DType::i32: copy_field<int32_t, int32_t>(tp.int32_data(), t, where); break;
    case DType::i16: copy_field<int32_t, int16_t>(tp.int32_data(), t, where); break;
    case DType::i8: copy_field<int32_t, int8_t>(tp.int32_data(), t, where); break;
    case DType::u16: case DType::f16: case DType::bf16:
      copy_field<int32_t, uint16_t>(tp.int32_data(), t, where); break;
    case DType::u8: case DType::f8e4m3fn: case DType::f8e4m3fnuz: case DType::f8e5m2: case DType::f8e5m2fnuz:
      copy_field<int32_t, uint8_t>(tp.int32_data(), t, where); break;  // float8: one bit pattern per entry
    case DType::boolean: {
      if (static_cast<int64_t>(tp.int32_data_size()) != t.numel())
        bad(where, fmt::format("has {} values for {} elements", tp.int32_data_size(), t.numel()));
      for (int i = 0; i < tp.int32_data_size(); ++i) t.data<bool>()[i] = tp.int32_data(i) != 0;
      break;
    }
    default: bad(where, "has no data");
  }
  return t;
}

}  // namespace kiln::onnx_import
