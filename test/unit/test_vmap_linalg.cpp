// test/unit/test_vmap_linalg.cpp — the batching rules of the linear-algebra
// ops (matmul, tril, triu, cholesky, triangular_solve, lu, qr, eigh, svd),
// convolution and the pooling ops: vmap against a loop of jit calls of the
// unbatched function, with batched and unbatched operands and batch axes not
// at 0, compiled and interpreted, in f32 and f64; vmap(grad(f)) against
// loops of gradients; the forms the rules choose (no broadcast where a fold
// exists).
#include "Check.h"

#include "batching/Rules.h"
#include "ir/OpInfo.h"

#include <adjit/conv.h>
#include <adjit/decompositions.h>
#include <adjit/linalg.h>
#include <adjit/vmap.h>

#include <algorithm>
#include <chrono>
#include <cstring>

using namespace adjit;
using namespace adjit::test;

namespace {

/// Type t with a batch of `size` inserted at `axis` (nullopt: t itself).
Type batchedType(Type t, std::optional<int64_t> axis, int64_t size) {
  if (!axis) return t;
  const int64_t a = *axis < 0 ? *axis + t.rank() + 1 : *axis;
  t.shape.insert(t.shape.begin() + a, size);
  return t;
}

/// Every result of f (a std::vector<Tensor>), as Arrays.
template <class R> std::vector<Array> asVector(R r) {
  if constexpr (std::is_same_v<R, Array>) return {std::move(r)};
  else return r;
}

/// Checks vmap(f, {in_axes})(args...) — f's results a std::vector<Tensor>,
/// each batched at axis 0 — against stacking f's results on each example
/// (a loop of jit(f) calls), compiled and through the interpreter.
template <class F, class... A>
void agrees(const F& f, std::vector<std::optional<int64_t>> axes, double rtol, int64_t size, const A&... args) {
  const std::vector<Array> in{args...};
  auto one = jit(f);
  std::vector<std::vector<Array>> rows;
  for (int64_t b = 0; b < size; ++b) {
    std::vector<Array> ex;
    for (std::size_t i = 0; i < in.size(); ++i) ex.push_back(axes[i] ? exampleOf(in[i], *axes[i], b) : in[i]);
    rows.push_back([&]<std::size_t... I>(std::index_sequence<I...>) { return asVector(one(ex[I]...)); }(
        std::index_sequence_for<A...>{}));
  }
  std::vector<Array> want;
  for (std::size_t k = 0; k < rows[0].size(); ++k) {
    std::vector<Array> col;
    for (auto& r : rows) col.push_back(r[k]);
    want.push_back(stackRows(col));
  }
  const VmapOptions o{.in_axes = axes};
  const std::vector<Array> jitted = asVector(vmap(f, o)(args...));
  Module m = trace([&](const auto&... ts) { return vmap(f, o)(ts...); }, args.type()...);
  m.verify();
  const std::vector<Array> interpreted = m.interpret("f", in);
  REQUIRE(jitted.size() == want.size());
  REQUIRE(interpreted.size() == want.size());
  for (std::size_t k = 0; k < want.size(); ++k) {
    INFO("result " << k);
    ADJIT_CHECK_CLOSE(jitted[k], want[k], rtol);
    ADJIT_CHECK_CLOSE(interpreted[k], want[k], rtol);
  }
}

/// The op kinds of the module vmap(f) traces to.
template <class F, class... T> std::string opsOf(const F& f, std::vector<std::optional<int64_t>> axes, const T&... types) {
  Module m = trace([&](const auto&... ts) { return vmap(f, {.in_axes = axes})(ts...); }, types...);
  return m.str();
}

/// Tolerance of a comparison in `t`, valid whatever the vector width (sums
/// of up to a few hundred terms reassociated).
double tol(DType t) { return t == DType::f32 ? 2e-4 : 1e-10; }

using V = std::vector<Tensor>;
constexpr auto none = std::nullopt;

} // namespace

