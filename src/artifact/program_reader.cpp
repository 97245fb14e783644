// FlatBuffers `Program` -> ir::Model, with every index and range checked
// (docs/file-format.md, "Section 'program'"). The FlatBuffers verifier makes
// the buffer safe to walk; the checks here make the values it holds safe to use.
#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <set>

#include "artifact/artifact.h"
#include "artifact/program_generated.h"
#include "support/error.h"

namespace kiln::artifact::detail {

namespace {

std::string str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }


class ProgramReader {
 public:
  ProgramReader(const uint8_t* p, size_t n, const uint8_t* consts, size_t nconsts,
                const std::shared_ptr<const void>& keepalive, const std::string& what,
                const std::vector<Region>* allowed)
      : p_(p), n_(n), consts_(consts), nconsts_(nconsts), keepalive_(keepalive), what_(what), allowed_(allowed) {}

  ir::Model run() {
    flatbuffers::Verifier v(p_, n_, 64, verifier_max_tables(n_));
    if (!fb::VerifyProgramBuffer(v)) bad("FlatBuffers verification failed");
    const fb::Program* prog = fb::GetProgram(p_);
    ir::Model m;
    if (auto values = prog->values())
      for (flatbuffers::uoffset_t i = 0; i < values->size(); ++i)
        m.values.push_back(value(values->Get(i), fmt::format("value {}", i)));
    nvalues_ = static_cast<int64_t>(m.values.size());
    if (auto tensors = prog->tensors())
      for (flatbuffers::uoffset_t i = 0; i < tensors->size(); ++i) {
        ir::Value t = value(tensors->Get(i), fmt::format("tensor attribute payload {}", i));
        if (!t.constant) bad(fmt::format("tensor attribute payload {} holds no constant data", i));
        tensors_.push_back(std::move(*t.constant));
      }
    graphs_ = prog->graphs();
    if (!graphs_ || graphs_->size() == 0) bad("there is no main graph (graphs is empty)");
    state_.assign(graphs_->size(), State::unseen);
    state_[0] = State::open;
    m.main = graph(0, 0);
    state_[0] = State::done;
    for (size_t i = 1; i < state_.size(); ++i)
      if (state_[i] == State::unseen) bad(fmt::format("graph {} is not referenced by any node", i));
    m.opset = prog->opset();
    m.producer = str(prog->producer());
    // The runtime relies on ir::verify's invariants (each value produced
    // once, topological order); a file breaking them is damaged.
    try {
      ir::verify(m);
    } catch (const Error& e) {
      bad(fmt::format("the program is malformed: {}", e.what()));
    }
    if (auto segs = prog->segments())
      for (flatbuffers::uoffset_t i = 0; i < segs->size(); ++i) {
        const fb::SegmentDef* sd = segs->Get(i);
        ir::Segment s;
        s.device = str(sd->device());
        s.first = sd->first();
        s.count = sd->count();
        s.to_host = vec(sd->to_host());
        s.to_device = vec(sd->to_device());
        m.segments.push_back(std::move(s));
      }
    try {
      ir::check_segments(m, segment_device(m));
    } catch (const Error& e) {
      bad(fmt::format("the device partition is malformed: {}", e.what()));
    }
    return m;
  }

 private:
  enum class State { unseen, open, done };

  [[noreturn]] void bad(const std::string& detail) const { corrupt(what_, "section 'program'", detail); }

  template <class T>
  std::vector<T> vec(const flatbuffers::Vector<T>* v) const {
    if (!v || v->size() == 0) return {};  // an empty vector's data is never read (and the builder may misalign it)
    if (!vector_data_aligned(v, sizeof(T))) bad(fmt::format("a vector of {}-byte elements is misaligned", sizeof(T)));
    return std::vector<T>(v->begin(), v->end());
  }

