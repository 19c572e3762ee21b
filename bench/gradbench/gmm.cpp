// bench/gradbench/gmm.cpp — GradBench's `gmm` eval: the log posterior of a
// Gaussian mixture model (`objective`) and its gradient (`jacobian`) with
// respect to alpha, mu, q and l. The model is ADBench's (bench/adbench_models.h)
// with GradBench's sign of the Wishart prior: F = LL - P + K C.
#include "../adbench_models.h"
#include "tool.h"

#include <cmath>

using namespace adjit;
using namespace adjit::adbench;

namespace {

/// The eval's input: the data, and the parameters the gradient is taken for.
struct Gmm {
  GmmData data;
  Array tri, alpha, mu, q, l;
  explicit Gmm(const gradbench::json& in) {
    const int d = in.at("d").get<int>(), k = in.at("k").get<int>(), n = in.at("n").get<int>(), nl = d * (d - 1) / 2;
    data = {.d = d, .k = k, .n = n, .x = gradbench::array(in.at("x"), {n, d}), .gamma = in.at("gamma").get<double>(),
            .m = double(in.at("m").get<int>())};
    tri = gmmTriangleIndex(d);
    alpha = gradbench::array(in.at("alpha"), {k});
    mu = gradbench::array(in.at("mu"), {k, d});
    q = gradbench::array(in.at("q"), {k, d});
    l = gradbench::array(in.at("l"), {k, nl});
  }
  /// GradBench's objective, the true log posterior.
  Tensor logPosterior(Tensor alpha, Tensor mu, Tensor q, Tensor l, Tensor x) const {
    return gmmLogLikelihood(data, tri, x, alpha, mu, q, l, M_PI) - gmmWishartTerm(data, q, l) +
           double(data.k) * gmmWishartConstant(data, M_PI);
  }
};

/// `a` ([rows, cols], f64) as a JSON list of lists.
gradbench::json rows(const Array& a, int64_t count, int64_t cols) {
  const double* v = a.data<double>();
  gradbench::json out = gradbench::json::array();
  for (int64_t r = 0; r < count; ++r) out.push_back(std::vector<double>(v + r * cols, v + (r + 1) * cols));
  return out;
}

std::unique_ptr<gradbench::Function> objective(const gradbench::json& in) {
  auto g = std::make_shared<const Gmm>(in);
  auto f = jit([g](Tensor a, Tensor m, Tensor q, Tensor l, Tensor x) { return g->logPosterior(a, m, q, l, x); },
               gradbench::jitOptions("gmm.objective"));
  return gradbench::timed([g, f]() mutable { return f(g->alpha, g->mu, g->q, g->l, g->data.x); },
                          [](const Array& value) { return gradbench::json(value.item<double>()); });
}

std::unique_ptr<gradbench::Function> jacobian(const gradbench::json& in) {
  auto g = std::make_shared<const Gmm>(in);
  auto df = jit(grad([g](Tensor a, Tensor m, Tensor q, Tensor l, Tensor x) { return g->logPosterior(a, m, q, l, x); }, argnums<0, 1, 2, 3>),
                gradbench::jitOptions("gmm.jacobian"));
  return gradbench::timed([g, df]() mutable { return df(g->alpha, g->mu, g->q, g->l, g->data.x); },
                          [g](const auto& grads) {
                            const int64_t d = g->data.d, k = g->data.k;
                            return gradbench::json{{"alpha", std::get<0>(grads).template to_vector<double>()},
                                                   {"mu", rows(std::get<1>(grads), k, d)},
                                                   {"q", rows(std::get<2>(grads), k, d)},
                                                   {"l", rows(std::get<3>(grads), k, d * (d - 1) / 2)}};
                          });
}

} // namespace

int main(int argc, char** argv) {
  return gradbench::main(argc, argv, {{"objective", objective}, {"jacobian", jacobian}});
}