TEST_CASE("vmap matmul: both, left and right operand batched, transposed, batch axes anywhere") {
  for (DType t : {DType::f32, DType::f64}) {
    INFO(name_of(t));
    const double rt = tol(t);
    auto mm = [](const Tensor& a, const Tensor& b) { return V{matmul(a, b)}; };
    auto mmTa = [](const Tensor& a, const Tensor& b) { return V{matmul(a, b, {.transpose_a = true})}; };
    auto mmTb = [](const Tensor& a, const Tensor& b) { return V{matmul(a, b, {.transpose_b = true})}; };
    auto mmTab = [](const Tensor& a, const Tensor& b) { return V{matmul(a, b, {.transpose_a = true, .transpose_b = true})}; };
    const Array a = randomArray({t, {4, 3, 5}}, 1), b = randomArray({t, {4, 5, 2}}, 2);
    const Array a1 = randomArray({t, {3, 5}}, 3), b1 = randomArray({t, {5, 2}}, 4);
    agrees(mm, {0, 0}, rt, 4, a, b);
    agrees(mm, {0, none}, rt, 4, a, b1);                      // folded into M
    agrees(mm, {none, 0}, rt, 4, a1, b);                      // folded into the rows of the transpose
    agrees(mm, {1, none}, rt, 5, randomArray({t, {3, 5, 5}}, 5), b1);  // batch in the middle
    agrees(mm, {none, -1}, rt, 6, a1, randomArray({t, {5, 2, 6}}, 6)); // batch last
    agrees(mm, {none, 2}, rt, 6, a1, randomArray({t, {5, 1, 6}}, 7));  // matrix-vector
    agrees(mmTa, {0, none}, rt, 4, randomArray({t, {4, 5, 3}}, 8), b1);
    agrees(mmTb, {none, 0}, rt, 4, a1, randomArray({t, {4, 2, 5}}, 9));
    agrees(mmTab, {none, 1}, rt, 4, randomArray({t, {5, 3}}, 10), randomArray({t, {2, 4, 5}}, 11));
    agrees(mmTab, {2, none}, rt, 4, randomArray({t, {5, 3, 4}}, 12), randomArray({t, {2, 5}}, 13));
    // Per-example rank 3: leading axes of the op's own.
    const Array a3 = randomArray({t, {2, 3, 5}}, 14), b3 = randomArray({t, {2, 5, 4}}, 15);
    agrees(mm, {0, none}, rt, 3, randomArray({t, {3, 2, 3, 5}}, 16), b3);
    agrees(mm, {none, 0}, rt, 3, a3, randomArray({t, {3, 2, 5, 4}}, 17));
    agrees(mm, {none, 1}, rt, 3, a3, randomArray({t, {2, 3, 5, 1}}, 18));
    agrees(mmTa, {0, none}, rt, 3, randomArray({t, {3, 2, 5, 3}}, 19), b3);
    agrees(mm, {3, 0}, rt, 3, randomArray({t, {2, 3, 5, 3}}, 20), randomArray({t, {3, 2, 5, 4}}, 21));
    // Folds that move the batch past the op's own leading axes (transposes at both ends).
    const Array wide = randomArray({t, {2, 8, 8}}, 24);
    agrees(mm, {0, none}, rt, 3, randomArray({t, {3, 2, 1, 8}}, 25), wide);
    agrees(mm, {none, 0}, rt, 3, wide, randomArray({t, {3, 2, 8, 1}}, 26));
    agrees(mmTa, {1, none}, rt, 3, randomArray({t, {2, 3, 8, 2}}, 27), wide);
    agrees(mmTab, {none, 0}, rt, 3, wide, randomArray({t, {3, 2, 2, 8}}, 28));
    agrees(mmTa, {none, 0}, rt, 4, randomArray({t, {5, 3}}, 33), randomArray({t, {4, 5, 2}}, 34));
    // Nested: the outer vmap batches a, the inner one b.
    auto nested = [](const Tensor& a, const Tensor& b) {
      return V{vmap([](const Tensor& a1, const Tensor& b1) { return matmul(a1, b1); }, {.in_axes = {none, 0}})(a, b)};
    };
    {
      agrees(nested, {0, none}, rt, 3, randomArray({t, {3, 4, 5}}, 35), randomArray({t, {2, 5, 6}}, 36));
    }
    // transpose_a with a fold (a copied once), and batches of one.
    agrees(mmTa, {0, none}, rt, 4, randomArray({t, {4, 5, 3}}, 29), randomArray({t, {5, 20}}, 30));
    agrees(mm, {0, none}, rt, 1, randomArray({t, {1, 3, 5}}, 31), b1);
    agrees(mm, {none, 0}, rt, 1, a1, randomArray({t, {1, 5, 2}}, 32));
    // A small shared a against a larger batched b with leading axes: the
    // transposes would copy more than broadcasting a, so the batched matmul.
    agrees(mm, {none, 0}, rt, 3, randomArray({t, {4, 2, 2}}, 22), randomArray({t, {3, 4, 2, 3}}, 23));
  }
}

