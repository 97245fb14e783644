// Einsum-12 (https://onnx.ai/onnx/operators/onnx__Einsum.html), with numpy's
// einsum semantics.
//
// The equation "term,term,...[->out]" (spaces ignored) names each input dim
// with a letter (case-sensitive); "..." stands for the dims not named, right
// aligned and broadcast across inputs like numpy broadcasting. A letter
// repeated inside one term takes that term's diagonal. Without "->" the
// output is the ellipsis dims followed by the letters that occur exactly once
// in the whole equation, in ASCII order. Every letter absent from the output
// is summed over. Dims of size 1 broadcast against the same letter's size
// elsewhere (as numpy allows for ellipsis dims).
//
// The kernel loops over output positions (each thread a contiguous share,
// its per-input offsets advanced like an odometer) and, inside, over the
// summed labels with per-input offset tables; products accumulate in double
// (floats) or int64 (integers). dtypes: float32/float64 and the integer
// types; all inputs share one dtype, the output has it too.
#include <omp.h>

#include <algorithm>
#include <array>
#include <string>
#include <type_traits>

#include "ops/einsum.h"
#include "ops/util.h"

namespace kiln::ops {

namespace {

constexpr int kLetters = 52;  ///< label ids 0..51 are letters; 52 + j is ellipsis dim j

int letter_id(char c) {
  if (c >= 'a' && c <= 'z') return c - 'a';
  if (c >= 'A' && c <= 'Z') return 26 + (c - 'A');
  return -1;
}

/// ASCII order of label ids: 'A'..'Z' before 'a'..'z'.
int ascii_rank(int id) { return id < 26 ? 26 + id : id - 26; }

/// One parsed term: letters and where "..." sits (-1: absent).
struct Term {
  std::vector<int> letters;
  int ellipsis_at = -1;
};

Term parse_term(const ir::Node& n, const std::string& s) {
  Term t;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '.') {
      if (t.ellipsis_at >= 0 || s.compare(i, 3, "...") != 0)
        fail(ErrorCode::invalid_model, "{}: bad ellipsis in einsum term '{}'", n.label(), s);
      t.ellipsis_at = static_cast<int>(t.letters.size());
      i += 2;
      continue;
    }
    const int id = letter_id(s[i]);
    if (id < 0) fail(ErrorCode::invalid_model, "{}: character '{}' in einsum term '{}' is not a letter", n.label(), s[i], s);
    t.letters.push_back(id);
  }
  return t;
}

/// Labels per input dim and for the output, given the input ranks.
struct Plan {
  std::vector<std::vector<int>> inputs;
  std::vector<int> output;
  int ellipsis_rank = 0;
};

