// bench/gradbench/lstm.cpp — GradBench's `lstm` eval: ADBench's LSTM loss
// (`objective`) and its gradient with respect to the main and extra
// parameters (`jacobian`, one flat list: main_params row-major, then
// extra_params). The model is bench/adbench_models.h's, a `scan` over the
// characters.
#include "../adbench_models.h"
#include "tool.h"

using namespace adjit;
using namespace adjit::adbench;

namespace {

/// The eval's input: l layers, c characters of b bits.
struct LstmInput {
  int layers;
  int64_t chars, bits;
  Array mainParams, extraParams, state, sequence;
  explicit LstmInput(const gradbench::json& in) {
    const gradbench::json& mp = in.at("main_params");
    layers = int(mp.size() / 2);
    bits = int64_t(mp.at(0).size() / 4);
    chars = int64_t(in.at("sequence").size());
    if (layers < 1 || chars < 2)
      throw Error("lstm: expected at least 2 rows of main_params and 2 characters, got " + std::to_string(mp.size()) + " and " +
                  std::to_string(chars));
    mainParams = gradbench::array(mp, {2 * layers, 4 * bits});
    extraParams = gradbench::array(in.at("extra_params"), {3, bits});
    state = gradbench::array(in.at("state"), {2 * layers, bits});
    sequence = gradbench::array(in.at("sequence"), {chars, bits});
  }
  Tensor loss(Tensor mp, Tensor ep, Tensor st, Tensor seq) const { return lstmLoss(mp, ep, st, seq, layers, chars, bits); }
};

std::unique_ptr<gradbench::Function> objective(const gradbench::json& in) {
  auto s = std::make_shared<const LstmInput>(in);
  auto f = jit([s](Tensor mp, Tensor ep, Tensor st, Tensor seq) { return s->loss(mp, ep, st, seq); }, gradbench::jitOptions("lstm.objective"));
  return gradbench::timed([s, f]() mutable { return f(s->mainParams, s->extraParams, s->state, s->sequence); },
                          [](const Array& value) { return gradbench::json(value.item<double>()); });
}

std::unique_ptr<gradbench::Function> jacobian(const gradbench::json& in) {
  auto s = std::make_shared<const LstmInput>(in);
  auto df = jit(grad([s](Tensor mp, Tensor ep, Tensor st, Tensor seq) { return s->loss(mp, ep, st, seq); }, argnums<0, 1>), gradbench::jitOptions("lstm.jacobian"));
  return gradbench::timed([s, df]() mutable { return df(s->mainParams, s->extraParams, s->state, s->sequence); },
                          [](const auto& grads) {
                            std::vector<double> out = std::get<0>(grads).template to_vector<double>();
                            const std::vector<double> extra = std::get<1>(grads).template to_vector<double>();
                            out.insert(out.end(), extra.begin(), extra.end());
                            return gradbench::json(out);
                          });
}

} // namespace

int main(int argc, char** argv) {
  return gradbench::main(argc, argv, {{"objective", objective}, {"jacobian", jacobian}});
}