TEST_CASE("vmap matmul folds instead of broadcasting the unbatched operand") {
  auto mm = [](const Tensor& a, const Tensor& b) { return V{matmul(a, b)}; };
  // Matrix-vector products of a shared matrix: one [B, K] x [M, K]ᵀ product, no copies.
  std::string text = opsOf(mm, {none, 0}, Type{DType::f32, {6, 5}}, Type{DType::f32, {8, 5, 1}});
  CHECK(text.find("broadcast_to") == std::string::npos);
  CHECK(text.find("transpose(") == std::string::npos);
  CHECK(text.find("matmul(") != std::string::npos);
  CHECK(text.find(": f32[8,6]") != std::string::npos);
  // Left only: the rows.
  text = opsOf(mm, {0, none}, Type{DType::f32, {8, 1, 5}}, Type{DType::f32, {5, 6}});
  CHECK(text.find("broadcast_to") == std::string::npos);
  CHECK(text.find("transpose(") == std::string::npos);
  // Right only with several columns: transposes, still no broadcast of a.
  text = opsOf(mm, {none, 0}, Type{DType::f32, {6, 20}}, Type{DType::f32, {8, 20, 3}});
  CHECK(text.find("broadcast_to") == std::string::npos);
  CHECK(text.find(": f32[24,6]") != std::string::npos);
}

TEST_CASE("vmap forms: solves fold into rows, convs into images, channels or groups, pools get a window of 1") {
  // One right-hand side per example against a shared triangle: one solve of [8, 5] rows, no copy.
  auto solve = [](const Tensor& a, const Tensor& b) { return V{linalg::triangular_solve(a, b, {.lower = true, .left_side = true})}; };
  std::string text = opsOf(solve, {none, 0}, Type{DType::f64, {5, 5}}, Type{DType::f64, {8, 5, 1}});
  CHECK(text.find("broadcast_to") == std::string::npos);
  CHECK(text.find("transpose(") == std::string::npos);
  CHECK(text.find("left_side = false") != std::string::npos);
  CHECK(text.find(": f64[8,5]") != std::string::npos);
  auto cv = [](const Tensor& x, const Tensor& k) { return V{conv(x, k, {.feature_group_count = 2})}; };
  const Type x{DType::f32, {1, 4, 6, 6}}, k{DType::f32, {6, 2, 3, 3}}, xs{DType::f32, {5, 1, 4, 6, 6}}, ks{DType::f32, {5, 6, 2, 3, 3}};
  text = opsOf(cv, {0, none}, xs, k); // the examples' images side by side
  CHECK(text.find("broadcast_to") == std::string::npos);
  CHECK(text.find("f32[5,6,4,4]") != std::string::npos);
  text = opsOf(cv, {none, 0}, x, ks); // the examples' kernels as output channels
  CHECK(text.find("broadcast_to") == std::string::npos);
  CHECK(text.find("f32[1,30,4,4]") != std::string::npos);
  text = opsOf(cv, {0, 0}, xs, ks); // the examples as groups
  CHECK(text.find("broadcast_to") == std::string::npos);
  CHECK(text.find("feature_group_count = 10") != std::string::npos);
  auto pool = [](const Tensor& x) { return V{reduce_window_max(x, {2, 2}, {.strides = {2, 2}})}; };
  text = opsOf(pool, {0}, Type{DType::f32, {3, 4, 4}});
  CHECK(text.find("window = [1, 2, 2]") != std::string::npos);
  CHECK(text.find("padding = [0, 0, 0, 0, 0, 0]") != std::string::npos);
}

TEST_CASE("vmap tril and triu") {
  for (DType t : {DType::f32, DType::f64}) {
    auto f = [](const Tensor& x) { return V{tril(x, -1), triu(x, 1), tril(x)}; };
    agrees(f, {0}, 0, 3, randomArray({t, {3, 4, 4}}, 1));
    agrees(f, {1}, 0, 3, randomArray({t, {4, 3, 5}}, 2));
    agrees(f, {-1}, 0, 3, randomArray({t, {2, 4, 5, 3}}, 3));
  }
}

namespace {
/// A symmetric positive definite matrix from any square a: a aᵀ + n I.
Tensor spd(const Tensor& a) {
  const int64_t n = a.shape().back();
  return matmul(a, a, {.transpose_b = true}) + linalg::diag(full({n}, static_cast<double>(n), a.dtype()));
}
} // namespace