Plan make_plan(const ir::Node& n, const std::vector<int64_t>& ranks) {
  if (!n.has("equation")) fail(ErrorCode::invalid_model, "{}: attribute 'equation' is missing", n.label());
  std::string eq;
  for (char c : n.s("equation", "")) if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<Term> terms;
  for (size_t b = 0;;) {
    const size_t e = lhs.find(',', b);
    terms.push_back(parse_term(n, lhs.substr(b, e == std::string::npos ? std::string::npos : e - b)));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  if (terms.size() != ranks.size())
    fail(ErrorCode::invalid_model, "{}: equation '{}' has {} terms for {} inputs", n.label(), eq, terms.size(),
         ranks.size());
  Plan p;
  for (size_t i = 0; i < terms.size(); ++i) {
    const Term& t = terms[i];
    const int64_t named = static_cast<int64_t>(t.letters.size());
    if (t.ellipsis_at < 0 ? ranks[i] != named : ranks[i] < named)
      fail(ErrorCode::invalid_model, "{}: einsum term {} of '{}' does not fit input {} of rank {}", n.label(), i, eq, i,
           ranks[i]);
    if (t.ellipsis_at >= 0) p.ellipsis_rank = std::max(p.ellipsis_rank, static_cast<int>(ranks[i] - named));
  }
  std::array<int, kLetters> count{};
  for (size_t i = 0; i < terms.size(); ++i) {
    const Term& t = terms[i];
    const int e = t.ellipsis_at < 0 ? 0 : static_cast<int>(ranks[i]) - static_cast<int>(t.letters.size());
    std::vector<int> labels;
    for (int k = 0; k <= static_cast<int>(t.letters.size()); ++k) {
      if (k == t.ellipsis_at)
        for (int j = 0; j < e; ++j) labels.push_back(kLetters + p.ellipsis_rank - e + j);
      if (k < static_cast<int>(t.letters.size())) {
        labels.push_back(t.letters[k]);
        ++count[t.letters[k]];
      }
    }
    p.inputs.push_back(labels);
  }
  if (arrow == std::string::npos) {
    for (int j = 0; j < p.ellipsis_rank; ++j) p.output.push_back(kLetters + j);
    std::vector<int> once;
    for (int id = 0; id < kLetters; ++id)
      if (count[id] == 1) once.push_back(id);
    std::sort(once.begin(), once.end(), [](int a, int b) { return ascii_rank(a) < ascii_rank(b); });
    p.output.insert(p.output.end(), once.begin(), once.end());
  } else {
    const Term out = parse_term(n, eq.substr(arrow + 2));
    for (int k = 0; k <= static_cast<int>(out.letters.size()); ++k) {
      if (k == out.ellipsis_at)
        for (int j = 0; j < p.ellipsis_rank; ++j) p.output.push_back(kLetters + j);
      if (k < static_cast<int>(out.letters.size())) {
        const int id = out.letters[k];
        if (count[id] == 0)
          fail(ErrorCode::invalid_model, "{}: output label '{}' of '{}' is not in any input", n.label(),
               eq[arrow + 2 + static_cast<size_t>(k)], eq);
        if (std::count(out.letters.begin(), out.letters.end(), id) > 1)
          fail(ErrorCode::invalid_model, "{}: output label repeated in '{}'", n.label(), eq);
        p.output.push_back(id);
      }
    }
  }
  return p;
}

/// Size of every label (1 when it only ever has size 1); throws on a conflict.
std::vector<int64_t> label_sizes(const ir::Node& n, const Plan& p, const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<int64_t> size(static_cast<size_t>(kLetters + p.ellipsis_rank), 1);
  for (size_t i = 0; i < shapes.size(); ++i)
    for (size_t d = 0; d < shapes[i].size(); ++d) {
      int64_t& s = size[static_cast<size_t>(p.inputs[i][d])];
      const int64_t v = shapes[i][d];
      if (v == 1) continue;
      if (s != 1 && s != v)
        fail(ErrorCode::invalid_input, "{}: einsum label size conflict: {} vs {} (input {}, dim {})", n.label(), s, v,
             i, d);
      s = v;
    }
  return size;
}

/// The dtypes KILN_DISPATCH_NUMERIC covers.
bool einsum_dtype(DType t) {
  switch (t) {
    case DType::f32: case DType::f64: case DType::i8: case DType::i16: case DType::i32: case DType::i64:
    case DType::u8: case DType::u16: case DType::u32: case DType::u64: return true;
    default: return false;
  }
}

std::vector<OutType> infer_einsum(const InferContext& c) {
  const DType t = c.in(0).dtype;
  std::vector<int64_t> ranks;
  bool known = true;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    const InType& in = c.in(i);
    if (in.dtype != t)
      fail(ErrorCode::invalid_model, "{}: input {} is {} but input 0 is {}", c.node.label(), i, dtype_name(in.dtype),
           dtype_name(t));
    known = known && in.shape.has_value();
    ranks.push_back(in.shape ? static_cast<int64_t>(in.shape->size()) : 0);
  }
  if (!einsum_dtype(t)) unsupported_dtype(c.node, t, "input 0");
  if (!known) return {OutType{t, std::nullopt}};
  const Plan p = make_plan(c.node, ranks);
  // A label's dim: a static size other than 1 wins; else a symbol; else 1.
  std::vector<ir::Dim> dim(static_cast<size_t>(kLetters + p.ellipsis_rank), ir::Dim::known(1));
  for (size_t i = 0; i < c.num_inputs(); ++i)
    for (size_t d = 0; d < p.inputs[i].size(); ++d) {
      ir::Dim& cur = dim[static_cast<size_t>(p.inputs[i][d])];
      const ir::Dim& v = (*c.in(i).shape)[d];
      if (v.is_static() && v.value == 1) continue;
      if (v.is_static() || (cur.is_static() && cur.value == 1)) cur = v;
    }
  ir::Shape out;
  for (int id : p.output) out.push_back(dim[static_cast<size_t>(id)]);
  return {OutType{t, out}};
}

