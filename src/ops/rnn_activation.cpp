#include "ops/rnn_activation.h"

#include <cctype>

#include "support/error.h"

namespace kiln::ops {
namespace {

struct ActSpec {
  const char* name;
  ActFn fn;
  bool uses_alpha, uses_beta;
  double alpha, beta;  ///< defaults of the ONNX operator of the same name
};

constexpr ActSpec kActs[] = {
    {"relu", ActFn::relu, false, false, 0, 0},
    {"tanh", ActFn::tanh, false, false, 0, 0},
    {"sigmoid", ActFn::sigmoid, false, false, 0, 0},
    {"affine", ActFn::affine, true, true, 1.0, 0.0},
    {"leakyrelu", ActFn::leaky_relu, true, false, 0.01, 0},
    {"thresholdedrelu", ActFn::thresholded_relu, true, false, 1.0, 0},
    {"scaledtanh", ActFn::scaled_tanh, true, true, 1.0, 1.0},
    {"hardsigmoid", ActFn::hard_sigmoid, true, true, 0.2, 0.5},
    {"elu", ActFn::elu, true, false, 1.0, 0},
    {"softsign", ActFn::softsign, false, false, 0, 0},
    {"softplus", ActFn::softplus, false, false, 0, 0},
};

const ActSpec* find_spec(const std::string& name) {
  std::string key;
  for (char ch : name) key += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (auto& s : kActs)
    if (key == s.name) return &s;
  return nullptr;
}

}  // namespace

std::vector<Activation> read_activations(const ir::Node& n, const std::vector<std::string>& defaults, int64_t dirs,
                                         ActParams params, bool repeat_single) {
  const size_t per = defaults.size();
  std::vector<std::string> names = n.has("activations") ? std::get<std::vector<std::string>>(n.attrs.at("activations"))
                                                        : defaults;
  if (names.size() == per && dirs == 2 && (repeat_single || !n.has("activations"))) {
    const std::vector<std::string> one = names;
    names.insert(names.end(), one.begin(), one.end());
  }
  if (names.size() != per * static_cast<size_t>(dirs))
    fail(ErrorCode::invalid_model, "{}: 'activations' has {} entries, expected {} ({} per direction)", n.label(),
         names.size(), per * static_cast<size_t>(dirs), per);
  const std::vector<float> alphas = n.floats("activation_alpha"), betas = n.floats("activation_beta");
  const bool positional = params == ActParams::positional_if_full;
  const bool alpha_pos = positional && alphas.size() == names.size();
  const bool beta_pos = positional && betas.size() == names.size();
  size_t ai = 0, bi = 0;
  std::vector<Activation> out;
  for (size_t k = 0; k < names.size(); ++k) {
    const ActSpec* spec = find_spec(names[k]);
    if (!spec) fail(ErrorCode::unsupported, "{}: activation '{}' is not supported", n.label(), names[k]);
    Activation a{spec->fn, spec->alpha, spec->beta};
    if (spec->uses_alpha && alpha_pos) a.alpha = alphas[k];
    else if (spec->uses_alpha && ai < alphas.size()) a.alpha = alphas[ai++];
    if (spec->uses_beta && beta_pos) a.beta = betas[k];
    else if (spec->uses_beta && bi < betas.size()) a.beta = betas[bi++];
    out.push_back(a);
  }
  return out;
}

}  // namespace kiln::ops