TEST_CASE("vmap cholesky, triangular_solve and lu") {
  for (DType t : {DType::f32, DType::f64}) {
    INFO(name_of(t));
    const double rt = t == DType::f32 ? 1e-4 : 1e-10;
    auto chol = [](const Tensor& a) { return V{linalg::cholesky(spd(a), false)}; };
    agrees(chol, {0}, rt, 3, randomArray({t, {3, 4, 4}}, 1));
    agrees(chol, {2}, rt, 3, randomArray({t, {2, 4, 3, 4}}, 2)); // per-example batch of 2, batch axis inside
    const Array l = randomArray({t, {5, 5}}, 3), ls = randomArray({t, {4, 5, 5}}, 4);
    // A well-conditioned triangle: the diagonal pushed away from 0.
    auto tri = [](const Tensor& a) { return a + linalg::diag(full({a.shape().back()}, 4.0, a.dtype())); };
    for (bool left : {true, false})
      for (bool lower : {true, false})
        for (bool trans : {true, false})
          for (bool unit : {false, true}) {
            INFO("left " << left << " lower " << lower << " transpose " << trans << " unit " << unit);
            const linalg::TriangularSolveOptions o{.lower = lower, .left_side = left, .transpose_a = trans, .unit_diagonal = unit};
            auto solve = [&](const Tensor& a, const Tensor& b) { return V{linalg::triangular_solve(tri(a), b, o)}; };
            const Shape b1 = left ? Shape{5, 1} : Shape{1, 5}, b3 = left ? Shape{5, 3} : Shape{3, 5};
            auto batched = [&](const Shape& s, int64_t at) {
              Shape r = s;
              r.insert(r.begin() + at, 4);
              return r;
            };
            agrees(solve, {none, 0}, rt, 4, l, randomArray({t, batched(b1, 0)}, 5)); // one right-hand side: reshapes
            agrees(solve, {none, 1}, rt, 4, l, randomArray({t, batched(b3, 1)}, 6));
            agrees(solve, {0, none}, rt, 4, ls, randomArray({t, b3}, 7));
            agrees(solve, {0, -1}, rt, 4, ls, randomArray({t, batched(b3, 2)}, 8));
          }
    // Per-example leading axes, only b batched.
    auto solve3 = [](const Tensor& a, const Tensor& b) {
      return V{linalg::triangular_solve(a + linalg::diag(full({3}, 4.0, a.dtype())), b, {.lower = true, .left_side = true})};
    };
    agrees(solve3, {none, 0}, rt, 4, randomArray({t, {2, 3, 3}}, 9), randomArray({t, {4, 2, 3, 2}}, 10));
    auto lu = [](const Tensor& a) {
      auto r = linalg::lu(a);
      return V{r.lu, r.pivots, r.permutation};
    };
    agrees(lu, {0}, rt, 3, randomArray({t, {3, 5, 5}}, 11));
    agrees(lu, {1}, rt, 3, randomArray({t, {2, 3, 4, 4}}, 12));
  }
}

TEST_CASE("vmap qr, eigh and svd") {
  for (DType t : {DType::f32, DType::f64}) {
    INFO(name_of(t));
    const double rt = t == DType::f32 ? 1e-3 : 1e-9;
    auto qr = [](const Tensor& a) {
      auto r = linalg::qr(a);
      return V{r.q, r.r};
    };
    auto eigh = [](const Tensor& a) {
      auto r = linalg::eigh(a);
      return V{r.eigenvalues, r.eigenvectors};
    };
    auto svd = [](const Tensor& a) {
      auto r = linalg::svd(a);
      return V{r.u, r.s, r.vt};
    };
    agrees(qr, {0}, rt, 3, randomArray({t, {3, 5, 3}}, 1));
    agrees(qr, {-1}, rt, 3, randomArray({t, {3, 5, 3}}, 2));
    agrees(eigh, {0}, rt, 3, randomArray({t, {3, 4, 4}}, 3));
    agrees(eigh, {1}, rt, 2, randomArray({t, {2, 2, 4, 4}}, 4));
    agrees(svd, {0}, rt, 3, randomArray({t, {3, 4, 3}}, 5));
    agrees(svd, {2}, rt, 3, randomArray({t, {3, 4, 3}}, 6));
  }
}

