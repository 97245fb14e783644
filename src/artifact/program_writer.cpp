// ir::Model -> FlatBuffers `Program` plus the layout of the constants section
// (docs/file-format.md, "Section 'program'" and "Section 'constants'").
#include <flatbuffers/flatbuffers.h>

#include <cstring>

#include "artifact/artifact.h"
#include "artifact/program_generated.h"
#include "support/error.h"
#include "support/hash.h"

namespace kiln::artifact::detail {

namespace {

using flatbuffers::Offset;
static_assert(std::variant_size_v<ir::AttrValue> == 8 && std::is_same_v<std::variant_alternative_t<7, ir::AttrValue>,
                                                                        std::shared_ptr<ir::Graph>>,
              "AttrKind in program.fbs numbers the AttrValue alternatives; keep them in step");

class ProgramWriter {
 public:
  ProgramWriter(const ir::Model& m, ConstPool& pool) : m_(m), pool_(pool) {
    b_.ForceDefaults(true);  // a default-valued field (a -0.0 float among them) must round-trip bit-exactly
  }

  EncodedProgram run() {
    check_no_null_graph(m_.main);  // before ir::verify, which would dereference it
    // The reader refuses a program that fails ir::verify; refusing it here
    // names the real culprit (the compiler) instead of a "corrupt" file.
    try {
      ir::verify(m_);
      ir::check_segments(m_, segment_device(m_));
    } catch (const Error& e) {
      fail(ErrorCode::internal, "cannot serialise the program: it is malformed: {}", e.what());
    }
    std::vector<Offset<fb::ValueDef>> values;
    for (size_t i = 0; i < m_.values.size(); ++i) {
      const ir::Value& v = m_.values[i];
      const Tensor* c = v.constant ? &*v.constant : nullptr;
      values.push_back(value(v.name, v.dtype, v.shape, c, fmt::format("value {} '{}'", i, v.name)));
    }
    graph(m_.main, 0);
    auto values_v = b_.CreateVector(values);
    auto graphs_v = b_.CreateVector(graphs_);
    auto producer = b_.CreateString(m_.producer);
    auto tensors_v = b_.CreateVector(tensors_);
    std::vector<Offset<fb::SegmentDef>> segments;
    for (auto& s : m_.segments)
      segments.push_back(fb::CreateSegmentDef(b_, b_.CreateString(s.device), s.first, s.count,
                                              b_.CreateVector(s.to_host), b_.CreateVector(s.to_device)));
    auto segments_v = b_.CreateVector(segments);
    b_.Finish(fb::CreateProgram(b_, values_v, graphs_v, m_.opset, producer, tensors_v, segments_v));
    out_.bytes.assign(b_.GetBufferPointer(), b_.GetBufferPointer() + b_.GetSize());
    return std::move(out_);
  }

 private:
  static void check_no_null_graph(const ir::Graph& g) {
    for (auto& n : g.nodes)
      for (auto& [k, a] : n.attrs)
        if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) {
          if (!*sg)
            fail(ErrorCode::internal, "cannot serialise the program: {} has a null graph attribute '{}'", n.label(),
                 k);
          check_no_null_graph(**sg);
        }
  }

  void check_id(ir::ValueId id, const std::string& where) const {
    if (id < ir::kNoValue || id >= static_cast<ir::ValueId>(m_.values.size()))
      fail(ErrorCode::internal, "cannot serialise the program: {} refers to value {}, but the model has {} values",
           where, id, m_.values.size());
  }

  // `constant` must outlive the writer: its address is kept until the bytes are copied.
  Offset<fb::ValueDef> value(const std::string& value_name, DType dtype, const std::optional<ir::Shape>& shape,
                             const Tensor* constant, const std::string& where) {
    if (!known_dtype(static_cast<int32_t>(dtype)))
      fail(ErrorCode::internal, "cannot serialise the program: {} has unknown dtype {}", where,
           static_cast<int32_t>(dtype));
    std::vector<Offset<fb::Dim>> dims;
    if (shape) {
      if (shape->size() > kMaxRank)
        fail(ErrorCode::internal, "cannot serialise the program: {} has rank {}, the format allows at most {}",
             where, shape->size(), kMaxRank);
      for (auto& d : *shape) {
        auto sym = d.is_static() || d.symbol.empty() ? Offset<flatbuffers::String>() : b_.CreateString(d.symbol);
        dims.push_back(fb::CreateDim(b_, d.is_static() ? d.value : -1, sym));
      }
    }
    int64_t const_offset = -1;
    uint64_t const_size = 0;
    int32_t const_dtype = 0;
    Offset<flatbuffers::Vector<int64_t>> const_shape;
    if (constant) {
      const Tensor& t = *constant;
      if (!t.defined() || dtype_size(t.dtype()) == 0)
        fail(ErrorCode::internal, "cannot serialise the program: {} has a constant of dtype {}", where,
             dtype_name(t.dtype()));
      if (t.shape().size() > kMaxRank)
        fail(ErrorCode::internal, "cannot serialise the program: {}'s constant has rank {}, at most {} allowed",
             where, t.shape().size(), kMaxRank);
      const_offset = static_cast<int64_t>(place(t));
      const_size = t.nbytes();
      const_dtype = static_cast<int32_t>(t.dtype());
      const_shape = b_.CreateVector(t.shape());
    }
    auto name = b_.CreateString(value_name);
    auto dims_v = b_.CreateVector(dims);
    return fb::CreateValueDef(b_, name, static_cast<int32_t>(dtype), shape.has_value(), dims_v, const_offset,
                              const_size, const_dtype, const_shape);
  }

