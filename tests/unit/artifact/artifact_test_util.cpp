#include "artifact_test_util.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>

#include <flatbuffers/flatbuffers.h>

#include "artifact/program_generated.h"
#include "support/hash.h"

namespace kiln::artifact_test {

using artifact::detail::Region;
using artifact::detail::SectionKind;

namespace {

template <class T>
Tensor tensor(DType dt, std::vector<int64_t> shape, std::vector<T> v) {
  Tensor t(dt, std::move(shape));
  EXPECT_EQ(t.nbytes(), v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}

ir::ValueId constant(ir::Model& m, std::string name, Tensor t) {
  ir::Value v;
  v.name = std::move(name);
  v.dtype = t.dtype();
  v.shape = ir::static_shape(t.shape());
  v.constant = std::move(t);
  return m.add_value(std::move(v));
}

ir::ValueId value(ir::Model& m, std::string name, DType dt, std::optional<ir::Shape> shape) {
  ir::Value v;
  v.name = std::move(name);
  v.dtype = dt;
  v.shape = std::move(shape);
  return m.add_value(std::move(v));
}

ir::Node node(std::string op, std::string name, std::vector<ir::ValueId> in, std::vector<ir::ValueId> out) {
  ir::Node n;
  n.op_type = std::move(op);
  n.name = std::move(name);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.opset = 17;
  return n;
}

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

void expect_same_tensor(const Tensor& a, const Tensor& b, const std::string& where) {
  EXPECT_EQ(a.dtype(), b.dtype()) << where;
  EXPECT_EQ(a.shape(), b.shape()) << where;
  ASSERT_EQ(a.nbytes(), b.nbytes()) << where;
  if (a.nbytes()) {
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << where;
  }
}

void expect_same_graph(const ir::Graph& a, const ir::Graph& b, const std::string& where);

void expect_same_attr(const ir::AttrValue& a, const ir::AttrValue& b, const std::string& where) {
  ASSERT_EQ(a.index(), b.index()) << where;
  if (auto* f = std::get_if<float>(&a)) {
    EXPECT_TRUE(same_bits(*f, std::get<float>(b))) << where;
  }
  if (auto* v = std::get_if<std::vector<float>>(&a)) {
    auto& w = std::get<std::vector<float>>(b);
    ASSERT_EQ(v->size(), w.size()) << where;
    for (size_t i = 0; i < v->size(); ++i) EXPECT_TRUE(same_bits((*v)[i], w[i])) << where << " [" << i << "]";
  }
  if (auto* t = std::get_if<Tensor>(&a)) {
    expect_same_tensor(*t, std::get<Tensor>(b), where);
  }
  if (auto* g = std::get_if<std::shared_ptr<ir::Graph>>(&a))
    expect_same_graph(**g, *std::get<std::shared_ptr<ir::Graph>>(b), where);
  if (auto* i = std::get_if<int64_t>(&a)) {
    EXPECT_EQ(*i, std::get<int64_t>(b)) << where;
  }
  if (auto* s = std::get_if<std::string>(&a)) {
    EXPECT_EQ(*s, std::get<std::string>(b)) << where;
  }
  if (auto* v = std::get_if<std::vector<int64_t>>(&a)) {
    EXPECT_EQ(*v, std::get<std::vector<int64_t>>(b)) << where;
  }
  if (auto* v = std::get_if<std::vector<std::string>>(&a)) {
    EXPECT_EQ(*v, std::get<std::vector<std::string>>(b)) << where;
  }
}

void expect_same_graph(const ir::Graph& a, const ir::Graph& b, const std::string& where) {
  EXPECT_EQ(a.name, b.name) << where;
  EXPECT_EQ(a.inputs, b.inputs) << where;
  EXPECT_EQ(a.outputs, b.outputs) << where;
  ASSERT_EQ(a.nodes.size(), b.nodes.size()) << where;
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const ir::Node &x = a.nodes[i], &y = b.nodes[i];
    std::string w = where + "/" + x.name;
    EXPECT_EQ(x.op_type, y.op_type) << w;
    EXPECT_EQ(x.domain, y.domain) << w;
    EXPECT_EQ(x.name, y.name) << w;
    EXPECT_EQ(x.opset, y.opset) << w;
    EXPECT_EQ(x.inputs, y.inputs) << w;
    EXPECT_EQ(x.outputs, y.outputs) << w;
    ASSERT_EQ(x.attrs.size(), y.attrs.size()) << w;
    for (auto& [k, v] : x.attrs) {
      ASSERT_TRUE(y.attrs.count(k)) << w << " attribute " << k;
      expect_same_attr(v, y.attrs.at(k), w + " attribute " + k);
    }
  }
}

}  // namespace

artifact::CompiledProgram sample_program() {
  artifact::CompiledProgram p;
  ir::Model& m = p.model;
  m.opset = 17;
  m.producer = "pytorch 2.1.0";
  auto x = value(m, "x", DType::f32, ir::Shape{ir::Dim::sym("N"), ir::Dim::known(3), ir::Dim::sym("")});
  auto w = constant(m, "w", tensor<float>(DType::f32, {2, 3}, {1.5f, -2.0f, 0.0f, -0.0f, 3.25f, 1e-30f}));
  auto idx = constant(m, "idx", tensor<int64_t>(DType::i64, {3}, {-1, 0, 9007199254740993LL}));
  constant(m, "half", tensor<uint16_t>(DType::f16, {2}, {0x3c00, 0xfc00}));  // 1.0, -inf
  constant(m, "mask", tensor<uint8_t>(DType::boolean, {4}, {1, 0, 1, 1}));
  constant(m, "empty", tensor<uint8_t>(DType::u8, {0, 5}, {}));
  constant(m, "pi", tensor<double>(DType::f64, {}, {3.141592653589793}));
  constant(m, "bf", tensor<uint16_t>(DType::bf16, {1}, {0x3f80}));  // 1.0
  constant(m, "i32", tensor<int32_t>(DType::i32, {2, 1}, {std::numeric_limits<int32_t>::min(), 7}));
  auto cond = value(m, "cond", DType::boolean, ir::Shape{});
  auto y = value(m, "/layer1/Add_output_0", DType::f32, std::nullopt);  // unknown rank
  auto if_out = value(m, "if_out", DType::f32, ir::Shape{ir::Dim::sym("N")});
  auto then_out = value(m, "then_out", DType::f32, std::nullopt);
  auto else_out = value(m, "else_out", DType::f32, ir::static_shape({2, 3}));
  auto z = value(m, "z", DType::f32, ir::Shape{ir::Dim::sym("batch"), ir::Dim::known(0)});
  auto g_out = value(m, "g_out", DType::f32, ir::Shape{});
  auto iter = value(m, "iter", DType::i64, ir::Shape{});
  auto cond_in = value(m, "cond_in", DType::boolean, ir::Shape{});
  auto cond_out = value(m, "cond_out", DType::boolean, ir::Shape{});

  auto body = std::make_shared<ir::Graph>();
  body->name = "loop_body";
  body->inputs = {iter, cond_in};
  body->nodes.push_back(node("Identity", "body_id", {cond_in}, {cond_out}));
  body->outputs = {cond_out};

  auto then_g = std::make_shared<ir::Graph>();
  then_g->name = "then";
  ir::Node loop = node("Loop", "inner_loop", {ir::kNoValue, cond}, {});
  loop.attrs["body"] = body;
  then_g->nodes.push_back(loop);
  then_g->nodes.push_back(node("Neg", "neg", {y}, {then_out}));
  then_g->outputs = {then_out};

  auto else_g = std::make_shared<ir::Graph>();
  else_g->name = "else";
  else_g->nodes.push_back(node("Identity", "else_id", {w}, {else_out}));
  else_g->outputs = {else_out};

  auto const_g = std::make_shared<ir::Graph>();
  const_g->name = "const_graph";
  ir::Node c = node("Constant", "c", {}, {g_out});
  c.attrs["value"] = tensor<float>(DType::f32, {}, {42.0f});
  const_g->nodes.push_back(c);
  const_g->outputs = {g_out};

  m.main.name = "main_graph";
  m.main.inputs = {x, cond};
  m.main.nodes.push_back(node("Add", "/layer1/Add", {x, w}, {y}));
  ir::Node iff = node("If", "if0", {cond}, {if_out});
  iff.attrs["then_branch"] = then_g;
  iff.attrs["else_branch"] = else_g;
  m.main.nodes.push_back(iff);
  ir::Node all = node("AllAttrs", "all_attrs", {y, ir::kNoValue, idx}, {ir::kNoValue, z});
  all.domain = "com.example";
  all.opset = 1;
  all.attrs["i"] = int64_t{-7};
  all.attrs["f"] = -0.0f;
  all.attrs["s"] = std::string("a\0b/c\xc3\xa9", 7);
  all.attrs["ints"] = std::vector<int64_t>{-1, 0, std::numeric_limits<int64_t>::max()};
  all.attrs["floats"] = std::vector<float>{-0.0f, std::nanf("0x123"), 1e-45f, -INFINITY};
  all.attrs["strings"] = std::vector<std::string>{"", "x", std::string(300, 'q')};
  all.attrs["t"] = tensor<int64_t>(DType::i64, {2}, {5, -5});
  all.attrs["g"] = const_g;
  all.attrs["empty_ints"] = std::vector<int64_t>{};
  m.main.nodes.push_back(all);
  m.main.outputs = {if_out, z};

  p.plan.arena_bytes = 256;
  p.plan.naive_bytes = 320;
  p.plan.offsets.assign(m.values.size(), -1);
  p.plan.sizes.assign(m.values.size(), 0);
  p.plan.offsets[static_cast<size_t>(y)] = 0;
  p.plan.sizes[static_cast<size_t>(y)] = 64;
  p.plan.offsets[static_cast<size_t>(if_out)] = 64;
  p.plan.sizes[static_cast<size_t>(if_out)] = 64;
  p.plan.offsets[static_cast<size_t>(z)] = 128;
  p.plan.sizes[static_cast<size_t>(z)] = 128;
  p.plan.sizes[static_cast<size_t>(then_out)] = 64;  // run-time allocated, size is a hint

  auto& cp = p.compat;
  cp.kiln_version = "0.1.0";
  cp.target = "cpu";
  cp.device_arch = "x86-64";
  cp.device_name = "Test CPU @ 3.0GHz";
  cp.cpu_isa = {"avx2", "fma"};
  cp.library_versions = {{"onednn", "2.6.3"}, {"openmp", "4.5"}};
  cp.precision = "fp32";
  cp.tuning = "none";
  cp.options_digest = "0123456789abcdef0123456789abcdef";
  cp.model_digest = "fedcba9876543210fedcba9876543210";
  cp.input_signature = "x:float32[N,3,?];cond:bool[]";
  cp.cache_key = "key-1";
  p.metadata_json = R"({"model": "model.onnx", "note": "\u00fcn\u00efcode", "nested": {"a": [1, 2]}})";
  return p;
}

void expect_same_program(const artifact::CompiledProgram& a, const artifact::CompiledProgram& b) {
  EXPECT_EQ(a.compat.fields(), b.compat.fields());
  const ir::Model &x = a.model, &y = b.model;
  EXPECT_EQ(x.opset, y.opset);
  EXPECT_EQ(x.producer, y.producer);
  ASSERT_EQ(x.values.size(), y.values.size());
  for (size_t i = 0; i < x.values.size(); ++i) {
    const ir::Value &u = x.values[i], &v = y.values[i];
    std::string w = "value " + std::to_string(i) + " '" + u.name + "'";
    EXPECT_EQ(u.name, v.name) << w;
    EXPECT_EQ(u.dtype, v.dtype) << w;
    EXPECT_EQ(u.shape, v.shape) << w;
    ASSERT_EQ(u.constant.has_value(), v.constant.has_value()) << w;
    if (u.constant) expect_same_tensor(*u.constant, *v.constant, w);
  }
  expect_same_graph(x.main, y.main, "main");
  EXPECT_EQ(a.plan.arena_bytes, b.plan.arena_bytes);
  EXPECT_EQ(a.plan.naive_bytes, b.plan.naive_bytes);
  EXPECT_EQ(a.plan.offsets, b.plan.offsets);
  EXPECT_EQ(a.plan.sizes, b.plan.sizes);
  EXPECT_EQ(a.metadata_json, b.metadata_json);
  EXPECT_EQ(a.kernels, b.kernels);
  EXPECT_EQ(a.tuning, b.tuning);
}

uint32_t get32(const std::vector<uint8_t>& b, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | b.at(at + static_cast<size_t>(i));
  return v;
}
uint64_t get64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b.at(at + static_cast<size_t>(i));
  return v;
}
void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (size_t i = 0; i < 4; ++i) b.at(at + i) = static_cast<uint8_t>(v >> (8 * i));
}
void put64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (size_t i = 0; i < 8; ++i) b.at(at + i) = static_cast<uint8_t>(v >> (8 * i));
}