TEST_CASE("vmap conv: batched input, kernel, or both; groups, strides, padding and dilation") {
  for (DType t : {DType::f32, DType::f64}) {
    INFO(name_of(t));
    const double rt = tol(t);
    for (int64_t groups : {1, 2}) {
      INFO("groups " << groups);
      const ConvOptions o{.strides = {2, 1}, .padding = {{1, 0}, {1, 2}}, .lhs_dilation = {1, 2}, .rhs_dilation = {2, 1},
                          .feature_group_count = groups};
      auto f = [&](const Tensor& x, const Tensor& k) { return V{conv(x, k, o)}; };
      // x [N=2, C=4, 6, 5], kernel [O=6, C/G, 3, 2]
      const Array x = randomArray({t, {2, 4, 6, 5}}, 1), k = randomArray({t, {6, 4 / groups, 3, 2}}, 2);
      const Array xs = randomArray({t, {3, 2, 4, 6, 5}}, 3), ks = randomArray({t, {3, 6, 4 / groups, 3, 2}}, 4);
      agrees(f, {0, none}, rt, 3, xs, k);
      agrees(f, {none, 0}, rt, 3, x, ks);
      agrees(f, {0, 0}, rt, 3, xs, ks);
      agrees(f, {2, -1}, rt, 3, randomArray({t, {2, 4, 3, 6, 5}}, 5), randomArray({t, {6, 4 / groups, 3, 2, 3}}, 6));
      agrees(f, {none, 1}, rt, 3, randomArray({t, {1, 4, 6, 5}}, 7), randomArray({t, {6, 3, 4 / groups, 3, 2}}, 8));
    }
    // Nested: examples of kernels outside, of images inside.
    auto nested = [](const Tensor& x, const Tensor& k) {
      return V{vmap([](const Tensor& x1, const Tensor& k1) { return conv(x1, k1, {.padding = "SAME"}); }, {.in_axes = {0, none}})(x, k)};
    };
    {
      agrees(nested, {none, 0}, rt, 2, randomArray({t, {3, 1, 2, 5, 5}}, 13), randomArray({t, {2, 4, 2, 3, 3}}, 14));
    }
    // 1-D, one image per example
    auto f1 = [](const Tensor& x, const Tensor& k) { return V{conv(x, k, {.padding = "SAME"})}; };
    agrees(f1, {0, 0}, rt, 4, randomArray({t, {4, 1, 3, 7}}, 9), randomArray({t, {4, 2, 3, 3}}, 10));
    agrees(f1, {1, none}, rt, 4, randomArray({t, {1, 4, 3, 7}}, 11), randomArray({t, {2, 3, 3}}, 12));
  }
}

TEST_CASE("vmap pooling: reduce_window_sum, reduce_window_max, select_and_scatter_add, select_and_gather_add") {
  for (DType t : {DType::f32, DType::f64}) {
    INFO(name_of(t));
    const WindowOptions o{.strides = {1, 2, 2}, .padding = {{0, 0}, {1, 0}, {0, 1}}};
    const std::vector<int64_t> w{1, 3, 2};
    auto sum = [&](const Tensor& x) { return V{reduce_window_sum(x, w, o)}; };
    auto max = [&](const Tensor& x) { return V{reduce_window_max(x, w, o)}; };
    // x [2, 5, 4] -> windows [2, 2, 2]
    agrees(sum, {0}, tol(t), 3, randomArray({t, {3, 2, 5, 4}}, 1));
    agrees(max, {0}, 0, 3, randomArray({t, {3, 2, 5, 4}}, 2));
    agrees(max, {-1}, 0, 3, randomArray({t, {2, 5, 4, 3}}, 3));
    auto scatter = [&](const Tensor& s, const Tensor& x) { return V{select_and_scatter_add(s, x, w, o)}; };
    auto gather = [&](const Tensor& g, const Tensor& x) { return V{select_and_gather_add(g, x, w, o)}; };
    const Array s = randomArray({t, {2, 2, 2}}, 4), x = randomArray({t, {2, 5, 4}}, 5);
    const Array ss = randomArray({t, {3, 2, 2, 2}}, 6), xs = randomArray({t, {3, 2, 5, 4}}, 7);
    using Axes = std::pair<std::optional<int64_t>, std::optional<int64_t>>;
    for (auto [a0, a1] : std::vector<Axes>{{0, none}, {none, 0}, {0, 0}}) {
      agrees(scatter, {a0, a1}, tol(t), 3, a0 ? ss : s, a1 ? xs : x);
      agrees(gather, {a0, a1}, 0, 3, a0 ? xs : x, a1 ? xs : x);
    }
    agrees(scatter, {1, 2}, tol(t), 3, randomArray({t, {2, 3, 2, 2}}, 8), randomArray({t, {2, 5, 3, 4}}, 9));
  }
}