  ir::Value value(const fb::ValueDef* vd, const std::string& where) {
    ir::Value v;
    v.name = str(vd->name());
    if (!known_dtype(vd->dtype())) bad(fmt::format("{} has unknown dtype {}", where, vd->dtype()));
    v.dtype = static_cast<DType>(vd->dtype());
    auto dims = vd->dims();
    size_t rank = dims ? dims->size() : 0;
    if (!vd->has_shape() && rank) bad(fmt::format("{} has unknown rank but {} dims", where, rank));
    if (rank > kMaxRank) bad(fmt::format("{} has rank {}, at most {} allowed", where, rank, kMaxRank));
    if (vd->has_shape()) {
      v.shape.emplace();
      for (flatbuffers::uoffset_t i = 0; i < rank; ++i) {
        const fb::Dim* d = dims->Get(i);
        if (d->value() < -1) bad(fmt::format("{} dim {} has size {}", where, i, d->value()));
        if (d->value() >= 0 && d->symbol() && d->symbol()->size())
          bad(fmt::format("{} dim {} is static but has a symbol", where, i));
        v.shape->push_back(d->value() >= 0 ? ir::Dim::known(d->value()) : ir::Dim::sym(str(d->symbol())));
      }
    }
    if (vd->const_offset() != -1) v.constant = constant(vd, where);
    return v;
  }

  Tensor constant(const fb::ValueDef* vd, const std::string& where) {
    int64_t off = vd->const_offset();
    uint64_t size = vd->const_size();
    if (off < 0 || static_cast<uint64_t>(off) > nconsts_ || size > nconsts_ - static_cast<uint64_t>(off))
      bad(fmt::format("{}'s constant [{}, +{}) lies outside the {}-byte constants section", where, off, size,
                      nconsts_));
    if (off % static_cast<int64_t>(kAlign) != 0)
      bad(fmt::format("{}'s constant offset {} is not {}-byte aligned", where, off, kAlign));
    // An appended program (format 5) sees the constants section and the
    // constant regions of the appended blocks up to its own: its constant
    // must lie wholly in one of them, never in the bytes between.
    if (allowed_ && std::none_of(allowed_->begin(), allowed_->end(), [&](const Region& r) {
          auto o = static_cast<uint64_t>(off);
          return o >= r.offset && o - r.offset <= r.size && size <= r.size - (o - r.offset);
        }))
      bad(fmt::format("{}'s constant [{}, +{}) lies outside every constants region", where, off, size));
    int32_t dt = vd->const_dtype();
    if (!known_dtype(dt) || dtype_size(static_cast<DType>(dt)) == 0)
      bad(fmt::format("{}'s constant has dtype {}, which has no fixed element size", where, dt));
    std::vector<int64_t> shape = vec(vd->const_shape());
    if (shape.size() > kMaxRank) bad(fmt::format("{}'s constant has rank {}", where, shape.size()));
    // Same limits as Tensor's own check, so that view() below cannot refuse.
    int64_t numel = 1;
    for (int64_t d : shape) {
      if (d < 0 || (d != 0 && numel > (int64_t{1} << 48) / d))
        bad(fmt::format("{}'s constant has an invalid shape [{}]", where, shape_to_string(shape)));
      numel *= d;
    }
    if (static_cast<uint64_t>(numel) * dtype_size(static_cast<DType>(dt)) != size)
      bad(fmt::format("{}'s constant is {} bytes, its shape [{}] of {} needs {}", where, size,
                      shape_to_string(shape), dtype_name(static_cast<DType>(dt)),
                      static_cast<uint64_t>(numel) * dtype_size(static_cast<DType>(dt))));
    // The mapping is read-only; Tensor's API has no const view, and kernels never write their inputs.
    auto* data = const_cast<uint8_t*>(consts_ + off);
    return Tensor::view(static_cast<DType>(dt), std::move(shape), data, keepalive_);
  }

  std::vector<ir::ValueId> ids(const flatbuffers::Vector<int32_t>* v, const std::string& where) const {
    std::vector<ir::ValueId> out = vec(v);
    for (auto id : out)
      if (id < ir::kNoValue || id >= nvalues_)
        bad(fmt::format("{} refers to value {}, but there are {} values", where, id, nvalues_));
    return out;
  }

  ir::Graph graph(size_t idx, int depth) {
    const fb::GraphDef* gd = graphs_->Get(static_cast<flatbuffers::uoffset_t>(idx));
    ir::Graph g;
    g.name = str(gd->name());
    std::string where = fmt::format("graph {}", idx);
    g.inputs = ids(gd->inputs(), where + " inputs");
    g.outputs = ids(gd->outputs(), where + " outputs");
    if (auto nodes = gd->nodes())
      for (flatbuffers::uoffset_t i = 0; i < nodes->size(); ++i)
        g.nodes.push_back(node(nodes->Get(i), fmt::format("{} node {}", where, i), depth));
    return g;
  }

