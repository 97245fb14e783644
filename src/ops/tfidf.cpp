// TfIdfVectorizer-9 (https://onnx.ai/onnx/operators/onnx__TfIdfVectorizer.html),
// integer n-grams (pool_int64s; string pools need string tensors, which kiln
// does not have).
//
// X [C] or [B, C] (int32/int64 token ids) -> Y [O] or [B, O] float32, with
// O = max(ngram_indexes) + 1. The pool lists n-grams grouped by length:
// ngram_counts[k] is where the (k+1)-grams start, and the j-th n-gram of the
// whole pool (counted across all lengths) lands in output column
// ngram_indexes[j]. In each row, for every skip distance d = 1 ..
// max_skip_count + 1 and start position i, the n-grams
// (x[i], x[i + d], ..., x[i + (n-1) d]) with n in [min_gram_length,
// max_gram_length] that fit in the row and are in the pool are counted;
// unigrams only once (with d = 1), as the spec's reference does.
// mode TF: the counts; IDF: weights[col] (or 1) where the count is > 0;
// TFIDF: weights[col] * count (or the count).
#include <map>
#include <string>

#include "ops/util.h"

namespace kiln::ops {

namespace {

/// The pool as a map from n-gram to output column, plus the settings.
struct TfIdf {
  std::map<std::vector<int64_t>, int64_t> column;
  int64_t min_n, max_n, max_skip, out;
  std::string mode;
  std::vector<float> weights;
};

TfIdf tfidf_of(const ir::Node& n) {
  if (n.has("pool_strings") || !n.has("pool_int64s"))
    fail(ErrorCode::unsupported, "{}: only integer n-gram pools (pool_int64s) are supported", n.label());
  TfIdf t;
  t.min_n = n.i("min_gram_length");
  t.max_n = n.i("max_gram_length");
  t.max_skip = n.i("max_skip_count");
  t.mode = n.s("mode", "TF");
  t.weights = n.floats("weights", {});
  if (t.mode != "TF" && t.mode != "IDF" && t.mode != "TFIDF")
    fail(ErrorCode::invalid_model, "{}: mode '{}' is not TF, IDF or TFIDF", n.label(), t.mode);
  if (t.min_n < 1 || t.max_n < t.min_n || t.max_skip < 0)
    fail(ErrorCode::invalid_model, "{}: gram lengths [{}, {}] / max_skip_count {} are invalid", n.label(), t.min_n,
         t.max_n, t.max_skip);
  const std::vector<int64_t> pool = n.ints("pool_int64s"), counts = n.ints("ngram_counts"),
                             idx = n.ints("ngram_indexes");
  t.out = 0;
  for (int64_t v : idx) t.out = std::max(t.out, v + 1);
  int64_t id = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    const int64_t len = static_cast<int64_t>(k) + 1;
    const int64_t begin = counts[k], end = k + 1 < counts.size() ? counts[k + 1] : static_cast<int64_t>(pool.size());
    if (begin < 0 || end > static_cast<int64_t>(pool.size()) || end < begin || (end - begin) % len != 0)
      fail(ErrorCode::invalid_model, "{}: ngram_counts do not split pool_int64s into whole {}-grams", n.label(), len);
    for (int64_t p = begin; p < end; p += len, ++id) {
      if (id >= static_cast<int64_t>(idx.size()))
        fail(ErrorCode::invalid_model, "{}: ngram_indexes has fewer entries than the pool has n-grams", n.label());
      if (len >= t.min_n && len <= t.max_n)
        t.column[std::vector<int64_t>(pool.begin() + p, pool.begin() + p + len)] = idx[static_cast<size_t>(id)];
    }
  }
  if (!t.weights.empty() && static_cast<int64_t>(t.weights.size()) < t.out)
    fail(ErrorCode::invalid_model, "{}: weights has {} entries for {} output columns", n.label(), t.weights.size(),
         t.out);
  return t;
}

std::vector<OutType> infer_tfidf(const InferContext& c) {
  const InType& x = c.in(0);
  if (x.dtype != DType::i32 && x.dtype != DType::i64) unsupported_dtype(c.node, x.dtype, "input 0");
  const TfIdf t = tfidf_of(c.node);
  if (!x.shape) return {OutType{DType::f32, std::nullopt}};
  if (x.shape->size() > 2)
    fail(ErrorCode::invalid_model, "{}: X {} must be [C] or [B, C]", c.node.label(), ir::shape_str(x.shape));
  ir::Shape s{ir::Dim::known(t.out)};
  if (x.shape->size() == 2) s.insert(s.begin(), (*x.shape)[0]);
  return {OutType{DType::f32, s}};
}

void kernel_tfidf(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  if (x.dtype() != DType::i32 && x.dtype() != DType::i64) unsupported_dtype(n, x.dtype(), "input 0");
  if (x.rank() > 2) fail(ErrorCode::invalid_input, "{}: X {} must be [C] or [B, C]", n.label(), x.describe());
  const TfIdf t = tfidf_of(n);
  const int64_t rows = x.rank() == 2 ? x.dim(0) : 1, C = x.rank() == 0 ? 1 : x.dim(x.rank() - 1);
  const std::vector<int64_t> v = to_int64s(x);
  std::vector<int64_t> count(static_cast<size_t>(rows * t.out), 0);
  std::vector<int64_t> gram;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t* row = v.data() + r * C;
    for (int64_t d = 1; d <= t.max_skip + 1; ++d)
      for (int64_t i = 0; i < C; ++i)
        for (int64_t len = std::max<int64_t>(t.min_n, d > 1 ? 2 : 1); len <= t.max_n; ++len) {
          if (i + (len - 1) * d >= C) break;
          gram.clear();
          for (int64_t k = 0; k < len; ++k) gram.push_back(row[i + k * d]);
          const auto it = t.column.find(gram);
          if (it != t.column.end()) ++count[static_cast<size_t>(r * t.out + it->second)];
        }
  }
  std::vector<int64_t> shape{t.out};
  if (x.rank() == 2) shape.insert(shape.begin(), rows);
  Tensor& y = ctx.output(0, DType::f32, shape);
  for (int64_t p = 0; p < rows * t.out; ++p) {
    const double w = t.weights.empty() ? 1.0 : t.weights[static_cast<size_t>(p % t.out)];
    const double c = static_cast<double>(count[p]);
    const double val = t.mode == "TF" ? c : t.mode == "IDF" ? (c > 0 ? w : 0.0) : w * c;
    y.data<float>()[p] = static_cast<float>(val);
  }
}

}  // namespace

/// Registers TfIdfVectorizer (integer pools).
void register_tfidf(Registry& r) { r.add({"", "TfIdfVectorizer", infer_tfidf, kernel_tfidf}); }

}  // namespace kiln::ops