namespace {
/// A small CNN's loss on one example x [1, 2, 6, 6]: conv 3×3 (2→4, SAME),
/// tanh, 2×2 max pooling with stride 2, avg pooling, a dense layer, squared error.
Tensor cnnLoss(const Tensor& k, const Tensor& w, const Tensor& x) {
  Tensor h = tanh(conv(x, k, {.padding = "SAME"}));        // [1, 4, 6, 6]
  h = max_pool(h, {2, 2});                                   // [1, 4, 3, 3]
  h = avg_pool(h, {1, 1});                                   // reduce_window_sum
  Tensor z = matmul(reshape(h, {1, 36}), w);                 // [1, 3]
  return sum(z * z, {0, 1});
}
} // namespace

TEST_CASE("vmap solve, inv, det, slogdet and their gradients (custom rules on lu's factors)") {
  // A well-conditioned general matrix from any a: a pushed away from singular.
  auto wc = [](const Tensor& a) { return a + linalg::diag(full({a.shape().back()}, 4.0, a.dtype())); };
  for (DType t : {DType::f32, DType::f64}) {
    INFO(name_of(t));
    const double rt = t == DType::f32 ? 1e-3 : 1e-9;
    auto values = [&](const Tensor& a, const Tensor& b) {
      const auto sl = linalg::slogdet(wc(a));
      return V{linalg::solve(wc(a), b), linalg::inv(wc(a)), linalg::det(wc(a)), sl.sign, sl.logabsdet};
    };
    const Array a = randomArray({t, {4, 4}}, 1), as = randomArray({t, {3, 4, 4}}, 2);
    const Array b = randomArray({t, {4, 2}}, 3), bs = randomArray({t, {3, 4, 2}}, 4);
    agrees(values, {0, 0}, rt, 3, as, bs);
    agrees(values, {none, 0}, rt, 3, a, bs);
    agrees(values, {0, none}, rt, 3, as, b);
    auto loss = [&](const Tensor& a, const Tensor& b) {
      return sum(linalg::solve(wc(a), b) * linalg::inv(wc(a))[0][0]) + linalg::det(wc(a)) * 0.01 + linalg::slogdet(wc(a)).logabsdet;
    };
    auto grads = [&](const Tensor& a, const Tensor& b) {
      auto [ga, gb] = grad(loss, argnums<0, 1>)(a, b);
      return V{ga, gb};
    };
    agrees(grads, {0, 0}, rt, 3, as, bs);
    agrees(grads, {none, 0}, rt, 3, a, bs);
    agrees(grads, {0, none}, rt, 3, as, b);
  }
}

TEST_CASE("vmap(grad(f)): per-example gradients of a small CNN and through cholesky and solves") {
  for (DType t : {DType::f32, DType::f64}) {
    INFO(name_of(t));
    const double rt = t == DType::f32 ? 1e-3 : 1e-9;
    const Array k = randomArray({t, {4, 2, 3, 3}}, 1), w = randomArray({t, {36, 3}}, 2);
    const Array xs = randomArray({t, {5, 1, 2, 6, 6}}, 3);
    auto perExample = [](const Tensor& k, const Tensor& w, const Tensor& x) {
      auto [gk, gw] = grad(cnnLoss, argnums<0, 1>)(k, w, x);
      return V{gk, gw};
    };
    agrees(perExample, {none, none, 0}, rt, 5, k, w, xs);
    // Kernels batched too (an ensemble): the grouped conv in both directions.
    agrees(perExample, {0, none, 0}, rt, 5, randomArray({t, {5, 4, 2, 3, 3}}, 4), w, xs);

    // log det and a solve through cholesky: loss(a, b) = sum(log diag L) + sum(x^2), L Lᵀ x = b.
    auto gpLoss = [](const Tensor& a, const Tensor& b) {
      const Tensor l = linalg::cholesky(spd(a), false);
      const Tensor y = linalg::triangular_solve(l, b, {.lower = true, .left_side = true});
      const Tensor x = linalg::triangular_solve(l, y, {.lower = true, .left_side = true, .transpose_a = true});
      return sum(log(linalg::diagonal(l)), {0}) + sum(x * x, {0, 1});
    };
    auto grads = [&](const Tensor& a, const Tensor& b) {
      auto [ga, gb] = grad(gpLoss, argnums<0, 1>)(a, b);
      return V{ga, gb};
    };
    const Array a = randomArray({t, {4, 4}}, 5), as = randomArray({t, {3, 4, 4}}, 6);
    const Array b = randomArray({t, {4, 1}}, 7), bs = randomArray({t, {3, 4, 1}}, 8);
    agrees(grads, {0, 0}, rt, 3, as, bs);
    agrees(grads, {none, 0}, rt, 3, a, bs);
    agrees(grads, {0, none}, rt, 3, as, b);
  }
}

