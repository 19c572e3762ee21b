// examples/aot/model.cpp — traces a function (with a custom gradient) and
// saves it as .adj for `adjit compile`; also writes what the JIT computes,
// which the C program compiled ahead of time must print too.
// usage: aot_model OUTPUT_DIR
#include <adjit/adjit.h>

#include <cstdio>
#include <string>

using namespace adjit;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  // [snippet:aot-sparse-model]
  // A tridiagonal Jacobian (g) and Hessian (h), for --sparse-jacobian g --sparse-hessian h.
  auto g = [](Tensor x) {
    Tensor left = pad(slice(x, {0}, {5}), {1}, {0});  // x[i-1], 0 first
    Tensor right = pad(slice(x, {1}, {6}), {0}, {1}); // x[i+1], 0 last
    return left + x * x * right;
  };
  auto h = [](Tensor x) { return sum(slice(x, {0}, {5}) * slice(x, {1}, {6})) + sum(exp(x)); };
  // [/snippet:aot-sparse-model]
  // [snippet:trace-and-save]
  auto log1pexp = custom_gradient([](Tensor x) {
    Tensor e = exp(x);
    return std::make_pair(log(1 + e), [e](Tensor dy) { return dy * (1 - 1 / (1 + e)); });
  });
  auto f = [log1pexp](Tensor x, Tensor w) { return sum(log1pexp(x * w)); };

  Module m = trace_named("f", f, Type{DType::f32, {4}}, Type{DType::f32, {}});
  // g and h too, for --sparse-jacobian g --sparse-hessian h.
  m.add(trace_named("g", g, Type{DType::f64, {6}}));
  m.add(trace_named("h", h, Type{DType::f64, {6}}));
  m.save(dir + "/model.adj");
  // [/snippet:trace-and-save]

  Array x(std::vector<float>{0.5f, -1.0f, 2.0f, 30.0f}), w(1.5f);
  const double y = jit(f)(x, w).item<double>();
  auto [dx, dw] = grad(f, argnums<0, 1>)(x, w);
  const Array tx(std::vector<float>{1.0f, 0.0f, -1.0f, 0.5f}), tw(2.0f);
  const double ty = jvp(f, std::tuple{x, w}, std::tuple{tx, tw}).second.item<double>();
  // The same function mapped over instances (adjit::map), for f_map and f_bwd_map.
  const Array xs(std::vector<float>{0.5f, -1.0f, 2.0f, 30.0f, 1.0f, 2.0f, 3.0f, 4.0f, -0.5f, 0.25f, 0.0f, 1.0f}, {3, 4});
  const Array ws(std::vector<float>{1.5f, -0.5f, 2.0f});
  const Array ys = map(f)(xs, ws);
  auto [dxs, dws] = map(grad(f, argnums<0, 1>))(xs, ws);
  auto tangent = [f](Tensor x, Tensor w, Tensor tx, Tensor tw) { return jvp(f, std::tuple{x, w}, std::tuple{tx, tw}).second; };
  const Array tys = map(tangent, {.in_axes = {0, 0, std::nullopt, std::nullopt}})(xs, ws, tx, tw);
  FILE* out = std::fopen((dir + "/jit.txt").c_str(), "w");
  if (!out) return 1;
  std::fprintf(out, "f:     y = %.5f\n", y);
  std::fprintf(out, "f_fwd: y = %.5f\n", y);
  std::fprintf(out, "f_bwd: dx = [%.5f, %.5f, %.5f, %.5f], dw = %.5f\n", dx.at(0), dx.at(1), dx.at(2), dx.at(3),
               dw.item<double>());
  std::fprintf(out, "f_jvp: y = %.5f, ty = %.5f\n", y, ty);
  std::fprintf(out, "f_map(2): y = [%.5f, %.5f]\n", ys.at(0), ys.at(1));
  std::fprintf(out, "f_map(3): y = [%.5f, %.5f, %.5f]\n", ys.at(0), ys.at(1), ys.at(2));
  std::fprintf(out, "f_map(3): the hook ran 1 time\n");
  std::fprintf(out, "f_bwd_map(2): dx[1] = [%.5f, %.5f, %.5f, %.5f], dw = [%.5f, %.5f]\n", dxs.at(4), dxs.at(5), dxs.at(6),
               dxs.at(7), dws.at(0), dws.at(1));
  std::fprintf(out, "f_jvp_map(2): ty = [%.5f, %.5f]\n", tys.at(0), tys.at(1));
  const Array x6(std::vector<double>{0.5, -1.0, 2.0, 1.5, -0.25, 3.0});
  for (const auto& [name, s] : {std::pair{"g_jac", sparse_jacobian(g)(x6)}, std::pair{"h_hess", sparse_hessian(h)(x6)}}) {
    std::fprintf(out, "%s: %lld x %lld, %lld nonzeros from %lld colors\n", name, static_cast<long long>(s.rows),
                 static_cast<long long>(s.cols), static_cast<long long>(s.nnz()), static_cast<long long>(s.colors));
    for (int64_t r = 0; r < s.rows; ++r) {
      std::fprintf(out, "  row %lld:", static_cast<long long>(r));
      for (int64_t k = s.row_ptr[static_cast<std::size_t>(r)]; k < s.row_ptr[static_cast<std::size_t>(r) + 1]; ++k)
        std::fprintf(out, " (%lld) %.5f", static_cast<long long>(s.col_idx[static_cast<std::size_t>(k)]), s.values.at(k));
      std::fprintf(out, "\n");
    }
  }
  std::fprintf(out, "g_jac_work: the same values, nothing allocated\n");
  std::fclose(out);
  std::printf("saved %s/model.adj\n", dir.c_str());
  return 0;
}