Region section_region(const std::vector<uint8_t>& file, SectionKind kind) {
  size_t e = get64(file, 48) + (static_cast<size_t>(kind) - 1) * 32;
  return {get64(file, e + 8), get64(file, e + 16)};
}

namespace {
bool fits(const std::vector<uint8_t>& f, uint64_t off, uint64_t size) {
  return off <= f.size() && size <= f.size() - off;
}
}  // namespace

void restamp(std::vector<uint8_t>& f) {
  uint64_t table = get64(f, 48);
  uint32_t count = get32(f, 56);
  if (count <= 64 && fits(f, table, uint64_t{count} * 32)) {
    for (uint32_t i = 0; i < count; ++i) {
      size_t e = table + size_t{i} * 32;
      uint64_t off = get64(f, e + 8), size = get64(f, e + 16);
      if (fits(f, off, size)) put64(f, e + 24, hash64(f.data() + off, size));
    }
    put64(f, 64, hash64(f.data() + table, size_t{count} * 32));
  }
  uint64_t coff = get64(f, 24), csize = get64(f, 32);
  if (fits(f, coff, csize)) put64(f, 40, hash64(f.data() + coff, csize));
  put64(f, 72, hash64(f.data(), 72));
}

std::vector<uint8_t> replace_sections(const std::vector<uint8_t>& file,
                                      const std::map<uint32_t, std::vector<uint8_t>>& repl) {
  using namespace artifact::detail;
  auto bytes_of = [&](uint32_t key, Region r) {
    if (repl.count(key)) return repl.at(key);
    return std::vector<uint8_t>(file.begin() + static_cast<ptrdiff_t>(r.offset),
                                file.begin() + static_cast<ptrdiff_t>(r.offset + r.size));
  };
  std::vector<uint8_t> compat = bytes_of(0, {get64(file, 24), get64(file, 32)});
  std::vector<std::vector<uint8_t>> sections;
  for (uint32_t k = 1; k <= kSectionCount; ++k) sections.push_back(bytes_of(k, section_region(file, SectionKind(k))));
  // A new program or memory plan of a one-program file gets a bucket table
  // that spans it, so the reader reaches the replaced section (written
  // without the writer's checks: crafted sections may be empty).
  if (!repl.count(7) && (repl.count(1) || repl.count(2))) {
    flatbuffers::FlatBufferBuilder b;
    b.ForceDefaults(true);
    auto sizes = b.CreateVector(std::vector<int64_t>{});
    std::vector<flatbuffers::Offset<kiln::fb::ProgramSlot>> slots{
        kiln::fb::CreateProgramSlot(b, sizes, 0, sections[0].size(), 0, sections[1].size())};
    auto slots_v = b.CreateVector(slots);
    b.Finish(kiln::fb::CreateBucketTable(b, 0, 0, 0, slots_v));
    sections[6].assign(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  }

  Header h;
  h.compat = {align_up(kHeaderSize), compat.size()};
  h.table_offset = align_up(h.compat.offset + compat.size());
  uint64_t cursor = align_up(h.table_offset + kSectionCount * kSectionEntrySize);
  std::vector<SectionEntry> entries;
  for (uint32_t k = 1; k <= kSectionCount; ++k) {
    entries.push_back({SectionKind(k), {cursor, sections[k - 1].size()}, 0});
    cursor = align_up(cursor + sections[k - 1].size());
  }
  h.file_size = entries.back().region.offset + entries.back().region.size;
  std::vector<uint8_t> out(h.file_size, 0);
  std::copy(compat.begin(), compat.end(), out.begin() + static_cast<ptrdiff_t>(h.compat.offset));
  for (uint32_t k = 0; k < kSectionCount; ++k)
    std::copy(sections[k].begin(), sections[k].end(), out.begin() + static_cast<ptrdiff_t>(entries[k].region.offset));
  std::vector<uint8_t> table = encode_section_table(entries);
  std::copy(table.begin(), table.end(), out.begin() + static_cast<ptrdiff_t>(h.table_offset));
  std::vector<uint8_t> header = encode_header(h);
  std::copy(header.begin(), header.end(), out.begin());
  restamp(out);
  return out;
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "kiln-artifact-test-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

void write_bytes(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

}  // namespace kiln::artifact_test