  ir::Node node(const fb::NodeDef* nd, const std::string& where, int depth) {
    ir::Node n;
    n.op_type = str(nd->op_type());
    if (n.op_type.empty()) bad(fmt::format("{} has no op_type", where));
    n.domain = str(nd->domain());
    n.name = str(nd->name());
    n.opset = nd->opset();
    n.inputs = ids(nd->inputs(), where + " inputs");
    n.outputs = ids(nd->outputs(), where + " outputs");
    if (auto attrs = nd->attrs())
      for (auto a : *attrs) {
        std::string key = str(a->name());
        if (n.attrs.count(key)) bad(fmt::format("{} has attribute '{}' twice", where, key));
        n.attrs.emplace(key, attr(a, fmt::format("{} attribute '{}'", where, key), depth));
      }
    return n;
  }

  ir::AttrValue attr(const fb::Attr* a, const std::string& where, int depth) {
    switch (a->kind()) {
      case fb::AttrKind::Int: return a->i();
      case fb::AttrKind::Float: return a->f();
      case fb::AttrKind::String: return str(a->s());
      case fb::AttrKind::Ints: return vec(a->ints());
      case fb::AttrKind::Floats: return vec(a->floats());
      case fb::AttrKind::Strings: {
        std::vector<std::string> out;
        if (a->strings())
          for (auto s : *a->strings()) out.push_back(str(s));
        return out;
      }
      case fb::AttrKind::Tensor: {
        int32_t t = a->value();
        if (t < 0 || static_cast<size_t>(t) >= tensors_.size())
          bad(fmt::format("{} refers to tensor payload {}, but there are {}", where, t, tensors_.size()));
        return tensors_[static_cast<size_t>(t)];
      }
      case fb::AttrKind::Graph: return subgraph(a->graph(), where, depth + 1);
    }
    bad(fmt::format("{} has unknown kind {}", where, static_cast<int>(a->kind())));
  }

  std::shared_ptr<ir::Graph> subgraph(int32_t idx, const std::string& where, int depth) {
    if (idx <= 0 || static_cast<size_t>(idx) >= state_.size())
      bad(fmt::format("{} refers to graph {}, valid subgraphs are 1..{}", where, idx, state_.size() - 1));
    auto i = static_cast<size_t>(idx);
    // Subgraphs form a tree: each is referenced once, so walking the model
    // costs no more than its size in the file.
    if (state_[i] != State::unseen)
      bad(fmt::format("{} refers to graph {}, which is already referenced elsewhere", where, idx));
    if (depth > kMaxGraphDepth)
      bad(fmt::format("{}: subgraphs are nested more than {} deep", where, kMaxGraphDepth));
    state_[i] = State::open;
    auto g = std::make_shared<ir::Graph>(graph(i, depth));
    state_[i] = State::done;
    return g;
  }

  const uint8_t* p_;
  size_t n_;
  const uint8_t* consts_;
  size_t nconsts_;
  std::shared_ptr<const void> keepalive_;
  std::string what_;
  const std::vector<Region>* allowed_ = nullptr;
  int64_t nvalues_ = 0;
  std::vector<Tensor> tensors_;
  const flatbuffers::Vector<flatbuffers::Offset<fb::GraphDef>>* graphs_ = nullptr;
  std::vector<State> state_;
};

}  // namespace

ir::Model decode_program(const uint8_t* p, size_t n, const uint8_t* consts, size_t nconsts,
                         const std::shared_ptr<const void>& keepalive, const std::string& what,
                         const std::vector<Region>* allowed) {
  if (n >= FLATBUFFERS_MAX_BUFFER_SIZE)
    corrupt(what, "section 'program'", fmt::format("{} bytes is more than FlatBuffers allows", n));
  return ProgramReader(p, n, consts, nconsts, keepalive, what, allowed).run();
}

std::string segment_device(const ir::Model& m) {
  for (auto& s : m.segments)
    if (s.device != "host") return s.device;
  return "cuda";
}

}  // namespace kiln::artifact::detail