  // The constant's slot in the constants section (shared with any equal
  // constant); the bytes are copied by the writer once the layout is known.
  uint64_t place(const Tensor& t) { return pool_.place(t); }

  Offset<flatbuffers::Vector<int32_t>> ids(const std::vector<ir::ValueId>& v, const std::string& where) {
    for (auto id : v) check_id(id, where);
    return b_.CreateVector(v);
  }

  // Writes g and, depth first, its subgraphs; returns g's index in
  // Program.graphs (main gets 0, being written first). A subgraph the IR
  // shares between attributes is written once per reference, so the file
  // holds a tree, whose size bounds the work of anything that walks it.
  int32_t graph(const ir::Graph& g, int depth) {
    if (depth > kMaxGraphDepth)
      fail(ErrorCode::internal, "cannot serialise the program: subgraphs are nested more than {} deep",
           kMaxGraphDepth);
    auto idx = static_cast<int32_t>(graphs_.size());
    graphs_.emplace_back();
    std::string where = fmt::format("graph '{}'", g.name);
    std::vector<Offset<fb::NodeDef>> nodes;
    for (auto& n : g.nodes) nodes.push_back(node(n, depth));
    auto name = b_.CreateString(g.name);
    auto ins = ids(g.inputs, where), outs = ids(g.outputs, where);
    auto nodes_v = b_.CreateVector(nodes);
    graphs_[static_cast<size_t>(idx)] = fb::CreateGraphDef(b_, name, ins, outs, nodes_v);
    return idx;
  }

  Offset<fb::NodeDef> node(const ir::Node& n, int depth) {
    std::vector<Offset<fb::Attr>> attrs;
    for (auto& [k, a] : n.attrs) attrs.push_back(attr(n, k, a, depth));
    auto op = b_.CreateString(n.op_type), domain = b_.CreateString(n.domain), name = b_.CreateString(n.name);
    auto ins = ids(n.inputs, n.label()), outs = ids(n.outputs, n.label());
    auto attrs_v = b_.CreateVector(attrs);
    return fb::CreateNodeDef(b_, op, domain, name, n.opset, ins, outs, attrs_v);
  }

  Offset<fb::Attr> attr(const ir::Node& n, const std::string& key, const ir::AttrValue& a, int depth) {
    // AttrKind numbers follow the variant's alternative order.
    auto kind = static_cast<fb::AttrKind>(a.index());
    auto name = b_.CreateString(key);
    Offset<flatbuffers::String> s;
    Offset<flatbuffers::Vector<int64_t>> ints;
    Offset<flatbuffers::Vector<float>> floats;
    Offset<flatbuffers::Vector<Offset<flatbuffers::String>>> strings;
    int64_t i = 0;
    float f = 0.0f;
    int32_t tensor_index = -1, graph_index = -1;
    if (auto* p = std::get_if<int64_t>(&a)) i = *p;
    if (auto* p = std::get_if<float>(&a)) f = *p;
    if (auto* p = std::get_if<std::string>(&a)) s = b_.CreateString(*p);
    if (auto* p = std::get_if<std::vector<int64_t>>(&a)) ints = b_.CreateVector(*p);
    if (auto* p = std::get_if<std::vector<float>>(&a)) floats = b_.CreateVector(*p);
    if (auto* p = std::get_if<std::vector<std::string>>(&a)) strings = b_.CreateVectorOfStrings(*p);
    if (auto* p = std::get_if<Tensor>(&a)) {
      tensors_.push_back(value("", p->dtype(), ir::static_shape(p->shape()), p,
                               fmt::format("{} attribute '{}'", n.label(), key)));
      tensor_index = static_cast<int32_t>(tensors_.size() - 1);
    }
    if (auto* p = std::get_if<std::shared_ptr<ir::Graph>>(&a)) graph_index = this->graph(**p, depth + 1);
    return fb::CreateAttr(b_, name, kind, i, f, s, ints, floats, strings, tensor_index, graph_index);
  }

  const ir::Model& m_;
  ConstPool& pool_;
  flatbuffers::FlatBufferBuilder b_{1 << 16};
  EncodedProgram out_;
  std::vector<Offset<fb::GraphDef>> graphs_;
  std::vector<Offset<fb::ValueDef>> tensors_;
};

}  // namespace

uint64_t ConstPool::place(const Tensor& t) {
  if (existing_)
    if (std::optional<uint64_t> at = existing_(t)) return *at;
  const auto* bytes = static_cast<const uint8_t*>(t.raw());
  size_t n = t.nbytes();
  uint64_t h = hash64(bytes, n);
  // Equal bytes share a slot: the programs of a bucketed artifact (and equal
  // constants within one program) then use one copy. Constants are read-only
  // (mapped read-only at load), so sharing is safe.
  for (auto [it, end] = by_hash_.equal_range(h); it != end; ++it) {
    const ConstPlacement& c = placed_[it->second];
    if (c.tensor->nbytes() == n && (n == 0 || std::memcmp(c.tensor->raw(), bytes, n) == 0)) return origin_ + c.offset;
  }
  uint64_t off = align_up(size_);
  placed_.push_back({&t, off});
  by_hash_.emplace(h, placed_.size() - 1);
  size_ = off + n;
  return origin_ + off;
}

EncodedProgram encode_program(const ir::Model& m) {
  ConstPool pool;
  EncodedProgram out;
  out.bytes = ProgramWriter(m, pool).run().bytes;
  out.constants = pool.placements();
  out.constants_size = pool.size();
  return out;
}

std::vector<uint8_t> encode_program(const ir::Model& m, ConstPool& pool) {
  return std::move(ProgramWriter(m, pool).run().bytes);
}

}  // namespace kiln::artifact::detail
