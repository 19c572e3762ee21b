// bench/gradbench/kmeans.cpp — GradBench's `kmeans` eval: the cost
// sum_i min_j |P_i - C_j|^2 (`cost`), and J H^-1 (`dir`) with J the gradient
// of the cost in the centroids C and H its Hessian, which is diagonal: adjit
// computes H·1 (the JVP of the gradient along ones), which is that diagonal.
#include "tool.h"

using namespace adjit;

namespace {

/// The sum over points of the squared distance to the nearest centroid, the
/// distances as |p|^2 + (|c|^2 - 2 p·c): one matmul instead of n·k·d
/// differences (its derivatives are matmuls too), and |p|^2, the same for
/// every centroid, added after the min.
Tensor cost(const Tensor& points, const Tensor& centroids) {
  const int64_t k = centroids.shape()[0];
  const Tensor cc = reshape(sum(centroids * centroids, {1}), {1, k});
  const Tensor shifted = matmul(points, transpose(centroids * -2.0)) + cc;
  return sum(min(shifted, {1})) + sum(points * points);
}

/// J H^-1 for the diagonal Hessian H.
Tensor direction(const Tensor& points, const Tensor& centroids) {
  auto gradient = [&](const Tensor& c) { return grad(cost, argnums<1>)(points, c); };
  const auto [j, hDiagonal] = jvp(gradient, std::tuple<Tensor>{centroids}, std::tuple<Tensor>{ones_like(centroids)});
  return j / hDiagonal;
}

/// The `dir` output: one row of d numbers per centroid.
gradbench::json rows(const Array& a) {
  const int64_t k = a.shape()[0], d = a.shape()[1];
  const std::vector<double> v = a.to_vector<double>();
  gradbench::json out = gradbench::json::array();
  for (int64_t i = 0; i < k; ++i) out.push_back(std::vector<double>(v.begin() + i * d, v.begin() + (i + 1) * d));
  return out;
}

gradbench::Prepare prepare(bool dir) {
  return [dir](const gradbench::json& in) -> std::unique_ptr<gradbench::Function> {
    const auto& p = in.at("points");
    const auto& c = in.at("centroids");
    const int64_t n = int64_t(p.size()), k = int64_t(c.size()), d = n > 0 ? int64_t(p[0].size()) : 0;
    Array points = gradbench::array(p, {n, d}), centroids = gradbench::array(c, {k, d});
    if (dir) return gradbench::call(jit(direction, gradbench::jitOptions("kmeans_dir")), rows, points, centroids);
    return gradbench::call(jit(cost, gradbench::jitOptions("kmeans_cost")), gradbench::scalar, points, centroids);
  };
}

} // namespace

int main(int argc, char** argv) {
  return gradbench::main(argc, argv, {{"cost", prepare(false)}, {"dir", prepare(true)}});
}