// The measurement behind matmul's rule for a batched right operand (the
// comment at batchMatmul in lib/ops/Linalg.cpp): 256 examples of W x with
// W [256, 784] shared, as vmap forms them, against the other exact forms
// written out. Timing, not a check: skipped unless asked for
// (adjit_tests -tc='vmap matmul forms*' --no-skip).
TEST_CASE("vmap matmul forms: timing" * doctest::skip()) {
  for (int64_t n : {1, 16}) {
    const int64_t B = 256, M = 256, K = 784;
    const Array W = randomArray({DType::f32, {M, K}}, 1), X = randomArray({DType::f32, {B, K, n}}, 2);
    auto rule = jit([](const Tensor& w, const Tensor& x) { return vmap([](const Tensor& w1, const Tensor& x1) { return matmul(w1, x1); },
                                                                       {.in_axes = {none, 0}})(w, x); });
    auto broadcast = jit([&](const Tensor& w, const Tensor& x) { return matmul(broadcast_to(w, {B, M, K}), x); });
    auto intoN = jit([&](const Tensor& w, const Tensor& x) { // a [K, B·n] right operand, the result transposed back
      const Tensor y = matmul(w, reshape(transpose(x, {1, 0, 2}), {K, B * n}));
      return transpose(reshape(y, {M, B, n}), {1, 0, 2});
    });
    auto time = [&](auto& f) {
      std::vector<double> ts;
      (void)f(W, X);
      for (int i = 0; i < 20; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        (void)f(W, X);
        ts.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(ts.begin(), ts.end());
      return ts[ts.size() / 2];
    };
    const Array r1 = rule(W, X), r2 = broadcast(W, X), r3 = intoN(W, X);
    ADJIT_CHECK_CLOSE(r1, r2, 1e-4);
    ADJIT_CHECK_CLOSE(r3, r2, 1e-4);
    MESSAGE("n = " << n << ": rule (rows of the transpose) " << time(rule) << " us, broadcast W (batched matmul) "
                   << time(broadcast) << " us, fold into N " << time(intoN) << " us");
  }
}

// conv with both operands batched becomes one grouped conv (B·G groups):
// timed against a loop of per-example jit calls and against the same
// products with one shared kernel (the batch folded into the images).
// Timing, not a check: adjit_tests -tc='vmap conv forms*' --no-skip.
TEST_CASE("vmap conv forms: timing" * doctest::skip()) {
  const int64_t B = 64;
  const Array xs = randomArray({DType::f32, {B, 1, 16, 32, 32}}, 1), ks = randomArray({DType::f32, {B, 16, 16, 3, 3}}, 2);
  auto f = [](const Tensor& x, const Tensor& k) { return conv(x, k, {.padding = "SAME"}); };
  auto both = vmap(f);
  auto shared = vmap(f, {.in_axes = {0, none}});
  auto one = jit(f);
  const Array k0 = exampleOf(ks, 0, 0);
  auto time = [&](auto&& run) {
    std::vector<double> ts;
    run();
    for (int i = 0; i < 5; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      run();
      ts.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
  };
  const double tBoth = time([&] { (void)both(xs, ks); });
  const double tShared = time([&] { (void)shared(xs, k0); });
  const double tLoop = time([&] {
    for (int64_t b = 0; b < B; ++b) (void)one(exampleOf(xs, 0, b), exampleOf(ks, 0, b));
  });
  MESSAGE("64 examples of conv 16->16 3x3 on 32x32: grouped (both batched) " << tBoth << " ms, loop of jit " << tLoop
                                                                             << " ms, shared kernel (images) " << tShared << " ms");
}
