// TfIdfVectorizer reference kernel. Expected values come from onnx 1.17's
// ReferenceEvaluator run offline (onnxruntime 1.20.1 for IDF/TFIDF without
// weights, where the onnx reference fails); the skip-gram case is also
// counted by hand in its comment.
#include "kiln/errors.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using testing::values;
using Ints = std::vector<int64_t>;

/// Unigrams 2, 3, 5, 4 (columns 0..3) and bigrams (5,6), (7,8), (6,7) (4..6).
std::map<std::string, ir::AttrValue> pool(const std::string& mode, int64_t min_n, int64_t skip) {
  return {{"mode", mode},
          {"min_gram_length", min_n},
          {"max_gram_length", int64_t{2}},
          {"max_skip_count", skip},
          {"ngram_counts", Ints{0, 4}},
          {"ngram_indexes", Ints{0, 1, 2, 3, 4, 5, 6}},
          {"pool_int64s", Ints{2, 3, 5, 4, 5, 6, 7, 8, 6, 7}}};
}

Tensor batch() { return make<int32_t>({2, 6}, {1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8}); }

TEST(TfIdfVectorizer, TermFrequencyWithSkips) {
  auto y = run_op("TfIdfVectorizer", pool("TF", 1, 5), {batch()});
  ASSERT_EQ(y[0].dtype(), DType::f32);
  EXPECT_EQ(y[0].shape(), (Ints{2, 7}));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{0, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 1}));
}

TEST(TfIdfVectorizer, IdfAndTfIdfWithoutWeights) {
  EXPECT_EQ(values<float>(run_op("TfIdfVectorizer", pool("IDF", 1, 5), {batch()})[0]),
            (std::vector<float>{0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 1}));
  EXPECT_EQ(values<float>(run_op("TfIdfVectorizer", pool("TFIDF", 1, 5), {batch()})[0]),
            (std::vector<float>{0, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 1}));
}

TEST(TfIdfVectorizer, Weights) {
  auto attrs = pool("TFIDF", 1, 5);
  attrs["weights"] = std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f};
  auto tfidf = values<float>(run_op("TfIdfVectorizer", attrs, {batch()})[0]);
  const std::vector<float> want_tfidf{0, 0.6f, 0, 0, 0, 0, 0, 0, 0, 0.3f, 0, 0.5f, 0.6f, 0.7f};
  for (size_t i = 0; i < want_tfidf.size(); ++i) EXPECT_NEAR(tfidf[i], want_tfidf[i], 1e-6f) << i;
  attrs["mode"] = std::string("IDF");
  auto idf = values<float>(run_op("TfIdfVectorizer", attrs, {batch()})[0]);
  const std::vector<float> want_idf{0, 0.2f, 0, 0, 0, 0, 0, 0, 0, 0.3f, 0, 0.5f, 0.6f, 0.7f};
  for (size_t i = 0; i < want_idf.size(); ++i) EXPECT_NEAR(idf[i], want_idf[i], 1e-6f) << i;
}

TEST(TfIdfVectorizer, OnlyBigramsNoSkipOneRow) {
  auto y = run_op("TfIdfVectorizer", pool("TF", 2, 0), {make<int64_t>({12}, {1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8})});
  EXPECT_EQ(y[0].shape(), Ints{7});
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{0, 0, 0, 0, 1, 1, 1}));
}

TEST(TfIdfVectorizer, TrigramsWithSkipDistanceTwo) {
  // x = [1, 3, 7, 1, 2, 3, 4, 7]: 1 and 3 twice each; (1, 3) and (3, 7) once
  // adjacent and once two apart; (1, 3, 7) at 0 (adjacent) and at 3 (two apart).
  std::map<std::string, ir::AttrValue> attrs{{"mode", std::string("TF")},
                                             {"min_gram_length", int64_t{1}},
                                             {"max_gram_length", int64_t{3}},
                                             {"max_skip_count", int64_t{1}},
                                             {"ngram_counts", Ints{0, 2, 6}},
                                             {"ngram_indexes", Ints{3, 0, 1, 2, 4}},
                                             {"pool_int64s", Ints{1, 3, 1, 3, 3, 7, 1, 3, 7}}};
  Tensor x = make<int64_t>({1, 8}, {1, 3, 7, 1, 2, 3, 4, 7});
  EXPECT_EQ(values<float>(run_op("TfIdfVectorizer", attrs, {x})[0]), (std::vector<float>{2, 2, 2, 2, 2}));
  attrs["min_gram_length"] = int64_t{2};
  EXPECT_EQ(values<float>(run_op("TfIdfVectorizer", attrs, {x})[0]), (std::vector<float>{0, 2, 2, 0, 2}));
}

TEST(TfIdfVectorizer, PoolThatDoesNotSplitIsAnError) {
  auto attrs = pool("TF", 1, 0);
  attrs["ngram_counts"] = Ints{0, 3};
  EXPECT_THROW(run_op("TfIdfVectorizer", attrs, {batch()}), Error);
}

}  // namespace
}  // namespace kiln