/// Per-input strides of each label (diagonals add up; broadcast dims are 0).
std::vector<std::vector<int64_t>> label_strides(const Plan& p, const std::vector<const Tensor*>& in) {
  std::vector<std::vector<int64_t>> st;
  for (size_t i = 0; i < in.size(); ++i) {
    std::vector<int64_t> s(static_cast<size_t>(kLetters + p.ellipsis_rank), 0);
    const std::vector<int64_t> strides = strides_of(in[i]->shape());
    for (size_t d = 0; d < p.inputs[i].size(); ++d)
      if (in[i]->dim(static_cast<int64_t>(d)) != 1) s[static_cast<size_t>(p.inputs[i][d])] += strides[d];
    st.push_back(s);
  }
  return st;
}

/// Offsets of every position of `labels` (row-major) in each input (the
/// summed labels: their product is the inner loop's length).
std::vector<std::vector<int64_t>> offset_tables(const std::vector<int>& labels, const std::vector<int64_t>& size,
                                                const std::vector<std::vector<int64_t>>& st, int64_t count) {
  std::vector<std::vector<int64_t>> tab(st.size(), std::vector<int64_t>(static_cast<size_t>(count), 0));
  std::vector<int64_t> idx(labels.size(), 0);
  for (int64_t k = 0; k < count; ++k) {
    for (size_t i = 0; i < st.size(); ++i) {
      int64_t off = 0;
      for (size_t l = 0; l < labels.size(); ++l) off += idx[l] * st[i][static_cast<size_t>(labels[l])];
      tab[i][static_cast<size_t>(k)] = off;
    }
    for (size_t l = labels.size(); l-- > 0;) {
      if (++idx[l] < size[static_cast<size_t>(labels[l])]) break;
      idx[l] = 0;
    }
  }
  return tab;
}

/// The per-input offsets of one position of `labels` (row-major over their
/// sizes), moved to the next position in O(1) on average: output positions
/// are walked this way rather than through a table of every position (one
/// int64 per position and input, allocated and filled on every run: 2 MiB
/// for a [64,2048] output of two inputs).
class Odometer {
 public:
  Odometer(const std::vector<int>& labels, const std::vector<int64_t>& size,
           const std::vector<std::vector<int64_t>>& st, int64_t position)
      : labels_(labels), size_(size), st_(st), idx_(labels.size(), 0), off_(st.size(), 0) {
    for (size_t l = labels.size(); l-- > 0;) {
      const int64_t n = size[static_cast<size_t>(labels[l])];
      idx_[l] = position % n;
      position /= n;
    }
    for (size_t i = 0; i < st.size(); ++i)
      for (size_t l = 0; l < labels.size(); ++l) off_[i] += idx_[l] * st[i][static_cast<size_t>(labels[l])];
  }
  int64_t offset(size_t input) const { return off_[input]; }
  void next() {
    for (size_t l = labels_.size(); l-- > 0;) {
      const auto lab = static_cast<size_t>(labels_[l]);
      if (++idx_[l] < size_[lab]) {
        for (size_t i = 0; i < off_.size(); ++i) off_[i] += st_[i][lab];
        return;
      }
      for (size_t i = 0; i < off_.size(); ++i) off_[i] -= (size_[lab] - 1) * st_[i][lab];
      idx_[l] = 0;
    }
  }

 private:
  const std::vector<int>& labels_;
  const std::vector<int64_t>& size_;
  const std::vector<std::vector<int64_t>>& st_;
  std::vector<int64_t> idx_, off_;
};

/// y[o] = sum over the summed positions r of the product of the inputs at
/// (o, r), for the out_count output positions of `out_labels`.
template <class T>
void contract(const std::vector<const Tensor*>& in, const std::vector<int>& out_labels,
              const std::vector<int64_t>& size, const std::vector<std::vector<int64_t>>& st,
              const std::vector<std::vector<int64_t>>& red_off, int64_t out_count, int64_t red_count, T* y) {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double,
                                 std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;
  if (out_count == 0) return;
  std::vector<const T*> ptr;
  for (const Tensor* t : in) ptr.push_back(t->data<T>());
  const size_t m = in.size();
#pragma omp parallel if (out_count * red_count * static_cast<int64_t>(m) > (1 << 16))
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t begin = out_count * t / threads, end = out_count * (t + 1) / threads;
    if (begin < end) {
      Odometer at(out_labels, size, st, begin);
      for (int64_t o = begin; o < end; ++o, at.next()) {
        Acc acc = 0;
        for (int64_t r = 0; r < red_count; ++r) {
          Acc prod = 1;
          for (size_t i = 0; i < m; ++i) prod *= static_cast<Acc>(ptr[i][at.offset(i) + red_off[i][r]]);
          acc += prod;
        }
        y[o] = static_cast<T>(acc);
      }
    }
  }
}

void kernel_einsum(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  std::vector<const Tensor*> in;
  std::vector<int64_t> ranks;
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    in.push_back(&ctx.in(i));
    ranks.push_back(in.back()->rank());
    shapes.push_back(in.back()->shape());
    if (in.back()->dtype() != in[0]->dtype())
      fail(ErrorCode::invalid_input, "{}: input {} is {} but input 0 is {}", n.label(), i, in.back()->describe(),
           in[0]->describe());
  }
  const Plan p = make_plan(n, ranks);
  const std::vector<int64_t> size = label_sizes(n, p, shapes);
  std::vector<bool> in_out(size.size(), false);
  std::vector<int64_t> out_shape;
  for (int id : p.output) {
    in_out[static_cast<size_t>(id)] = true;
    out_shape.push_back(size[static_cast<size_t>(id)]);
  }
  std::vector<int> reduced;
  for (const auto& labels : p.inputs)
    for (int id : labels)
      if (!in_out[static_cast<size_t>(id)] && std::find(reduced.begin(), reduced.end(), id) == reduced.end())
        reduced.push_back(id);
  int64_t red_count = 1;
  for (int id : reduced) red_count *= size[static_cast<size_t>(id)];
  const int64_t out_count = prod(out_shape);
  const auto st = label_strides(p, in);
  const auto red_off = offset_tables(reduced, size, st, red_count);
  Tensor& y = ctx.output(0, in[0]->dtype(), out_shape);
  const DType t = in[0]->dtype();
  KILN_DISPATCH_NUMERIC(t, n, "input 0",
                        { contract<scalar_t>(in, p.output, size, st, red_off, out_count, red_count, y.data<scalar_t>()); });
}

}  // namespace

EinsumLabels einsum_labels(const ir::Node& n, const std::vector<int64_t>& ranks) {
  Plan p = make_plan(n, ranks);
  return {std::move(p.inputs), std::move(p.output)};
}

/// Registers Einsum.
void register_einsum(Registry& r) { r.add({"", "Einsum", infer_einsum, kernel_einsum}); }

}  // namespace kiln::ops
