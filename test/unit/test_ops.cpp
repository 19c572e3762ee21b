// test/unit/test_ops.cpp — every op checked three ways (hand-computed values,
// interpreter, JIT at -O2 and -O0), with broadcasting, in f32 and f64.
#include "Check.h"

#include "ir/OpInfo.h"

using namespace adjit;
using namespace adjit::test;
using V = std::vector<Tensor>;

TEST_CASE("arithmetic with broadcasting") {
  Array a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Array b = f32({10, 20, 30});
  check3([](V x) { return x[0] + x[1]; }, {a, b}, f32({11, 22, 33, 14, 25, 36}, {2, 3}));
  check3([](V x) { return x[0] - x[1]; }, {a, b}, f32({-9, -18, -27, -6, -15, -24}, {2, 3}));
  check3([](V x) { return x[0] * x[1]; }, {a, b}, f32({10, 40, 90, 40, 100, 180}, {2, 3}));
  check3([](V x) { return x[1] / x[0]; }, {a, b}, f32({10, 10, 10, 2.5f, 4, 5}, {2, 3}));
  check3([](V x) { return 2.0 * x[0] - 1; }, {a}, f32({1, 3, 5, 7, 9, 11}, {2, 3}));
  check3([](V x) { return -x[0]; }, {f64({1, -2})}, f64({-1, 2}));
  check3([](V x) { return maximum(x[0], x[1]); }, {f64({1, 5, -3}), f64({2, 4, -3})}, f64({2, 5, -3}));
  check3([](V x) { return minimum(x[0], x[1]); }, {f64({1, 5, -3}), f64({2, 4, -3})}, f64({1, 4, -3}));
  check3([](V x) { return pow(x[0], x[1]); }, {f64({2, 9, 4}), f64({3, 0.5, -1})}, f64({8, 3, 0.25}));
}

TEST_CASE("integer arithmetic wraps and divides safely") {
  check3([](V x) { return x[0] + x[1]; }, {i32({1, 2147483647}), i32({2, 1})}, i32({3, -2147483647 - 1}));
  check3([](V x) { return x[0] / x[1]; }, {i32({7, -7, 5, 3}), i32({2, 2, 0, -1})}, i32({3, -3, 0, -3}));
  check3([](V x) { return abs(x[0]) * sign(x[0]); }, {i32({-4, 0, 9})}, i32({-4, 0, 9}));
}

TEST_CASE("unary math in f64 against the C library") {
  std::vector<double> xs = {0.25, 0.5, 1.5, 3.0};
  auto expect = [&](double (*fn)(double)) {
    std::vector<double> r;
    for (double x : xs) r.push_back(fn(x));
    return f64(r);
  };
  Array x = f64(xs);
  check3([](V v) { return exp(v[0]); }, {x}, expect([](double t) { return std::exp(t); }), 1e-12);
  check3([](V v) { return log(v[0]); }, {x}, expect([](double t) { return std::log(t); }), 1e-12);
  check3([](V v) { return log1p(v[0]); }, {x}, expect([](double t) { return std::log1p(t); }), 1e-12);
  check3([](V v) { return expm1(v[0]); }, {x}, expect([](double t) { return std::expm1(t); }), 1e-12);
  check3([](V v) { return sqrt(v[0]); }, {x}, expect([](double t) { return std::sqrt(t); }), 1e-12);
  check3([](V v) { return rsqrt(v[0]); }, {x}, expect([](double t) { return 1 / std::sqrt(t); }), 1e-12);
  check3([](V v) { return sin(v[0]); }, {x}, expect([](double t) { return std::sin(t); }), 1e-12);
  check3([](V v) { return cos(v[0]); }, {x}, expect([](double t) { return std::cos(t); }), 1e-12);
  check3([](V v) { return tanh(v[0]); }, {x}, expect([](double t) { return std::tanh(t); }), 1e-12);
  check3([](V v) { return sigmoid(v[0]); }, {x}, expect([](double t) { return 1 / (1 + std::exp(-t)); }), 1e-12);
  check3([](V v) { return erf(v[0]); }, {x}, expect([](double t) { return std::erf(t); }), 1e-12);
  // atan2 in every quadrant, on the axes, and with a scalar on either side.
  const Array ys = f64({1, 1, -1, -1, 0, 2, 0.5}), xs2 = f64({1, -1, 1, -1, -3, 0, 0.25});
  std::vector<double> want;
  for (int64_t i = 0; i < ys.size(); ++i) want.push_back(std::atan2(ys.at(i), xs2.at(i)));
  check3([](V v) { return atan2(v[0], v[1]); }, {ys, xs2}, f64(want), 1e-12);
  check3([](V v) { return atan2(v[0], 1.0) + atan2(1.0, v[0]); }, {f64({0.5})},
         f64({std::atan2(0.5, 1.0) + std::atan2(1.0, 0.5)}), 1e-12);
}

TEST_CASE("unary math in f32, vectorised over many elements") {
  std::vector<float> xs;
  for (int i = 0; i < 1000; ++i) xs.push_back(-5.0f + 0.01f * static_cast<float>(i));
  auto expect = [&](float (*fn)(float)) {
    std::vector<float> r;
    for (float x : xs) r.push_back(fn(x));
    return f32(r);
  };
  Array x = f32(xs);
  check3([](V v) { return exp(v[0]); }, {x}, expect([](float t) { return std::exp(t); }), 1e-5);
  check3([](V v) { return tanh(v[0]); }, {x}, expect([](float t) { return std::tanh(t); }), 1e-5);
  check3([](V v) { return erf(v[0]); }, {x}, expect([](float t) { return std::erf(t); }), 1e-5);
  check3([](V v) { return atan2(v[0], ones_like(v[0]) * 0.5f); }, {x},
         expect([](float t) { return std::atan2(t, 0.5f); }), 1e-5);
  check3([](V v) { return log1p(exp(v[0])); }, {x}, expect([](float t) { return std::log1p(std::exp(t)); }), 1e-5);
  check3([](V v) { return expm1(v[0]) + sin(v[0]) * cos(v[0]); }, {x},
         expect([](float t) { return std::expm1(t) + std::sin(t) * std::cos(t); }), 1e-5);
  check3([](V v) { return log(abs(v[0]) + 1); }, {x}, expect([](float t) { return std::log(std::fabs(t) + 1); }), 1e-5);
  check3([](V v) { return pow(abs(v[0]), ones_like(v[0]) * 1.5); }, {x},
         expect([](float t) { return std::pow(std::fabs(t), 1.5f); }), 1e-5);
}

TEST_CASE("rounding and sign") {
  check3([](V v) { return floor(v[0]); }, {f32({-1.5f, 0, 2.5f})}, f32({-2, 0, 2}));
  check3([](V v) { return abs(v[0]); }, {f32({-1.5f, 0, 2.5f})}, f32({1.5f, 0, 2.5f}));
  check3([](V v) { return sign(v[0]); }, {f32({-1.5f, 0, 2.5f})}, f32({-1, 0, 1}));
}

TEST_CASE("comparisons, logic and where") {
  Array a = f32({1, 2, 3}), b = f32({3, 2, 1});
  check3([](V v) { return v[0] < v[1]; }, {a, b}, i1({true, false, false}));
  check3([](V v) { return v[0] <= v[1]; }, {a, b}, i1({true, true, false}));
  check3([](V v) { return v[0] > v[1]; }, {a, b}, i1({false, false, true}));
  check3([](V v) { return v[0] >= v[1]; }, {a, b}, i1({false, true, true}));
  check3([](V v) { return v[0] == v[1]; }, {a, b}, i1({false, true, false}));
  check3([](V v) { return v[0] != v[1]; }, {a, b}, i1({true, false, true}));
  check3([](V v) { return logical_and(v[0] < v[1], v[0] > 0); }, {a, b}, i1({true, false, false}));
  check3([](V v) { return logical_or(v[0] < v[1], v[0] > 2); }, {a, b}, i1({true, false, true}));
  check3([](V v) { return !(v[0] < v[1]); }, {a, b}, i1({false, true, true}));
  check3([](V v) { return where(v[0] < v[1], v[0], v[1]); }, {a, b}, f32({1, 2, 1}));
  check3([](V v) { return where(v[0] > 1.5, v[0], zeros_like(v[0])); }, {a}, f32({0, 2, 3}));
}

TEST_CASE("cast") {
  check3([](V v) { return cast(v[0], DType::i32); }, {f32({1.7f, -2.5f, 1e20f, NAN})}, i32({1, -2, 2147483647, 0}));
  check3([](V v) { return cast(v[0], DType::f64); }, {i32({3, -4})}, f64({3, -4}));
  check3([](V v) { return cast(cast(v[0], DType::i1), DType::f32); }, {f32({0, 2, -0.5f})}, f32({0, 1, 1}));
}

TEST_CASE("constant, iota and full") {
  check3([](V v) { return v[0] + constant(Array(std::vector<float>{1, 2, 3})); }, {f32({1, 1, 1})}, f32({2, 3, 4}));
  check3([](V v) { return v[0] + cast(iota({2, 3}, 1), DType::f32); }, {f32({0, 0, 0, 10, 10, 10}, {2, 3})},
         f32({0, 1, 2, 10, 11, 12}, {2, 3}));
  check3([](V v) { return v[0] * cast(iota({2, 3}, 0, DType::i64), DType::f32); }, {f32({1, 1, 1, 1, 1, 1}, {2, 3})},
         f32({0, 0, 0, 1, 1, 1}, {2, 3}));
}

TEST_CASE("shape ops") {
  Array x = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  check3([](V v) { return reshape(v[0], {3, -1}) * 1; }, {x}, f32({1, 2, 3, 4, 5, 6}, {3, 2}));
  check3([](V v) { return broadcast_to(v[0], {2, 3}) + 0; }, {f32({1, 2, 3})}, f32({1, 2, 3, 1, 2, 3}, {2, 3}));
  check3([](V v) { return transpose(v[0]); }, {x}, f32({1, 4, 2, 5, 3, 6}, {3, 2}));
  check3([](V v) { return exp(transpose(v[0])) * 1; }, {f64({0, 1, 2, 3}, {2, 2})},
         f64({1, std::exp(2.0), std::exp(1.0), std::exp(3.0)}, {2, 2}));
  check3([](V v) { return slice(v[0], {0, 0}, {2, 3}, {1, 2}); }, {x}, f32({1, 3, 4, 6}, {2, 2}));
  check3([](V v) { return concatenate({v[0], v[0] * 10}, 1); }, {x}, f32({1, 2, 3, 10, 20, 30, 4, 5, 6, 40, 50, 60}, {2, 6}));
  check3([](V v) { return stack({v[0], v[1]}, 0); }, {f32({1, 2}), f32({3, 4})}, f32({1, 2, 3, 4}, {2, 2}));
  check3([](V v) { return stack({v[0], v[1]}, 1); }, {f32({1, 2}), f32({3, 4})}, f32({1, 3, 2, 4}, {2, 2}));
  check3([](V v) { return v[0][1]; }, {x}, f32({4, 5, 6}));
  check3([](V v) { return v[0][-1][0] + 0; }, {x}, f32({4}));
}

TEST_CASE("lgamma and digamma: known values, poles, and their derivatives") {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  check3([](V v) { return lgamma(v[0]); }, {f64({0.5, 10, -0.5, 1, 0, -2})},
         f64({0.5723649429247001, 12.801827480081469, 1.2655121234846454, 0, inf, inf}), 1e-14);
  check3([](V v) { return digamma(v[0]); }, {f64({1, 0.5, 10, -0.5, 100, 1e-3, 0, -3})},
         f64({-0.5772156649015329, -1.9635100260214235, 2.251752589066721, 0.03648997397857652, 4.600161852738087,
              -1000.5755719318305, nan, nan}),
         1e-13);
  check3([](V v) { return digamma(v[0]); }, {f32({1, 0.5, 10})}, f32({-0.5772157f, -1.9635100f, 2.2517526f}), 1e-6);
  // d lgamma = digamma; d digamma = trigamma: pi^2/6 at 1, pi^2/2 at 1/2, pi^2/2 + 4 at -1/2.
  const double pi2 = 9.869604401089358;
  ADJIT_CHECK_CLOSE(grad([](Tensor x) { return sum(lgamma(x)); })(f64({1, 0.5})),
                    f64({-0.5772156649015329, -1.9635100260214235}), 1e-13);
  ADJIT_CHECK_CLOSE(grad([](Tensor x) { return sum(digamma(x)); })(f64({1, 0.5, -0.5, 30})),
                    f64({pi2 / 6, pi2 / 2, pi2 / 2 + 4, 0.03389506035773942}), 1e-12);
}

TEST_CASE("full without a dtype takes the dtype of the tensor it meets") {
  check3([](V v) { return v[0] + full({3}, 2.0); }, {f64({1, 2, 3})}, f64({3, 4, 5}));
  check3([](V v) { return where(v[0] > 1.5, v[0], full({3}, 0.25)); }, {f64({1, 2, 3})}, f64({0.25, 2, 3}));
  check3([](V v) { return clip(v[0], full({}, 0.0), full({}, 2.0)); }, {f64({-1, 1, 3})}, f64({0, 1, 2}));
  check3([](V v) { return full({2}, 3.0) * v[0]; }, {i32({4, -5})}, i32({12, -15}));
  // The ops of several operands meet it too: products, lists of tensors.
  check3([](V v) { return matmul(full({1, 2}, 2.0), reshape(v[0], {2, 1})); }, {f64({1, 2})}, f64({6}, {1, 1}));
  check3([](V v) { return matmul(reshape(v[0], {1, 2}), full({1, 2}, 0.5), {.transpose_b = true}); }, {f64({1, 2})},
         f64({1.5}, {1, 1}));
  check3([](V v) { return einsum("i,i->", {full({2}, 3.0), v[0]}); }, {f64({1, 2})}, f64({9}, {}));
  check3([](V v) { return concatenate({full({1}, 7.0), v[0]}); }, {f64({1, 2})}, f64({7, 1, 2}));
  check3([](V v) { return stack({v[0], full({2}, 7.0)}); }, {f64({1, 2})}, f64({1, 2, 7, 7}, {2, 2}));
  check3([](V v) { return pad_sum({full({1}, 7.0), v[0]}, {3}, {{0}, {1}}); }, {i32({1, 2})}, i32({7, 1, 2}));
  // On its own, or with another weak value, it is f32; with a dtype it is strong.
  check3([](V) { return full({2}, 1.5) + full({2}, 1.0); }, {f64({0})}, f32({2.5, 2.5}));
  CHECK_THROWS_WITH_AS(trace([](Tensor x) { return x + full({3}, 2.0, DType::f32); }, Type{DType::f64, {3}}),
                       doctest::Contains("add: mismatched dtypes f64[3] and f32[3]"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor x) { return x * full({3}, 0.5); }, Type{DType::i32, {3}}),
                       doctest::Contains("mul: full(..., 0.5) without a dtype (a weak f32) meets the integer tensor i32[3]"), Error);
  // Gradients flow through the promoted value as through any constant.
  ADJIT_CHECK_CLOSE(grad([](Tensor x) { return sum(x * full({2}, 3.0)); })(f64({1, 2})), f64({3, 3}), 0);
}

TEST_CASE("scalar operands are one constant per value and one broadcast per shape in a trace") {
  // A sigmoid's VJP computes 1 - y: with a constant and a broadcast per
  // use, an unrolled LSTM's gradient traced 20,000 of them.
  auto loss = [](Tensor x) {
    for (int i = 0; i < 10; ++i) x = sigmoid(x) * 2.0f + x(range(0, 4)) * 2.0f;
    return sum(x);
  };
  const std::string adj = trace([&](Tensor x) { return grad(loss)(x); }, Type{DType::f32, {4}}).str();
  auto count = [&](const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = adj.find(what); at != std::string::npos; at = adj.find(what, at + 1)) ++n;
    return n;
  };
  INFO(adj);
  CHECK(count("dense<f32[], [2]>") == 1);
  CHECK(count("dense<f32[], [1]>") <= 2); // 1 - y, and the seed
  CHECK(count("broadcast_to(") <= 4);
  // full() stays apart: a weak value must not make an equal strong one weak.
  CHECK_THROWS_WITH_AS(trace([](Tensor x) { return x + (full({3}, 2.0) + full({3}, 2.0, DType::f32) * 0.0f + x * 0.0 * 2.0); },
                             Type{DType::f64, {3}}),
                       doctest::Contains("add: mismatched dtypes f32[3] and f64[3]"), Error);
  check3([](V v) { return (v[0] * 2.0 + full({3}, 2.0)) * 2.0; }, {f64({1, 2, 3})}, f64({8, 12, 16}));
}

TEST_CASE("einsum: numpy's specs, contracted into matmuls") {
  const Array a = f64({1, 2, 3, 4, 5, 6}, {2, 3}), b = f64({1, 0, 2, -1, 3, 1}, {3, 2}), v = f64({1, -2, 0.5});
  check3([](V x) { return einsum("ij,jk->ik", {x[0], x[1]}); }, {a, b}, f64({14, 1, 32, 1}, {2, 2}));
  check3([](V x) { return einsum("ij,jk", {x[0], x[1]}); }, {a, b}, f64({14, 1, 32, 1}, {2, 2})); // implicit output
  check3([](V x) { return einsum("ij->ji", {x[0]}); }, {a}, f64({1, 4, 2, 5, 3, 6}, {3, 2}));
  check3([](V x) { return einsum("ij->", {x[0]}); }, {a}, f64({21}, {}));
  check3([](V x) { return einsum("ij,j->i", {x[0], x[1]}); }, {a, v}, f64({-1.5, -3}));
  check3([](V x) { return einsum("i,k->ik", {x[0], x[1]}); }, {v, f64({2, 3})}, f64({2, 3, -4, -6, 1, 1.5}, {3, 2}));
  check3([](V x) { return einsum("ij,ij,j->", {x[0], x[0], x[1]}); }, {a, v}, f64({1 - 8 + 4.5 + 16 - 50 + 18}, {}));
  // A batched product is a matmul after the passes (products under 4096
  // elements stay fused loops), and its gradient is right.
  auto f = [](Tensor p, Tensor q) { return sum(einsum("bij,bjk->bik", {p, q})); };
  const Array p(std::vector<double>(2 * 30 * 40, 0.5), {2, 30, 40}), q(std::vector<double>(2 * 40 * 50, 0.25), {2, 40, 50});
  auto e = [](Tensor p, Tensor q) { return einsum("bij,bjk->bik", {p, q}); };
  CHECK(jit(e).lower(p, q).optimized_adj.find("= matmul(") != std::string::npos);
  // sum(einsum(...)) once crashed the contract pass: a sum of a contraction.
  CHECK((jit(f)(p, q).item<double>() == 15000));
  auto g = grad(f, argnums<0, 1>)(p, q);
  ADJIT_CHECK_CLOSE(std::get<0>(g), Array(std::vector<double>(2 * 30 * 40, 12.5), {2, 30, 40}), 1e-12);
  ADJIT_CHECK_CLOSE(std::get<1>(g), Array(std::vector<double>(2 * 40 * 50, 15), {2, 40, 50}), 1e-12);
  auto bad = [](const char* spec, Type t) {
    return [spec, t] { trace([spec](Tensor x) { return einsum(spec, {x, x}); }, t); };
  };
  const Type m23{DType::f64, {2, 3}};
  CHECK_THROWS_WITH_AS(bad("ij,ji->ij", m23)(), doctest::Contains("einsum \"ij,ji->ij\": 'j' is 2 in operand 1 but 3 before"), Error);
  CHECK_THROWS_WITH_AS(bad("ii,ij", m23)(), doctest::Contains("'i' repeats in operand 0 (diagonals are not supported)"), Error);
  CHECK_THROWS_WITH_AS(bad("ij,ij->k", m23)(), doctest::Contains("output letter 'k' names no input axis"), Error);
  CHECK_THROWS_WITH_AS(bad("i,ij", m23)(), doctest::Contains("operand 0 is f64[2,3], but 'i' names 1 axes"), Error);
  CHECK_THROWS_WITH_AS(bad("...i,...i", m23)(), doctest::Contains("'...' is not supported"), Error);
}

TEST_CASE("softmax and log_softmax: stable for large inputs") {
  check3([](V x) { return softmax(x[0]); }, {f64({1000, 1000, 1000 + std::log(2.0), 0, 0, 0}, {2, 3})},
         f64({0.25, 0.25, 0.5, 1.0 / 3, 1.0 / 3, 1.0 / 3}, {2, 3}), 1e-12);
  check3([](V x) { return log_softmax(x[0], {0}); }, {f64({-1000, 0}, {2, 1})}, f64({-1000, 0}, {2, 1}), 1e-12);
  // d softmax: y * (dy - sum(dy * y)); with dy = e_0 on [0, 0] that is [1/4, -1/4].
  ADJIT_CHECK_CLOSE(grad([](Tensor x) { return softmax(x)[0]; })(f64({0, 0})), f64({0.25, -0.25}), 1e-12);
  ADJIT_CHECK_CLOSE(grad([](Tensor x) { return log_softmax(x)[0]; })(f64({700, 700, 700})),
                    f64({2.0 / 3, -1.0 / 3, -1.0 / 3}), 1e-12);
}

TEST_CASE("clip: numpy's values, TensorFlow's gradient") {
  const double nan = std::nan("");
  check3([](V v) { return clip(v[0], -1.0, 2.0); }, {f64({-3, -1, 0.5, 2, 7, nan})}, f64({-1, -1, 0.5, 2, 2, nan}));
  // Tensor bounds broadcast; lo > hi gives hi, as numpy.
  check3([](V v) { return clip(v[0], v[1], v[2]); }, {f32({0, 5, 9}, {3}), f32({1}, {1}), f32({4, 4, 0}, {3})},
         f32({1, 4, 0}, {3}));
  check3([](V v) { return clip(v[0], 0, 10); }, {i32({-5, 3, 11})}, i32({0, 3, 10}));
  CHECK_THROWS_WITH_AS(trace([](Tensor x) { return clip(x, 0.5, 1); }, Type{DType::i32, {3}}),
                       doctest::Contains("clip: cannot combine the floating-point scalar 0.5 with the integer tensor i32[3]"),
                       Error);
  // d/dx is 1 where x was kept; the bounds get the cotangent where they were taken.
  auto g = grad([](Tensor x, Tensor lo, Tensor hi) { return sum(clip(x, lo, hi) * constant(f64({1, 2, 3, 4}))); },
                argnums<0, 1, 2>);
  const auto grads = g(f64({-2, 0.5, 3, 0.9}), Array(0.0), Array(1.0));
  ADJIT_CHECK_CLOSE(std::get<0>(grads), f64({0, 2, 0, 4}), 0);
  CHECK((std::get<1>(grads).item<double>() == 1));
  CHECK((std::get<2>(grads).item<double>() == 3));
}

TEST_CASE("numpy indexing: integers, all, ranges, newaxis, ellipsis, a Tensor") {
  const Array m = f64({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  check3([](V v) { return v[0](all, 2); }, {m}, f64({2, 6, 10}));
  check3([](V v) { return v[0](-1); }, {m}, f64({8, 9, 10, 11}));
  check3([](V v) { return v[0](1, -1); }, {m}, f64({7}, {}));
  check3([](V v) { return v[0](range(0, {}, 2), range(1, 3)); }, {m}, f64({1, 2, 9, 10}, {2, 2}));
  check3([](V v) { return v[0](all, range({}, {}, -1)); }, {m}, f64({3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8}, {3, 4}));
  check3([](V v) { return v[0](range(-1, 0, -2), all); }, {m}, f64({8, 9, 10, 11}, {1, 4}));
  check3([](V v) { return v[0](range(-100, 100, 3)); }, {m}, f64({0, 1, 2, 3}, {1, 4})); // clipped, as numpy
  check3([](V v) { return v[0](newaxis, all, newaxis, 0); }, {m}, f64({0, 4, 8}, {1, 3, 1}));
  check3([](V v) { return v[0](ellipsis, 1); }, {m}, f64({1, 5, 9}));
  check3([](V v) { return v[0](1, ellipsis); }, {m}, f64({4, 5, 6, 7}));
  check3([](V v) { return v[0](all, v[1]); }, {m, i32({3, 0, -1})}, f64({3, 0, 3, 7, 4, 7, 11, 8, 11}, {3, 3}));
  check3([](V v) { return v[0](range(2, 2)); }, {m}, f64({}, {0, 4}));
  // Gradients flow through every kind of item.
  ADJIT_CHECK_CLOSE(grad([](Tensor x) { return sum(x(range({}, {}, -1), 1)) + x(0, 3) * 10; })(m),
                    f64({0, 1, 0, 10, 0, 1, 0, 0, 0, 1, 0, 0}, {3, 4}), 0);
  auto bad = [](auto f) { return [f] { trace([f](Tensor x) { return f(x); }, Type{DType::f32, {3, 4}}); }; };
  CHECK_THROWS_WITH_AS(bad([](Tensor x) { return x(3, 0); })(),
                       doctest::Contains("index: index 3 is out of range for axis 0 of size 3 (indexing f32[3,4])"), Error);
  CHECK_THROWS_WITH_AS(bad([](Tensor x) { return x(0, 0, 0); })(), doctest::Contains("index: 3 axes named, but the tensor has 2"), Error);
  CHECK_THROWS_WITH_AS(bad([](Tensor x) { return x(ellipsis, 0, ellipsis); })(), doctest::Contains("more than one ellipsis"), Error);
  CHECK_THROWS_WITH_AS(bad([](Tensor x) { return x(range(0, 3, 0)); })(), doctest::Contains("a range step of 0 along axis 0"), Error);
  CHECK_THROWS_WITH_AS(bad([](Tensor x) { return x(x); })(), doctest::Contains("a Tensor index must be i32 or i64, got f32[3,4]"), Error);
}

TEST_CASE("cumsum: along any axis, forwards and back") {
  const Array m = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  check3([](V v) { return cumsum(v[0], 1); }, {m}, f64({1, 3, 6, 4, 9, 15}, {2, 3}));
  check3([](V v) { return cumsum(v[0], 0); }, {m}, f64({1, 2, 3, 5, 7, 9}, {2, 3}));
  check3([](V v) { return cumsum(v[0], -1, true); }, {m}, f64({6, 5, 3, 15, 11, 6}, {2, 3}));
  check3([](V v) { return cumsum(v[0] * 2, 0); }, {i32({1, -2, 3, 2147483647})}, i32({2, -2, 4, 2}));
  ADJIT_CHECK_CLOSE(grad([](Tensor x) { return sum(cumsum(x, 0) * constant(f64({1, 10, 100}))); })(f64({0, 0, 0})),
                    f64({111, 110, 100}), 0);
}

TEST_CASE("cumprod: values, and a gradient exact at zeros") {
  check3([](V v) { return cumprod(v[0], 1); }, {f64({1, 2, 3, 4, 5, 6}, {2, 3})}, f64({1, 2, 6, 4, 20, 120}, {2, 3}));
  check3([](V v) { return cumprod(v[0], 0, true); }, {f64({2, 3, 4})}, f64({24, 12, 4}));
  check3([](V v) { return cumprod(v[0], 0); }, {i32({2, -3, 4})}, i32({2, -6, -24}));
  // d/dx of sum(w * cumprod(x)), written out: dx_i = sum_{j >= i} w_j prod_{k <= j, k != i} x_k.
  auto expected = [](std::vector<double> x, std::vector<double> w) {
    std::vector<double> g(x.size(), 0);
    for (std::size_t i = 0; i < x.size(); ++i)
      for (std::size_t j = i; j < x.size(); ++j) {
        double p = w[j];
        for (std::size_t k = 0; k <= j; ++k)
          if (k != i) p *= x[k];
        g[i] += p;
      }
    return f64(g);
  };
  const std::vector<double> w{1, 2, 3, 4, 5};
  auto g = grad([](Tensor x) { return sum(cumprod(x, 0) * constant(f64({1, 2, 3, 4, 5}))); });
  for (std::vector<double> x : {std::vector<double>{2, 3, 0.5, 4, 1.5}, {2, 0, 3, 4, 5}, {0, 2, 0, 3, 1}, {2, 3, 4, 5, 0}}) {
    CAPTURE(x[1]);
    ADJIT_CHECK_CLOSE(g(f64(x)), expected(x, w), 1e-12);
  }
  // In reverse, and along the second axis of a batch.
  auto gr = grad([](Tensor x) { return sum(cumprod(x, 1, true) * constant(f64({1, 2, 3, 4, 5, 6}, {2, 3}))); });
  std::vector<double> rev = expected({3, 0, 2}, {3, 2, 1}).to_vector<double>(), rev2 = expected({6, 5, 4}, {6, 5, 4}).to_vector<double>();
  ADJIT_CHECK_CLOSE(gr(f64({2, 0, 3, 4, 5, 6}, {2, 3})), f64({rev[2], rev[1], rev[0], rev2[2], rev2[1], rev2[0]}, {2, 3}), 1e-12);
}

TEST_CASE("argmax and argmin: the first extreme, NaN first") {
  const double nan = std::nan("");
  const Array m = f64({3, 7, 7, 1, 9, -2, 9, 0, 5, nan, 5, 8}, {3, 4});
  check3([](V v) { return argmax(v[0], 1); }, {m}, Array(std::vector<int64_t>{1, 0, 1}, {3}));
  check3([](V v) { return argmin(v[0], 1); }, {m}, Array(std::vector<int64_t>{3, 1, 1}, {3}));
  check3([](V v) { return argmax(v[0], 0, DType::i32); }, {m}, Array(std::vector<int32_t>{1, 2, 1, 2}, {4}));
  check3([](V v) { return argmin(v[0], -2, DType::i32); }, {m}, Array(std::vector<int32_t>{0, 2, 2, 1}, {4}));
  // Integers, fused with what computes the operand.
  check3([](V v) { return argmax(v[0] * -1, 0); }, {i32({4, -3, 9, -3})}, Array(std::vector<int64_t>{1}, {}));
  CHECK_THROWS_WITH_AS(trace([](Tensor x) { return argmax(x, 1); }, Type{DType::f32, {3, 0}}),
                       doctest::Contains("argmax: axis 1 of f32[3,0] is empty"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor x) { return argmin(x, 0, DType::f32); }, Type{DType::f32, {3}}),
                       doctest::Contains("argmin: dtype must be i32 or i64, got f32"), Error);
}

TEST_CASE("one_hot: rows of zeros outside the depth") {
  check3([](V v) { return one_hot(v[0], 3); }, {i32({0, 2, -1, 3, 1})},
         f32({1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0}, {5, 3}));
  check3([](V v) { return one_hot(v[0], 2, DType::f64) * 5; }, {Array(std::vector<int64_t>{1, 0, 1, 1}, {2, 2})},
         f64({0, 5, 5, 0, 0, 5, 0, 5}, {2, 2, 2}));
  CHECK_THROWS_WITH_AS(trace([](Tensor x) { return one_hot(x, 3); }, Type{DType::f32, {3}}),
                       doctest::Contains("one_hot: indices must be i32 or i64, got f32[3]"), Error);
  CHECK_THROWS_WITH_AS(trace([](Tensor x) { return one_hot(x, -2); }, Type{DType::i32, {3}}),
                       doctest::Contains("one_hot: depth must not be negative, got -2"), Error);
}

TEST_CASE("tril and triu, with offsets and batches") {
  const Array m = f32({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 4});
  check3([](V v) { return tril(v[0]); }, {m}, f32({1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0}, {3, 4}));
  check3([](V v) { return tril(v[0], -1); }, {m}, f32({0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0}, {3, 4}));
  check3([](V v) { return triu(v[0]); }, {m}, f32({1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12}, {3, 4}));
  check3([](V v) { return triu(v[0], 2); }, {m}, f32({0, 0, 3, 4, 0, 0, 0, 8, 0, 0, 0, 0}, {3, 4}));
  // A batch of 2x2 integer matrices, fused with what follows.
  check3([](V v) { return tril(v[0]) * 2; }, {Array(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2})},
         Array(std::vector<int32_t>{2, 0, 6, 8, 10, 0, 14, 16}, {2, 2, 2}));
  CHECK_THROWS_WITH_AS(trace([](Tensor x) { return tril(x); }, Type{DType::f32, {3}}),
                       doctest::Contains("tril: expected a matrix (or a batch of them), got f32[3]"), Error);
}

TEST_CASE("pad and stop_gradient") {
  check3([](V v) { return pad(v[0], {1, 0}, {0, 2}); }, {f32({1, 2, 3, 4}, {2, 2})},
         f32({0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0}, {3, 4}));
  check3([](V v) { return pad(v[0], {0}, {1}, {2}); }, {f32({1, 2, 3})}, f32({1, 0, 0, 2, 0, 0, 3, 0}));
  check3([](V v) { return pad(v[0] * 2, {2}, {0}); }, {f64({1, 2})}, f64({0, 0, 2, 4}));
  check3([](V v) { return stop_gradient(v[0]) + 1; }, {f32({1, 2})}, f32({2, 3}));
  check3([](V v) { return prevent_gradient(v[0], "not here") + 1; }, {f32({1, 2})}, f32({2, 3}));
}

TEST_CASE("pad_sum: overlapping regions, interior steps, fused addends, errors") {
  // Blocks assembled into a matrix, two of them overlapping at (1, 1).
  check3([](V v) { return pad_sum({v[0], v[1] * 10, v[1]}, {3, 3}, {{0, 0}, {1, 1}, {2, 2}}); },
         {f32({1, 2, 3, 4}, {2, 2}), f32({5}, {1, 1})},
         f32({1, 2, 0, 3, 54, 0, 0, 0, 5}, {3, 3}));
  // Interior steps: every other element, along each axis.
  check3([](V v) { return pad_sum({v[0], v[0] + 1}, {8}, {{0}, {1}}, {{1}, {2}}); }, {f64({1, 2, 3})},
         f64({1, 2, 2, 0, 6, 0, 0, 4}));
  check3([](V v) { return pad_sum({v[0]}, {2, 6}, {{1, 0}}, {{0, 1}}); }, {i32({1, 2, 3}, {1, 3})},
         i32({0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 3, 0}, {2, 6}));
  auto run = [](auto f) { return trace(f, Type{DType::f32, {2}}); };
  CHECK_THROWS_WITH_AS(run([](Tensor x) { return pad_sum({x}, {3}, {{2}}); }),
                       doctest::Contains("pad_sum: operand 0 (f32[2]) placed at 2 with interior 0 does not fit axis 0 of [3]"),
                       Error);
  CHECK_THROWS_WITH_AS(run([](Tensor x) { return pad_sum({x, x}, {3}, {{0}}); }),
                       doctest::Contains("pad_sum: expected one row of low per tensor (2), got 1"), Error);
  CHECK_THROWS_WITH_AS(run([](Tensor x) { return pad_sum({x}, {3}, {{-1}}); }),
                       doctest::Contains("must not be negative, got -1 and 0"), Error);
  CHECK_THROWS_WITH_AS(run([](Tensor x) { return pad_sum({x}, {4, 2}, {{0}}); }),
                       doctest::Contains("tensor 0 is placed by 1 low and 2 interior entries; expected 2"), Error);
}

TEST_CASE("gather and scatter_add") {
  Array x = f32({1, 2, 3, 4, 5, 6}, {3, 2});
  check3([](V v) { return take(v[0], v[1], 0); }, {x, i32({2, 0, -1})}, f32({5, 6, 1, 2, 5, 6}, {3, 2}));
  check3([](V v) { return take(v[0], v[1], 1); }, {x, i32({1}, {1})}, f32({2, 4, 6}, {3, 1}));
  check3([](V v) { return take(v[0], v[1], 0) * 2; }, {f32({1, 2, 3}), i32({7, -9})}, f32({6, 2})); // clamped
  check3([](V v) { return scatter_add(v[0], v[1], v[2], 0); }, {f32({0, 0, 0}), i32({0, 2, 0, 5}), f32({1, 2, 3, 4})},
         f32({4, 0, 2})); // index 5 dropped
  check3([](V v) { return scatter_add(v[0], v[1], v[2], 1); }, {f32({0, 0, 0, 0}, {2, 2}), i32({1, 1}), f32({1, 2, 3, 4}, {2, 2})},
         f32({0, 3, 0, 7}, {2, 2}));
}

TEST_CASE("reductions") {
  Array x = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  check3([](V v) { return sum(v[0]); }, {x}, f32({21}));
  check3([](V v) { return sum(v[0], {0}); }, {x}, f32({5, 7, 9}));
  check3([](V v) { return sum(v[0], {1}, true); }, {x}, f32({6, 15}, {2, 1}));
  check3([](V v) { return max(v[0], {1}); }, {x}, f32({3, 6}));
  check3([](V v) { return min(v[0], {0}); }, {x}, f32({1, 2, 3}));
  check3([](V v) { return prod(v[0], {-1}); }, {x}, f32({6, 120}));
  check3([](V v) { return mean(v[0], {0}); }, {x}, f32({2.5f, 3.5f, 4.5f}));
  check3([](V v) { return max(v[0]); }, {f64({1, NAN, 3})}, f64({NAN}));
  check3([](V v) { return sum(v[0]); }, {i32({1, 2, 3})}, i32({6}));
}

TEST_CASE("logsumexp is stable") {
  check3([](V v) { return logsumexp(v[0]); }, {f64({1000, 1000})}, f64({1000 + std::log(2.0)}), 1e-12);
  check3([](V v) { return logsumexp(v[0], {1}); }, {f64({0, 0, 1, 1}, {2, 2})},
         f64({std::log(2.0), 1 + std::log(2.0)}), 1e-12);
  check3([](V v) { return logsumexp(v[0]); }, {f64({-INFINITY, -INFINITY})}, f64({-INFINITY}));
}

TEST_CASE("matmul and dot") {
  Array a = f32({1, 2, 3, 4, 5, 6}, {2, 3}), b = f32({1, 0, 0, 1, 1, 1}, {3, 2});
  check3([](V v) { return matmul(v[0], v[1]); }, {a, b}, f32({4, 5, 10, 11}, {2, 2}));
  check3([](V v) { return matmul(v[0], v[1]); }, {a, f32({1, 1, 1})}, f32({6, 15}));
  check3([](V v) { return dot(v[0], v[1]); }, {f64({1, 2, 3}), f64({4, 5, 6})}, f64({32}));
  check3([](V v) { return matmul(v[0], v[1]); }, {f32({1, 0, 0, 1, 2, 0, 0, 2}, {2, 2, 2}), f32({1, 2, 3, 4}, {2, 2})},
         f32({1, 2, 3, 4, 2, 4, 6, 8}, {2, 2, 2}));
  check3([](V v) { return sum(tanh(matmul(v[0], v[1]))); }, {f64({0.1, 0.2, 0.3, 0.4}, {2, 2}), f64({1, 0, 0, 1}, {2, 2})},
         f64({std::tanh(0.1) + std::tanh(0.2) + std::tanh(0.3) + std::tanh(0.4)}), 1e-12);
}

namespace {
/// op(A) op(B) in double, as matmul's flags mean it.
std::vector<double> referenceProduct(const std::vector<double>& a, const std::vector<double>& b, int64_t batch, int64_t m,
                                     int64_t n, int64_t k, bool ta, bool tb) {
  std::vector<double> c(static_cast<std::size_t>(batch * m * n), 0.0);
  for (int64_t t = 0; t < batch; ++t)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += a[static_cast<std::size_t>(t * m * k + (ta ? p * m + i : i * k + p))] *
               b[static_cast<std::size_t>(t * k * n + (tb ? j * k + p : p * n + j))];
        c[static_cast<std::size_t>(t * m * n + i * n + j)] = s;
      }
  return c;
}
Array floatArray(const std::vector<double>& v, const Shape& s, DType t) {
  if (t == DType::f64) return Array(v, s);
  return Array(std::vector<float>(v.begin(), v.end()), s);
}
} // namespace

TEST_CASE("matmul: the packed kernel, every transposition, edge tiles and blocks, on each vector unit") {
  struct Case {
    int64_t batch, m, n, k;
  };
  // Small products run unpacked, larger ones packed, and A B^T with a B that
  // stays in cache as dot products (k of 4 vectors or more); with enough work
  // (the last cases, batched) their chunks run on threads. Edges of the
  // micro-tile (m, n not multiples of 6/12 and 8/16/32) and of the dot tile
  // (3×3, 4×4; k not a multiple of the vector: {3, 10, 13, 131}); packed:
  // several k blocks (k > 64), m blocks (m > 504) and n blocks (n > 2048 in
  // f64, > 4096 in f32).
  const std::vector<Case> cases = {{1, 64, 64, 64},  {2, 37, 45, 29},  {3, 13, 33, 70},  {1, 100, 17, 300},
                                   {1, 7, 300, 520}, {1, 37, 1030, 70}, {1, 13, 2100, 70}, {1, 5, 4200, 20},
                                   {1, 520, 130, 600}, {4, 96, 100, 120}, {3, 10, 13, 131}, {25, 20, 20, 1000}};
  std::vector<std::string> cpus = {""};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) cpus.push_back("x86-64-v3");
  cpus.push_back("x86-64"); // SSE2: 128-bit vectors
  for (const std::string& cpu : cpus)
    for (DType dt : {DType::f32, DType::f64})
      for (const Case& c : cases)
        for (int form = 0; form < 4; ++form) {
          const bool ta = form & 1, tb = form & 2;
          // Other targets: a direct, a packed and a dot shape.
          if (cpu != "" && ((c.m != 37 && c.m != 10) || form == 3)) continue;
          CAPTURE(cpu);
          CAPTURE(name_of(dt));
          CAPTURE(c.m);
          CAPTURE(c.n);
          CAPTURE(c.k);
          CAPTURE(form);
          std::vector<double> av(static_cast<std::size_t>(c.batch * c.m * c.k)), bv(static_cast<std::size_t>(c.batch * c.k * c.n));
          for (std::size_t i = 0; i < av.size(); ++i) av[i] = std::sin(0.37 * double(i) + 1);
          for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = std::cos(0.11 * double(i));
          const Shape as = ta ? Shape{c.batch, c.k, c.m} : Shape{c.batch, c.m, c.k};
          const Shape bs = tb ? Shape{c.batch, c.n, c.k} : Shape{c.batch, c.k, c.n};
          const Array a = floatArray(av, as, dt), b = floatArray(bv, bs, dt);
          auto f = [ta, tb](Tensor x, Tensor y) { return matmul(x, y, {.transpose_a = ta, .transpose_b = tb}); };
          const Array got = jit(f, {.cpu = cpu})(a, b);
          const Array want = floatArray(referenceProduct(av, bv, c.batch, c.m, c.n, c.k, ta, tb), {c.batch, c.m, c.n}, dt);
          // |error| <= k eps sum |a||b| <= k eps k for these |a|, |b| <= 1.
          ADJIT_CHECK_CLOSE(got, want, (dt == DType::f32 ? 1.2e-7 : 2.3e-16) * double(c.k) * 4);
          // Every element of C is summed by one chunk in one order.
          if (c.batch * c.m * c.n * c.k >= (1 << 20)) CHECK(bytesOf(jit(f, {.cpu = cpu, .threads = 1})(a, b)) == bytesOf(got));
        }
}

TEST_CASE("matmul: small products over short and long k, every transposition, floats and integers") {
  // Below the packed kernel's size: k up to 8 sums in registers, longer k
  // runs i-k-j; k = 0 is a product of zeros.
  for (int64_t k : {0, 1, 2, 3, 8, 9, 12})
    for (int form = 0; form < 4; ++form) {
      const bool ta = form & 1, tb = form & 2;
      const int64_t batch = 2, m = 3, n = 7;
      CAPTURE(k);
      CAPTURE(form);
      std::vector<double> av(static_cast<std::size_t>(batch * m * k)), bv(static_cast<std::size_t>(batch * k * n));
      for (std::size_t i = 0; i < av.size(); ++i) av[i] = double(int(i * 7 % 11) - 5);
      for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = double(int(i * 5 % 13) - 6);
      const Shape as = ta ? Shape{batch, k, m} : Shape{batch, m, k}, bs = tb ? Shape{batch, n, k} : Shape{batch, k, n};
      const std::vector<double> want = referenceProduct(av, bv, batch, m, n, k, ta, tb);
      auto f = [ta, tb](V v) { return matmul(v[0], v[1], {.transpose_a = ta, .transpose_b = tb}); };
      check3(f, {Array(av, as), Array(bv, bs)}, Array(want, {batch, m, n}), 0);
      auto toInt = [](const std::vector<double>& v) { return std::vector<int32_t>(v.begin(), v.end()); };
      check3(f, {Array(toInt(av), as), Array(toInt(bv), bs)}, Array(toInt(want), {batch, m, n}), 0);
    }
}

TEST_CASE("matmul with transpose flags: values, text and gradients") {
  const Array a = f64({1, 2, 3, 4, 5, 6}, {2, 3}), b = f64({1, -1, 2, 0.5, 3, 1}, {3, 2});
  // a^T [3,2] @ a [2,3]; a @ a^T; b^T @ a^T = (a b)^T.
  check3([](V v) { return matmul(v[0], v[0], {.transpose_a = true}); }, {a},
         f64({17, 22, 27, 22, 29, 36, 27, 36, 45}, {3, 3}));
  check3([](V v) { return matmul(v[0], v[0], {.transpose_b = true}); }, {a}, f64({14, 32, 32, 77}, {2, 2}));
  check3([](V v) { return matmul(v[1], v[0], {.transpose_a = true, .transpose_b = true}); }, {a, b},
         f64({14, 32, 3, 4.5}, {2, 2}));
  const Module m = trace([](Tensor x, Tensor y) { return matmul(x, y, {.transpose_b = true}); }, a.type(), a.type());
  CHECK(m.str().find("matmul(%0, %1) {transpose_b = true} : f64[2,2]") != std::string::npos);
  CHECK_THROWS_WITH_AS(trace([](Tensor x, Tensor y) { return matmul(x, y, {.transpose_b = true}); }, a.type(), b.type()),
                       doctest::Contains("matmul: the contracting axes disagree: axis 1 of f64[2,3] has 3, but axis 1 of f64[3,2] (transpose_b) has 2"),
                       Error);
  // Gradients of every form, against finite differences in f64.
  for (int form = 0; form < 4; ++form) {
    const bool ta = form & 1, tb = form & 2;
    CAPTURE(form);
    auto f = [ta, tb](Tensor x, Tensor y) { return sum(sin(matmul(x, y, {.transpose_a = ta, .transpose_b = tb}))); };
    std::vector<double> xv(12), yv(20);
    for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(double(i));
    for (std::size_t i = 0; i < yv.size(); ++i) yv[i] = std::cos(double(i) * 0.5);
    const Array x(xv, ta ? Shape{4, 3} : Shape{3, 4}), y(yv, tb ? Shape{5, 4} : Shape{4, 5});
    check_grads(f, std::tuple{x, y});
  }
}

TEST_CASE("custom_vjp call sites run their forward function") {
  auto softplus = custom_gradient([](Tensor x) {
    Tensor e = exp(x);
    return std::make_pair(log1p(e), [e](Tensor dy) { return dy * e / (1 + e); });
  });
  check3([softplus](V v) { return softplus(v[0]) * 2; }, {f64({0, 1})}, f64({2 * std::log(2.0), 2 * std::log1p(std::exp(1.0))}), 1e-12);
}

TEST_CASE("custom_jvp call sites run their function") {
  auto softplus = custom_jvp([](Tensor x) { return log1p(exp(x)); },
                             [](const std::tuple<Tensor>& p, const std::tuple<Tensor>& t) {
                               const Tensor& x = std::get<0>(p);
                               return std::make_pair(log1p(exp(x)), std::get<0>(t) * sigmoid(x));
                             });
  check3([softplus](V v) { return softplus(v[0]) * 2; }, {f64({0, 1})}, f64({2 * std::log(2.0), 2 * std::log1p(std::exp(1.0))}), 1e-12);
}

TEST_CASE("host callbacks see the values") {
  static double last = 0;
  check3([](V v) {
    debug_callback([](const std::vector<Array>& a) { last = a[0].at(1); }, {v[0] * 3});
    return v[0] + 1;
  }, {f64({1, 2})}, f64({2, 3}));
  CHECK(last == 6.0);
}

TEST_CASE("calls: a jitted function used inside another trace") {
  auto inner = jit([](Tensor x) { return x * x + 1; }, {.name = "inner"});
  check3([inner](V v) { return inner(v[0]) * 2; }, {f32({1, 2, 3})}, f32({4, 10, 20}));
}

TEST_CASE("loop_limit: the gradient of a bounded while_loop asks whether the loop went on") {
  // x -> 2x until x >= 100: 1 takes 7 trips; d/dx = 2^7.
  auto f = [](Tensor x) {
    return while_loop([](Tensor t) { return t < 100.0; }, [](Tensor t) { return t * 2.0; }, x, {.max_iterations = 7});
  };
  check3([&](V v) { return grad(f)(v[0]); }, {f64({1})}, f64({128}));
  CHECK_THROWS_WITH_AS(check3([&](V v) { return grad(f)(v[0]); }, {f64({0.5})}, f64({256})),
                       doctest::Contains("did not end within max_iterations = 7"), Error);
}


namespace {

/// Row-wise reductions in plain C++ (integers wrap, as adjit's do).
template <class T> std::vector<T> rowReduce(const std::vector<T>& x, int cols, int kind) {
  std::vector<T> out;
  for (std::size_t r = 0; r * cols < x.size(); ++r) {
    T acc = x[r * cols];
    for (int c = 1; c < cols; ++c) {
      const T v = x[r * cols + c];
      if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        if (kind == 0) acc = static_cast<T>(static_cast<U>(acc) + static_cast<U>(v));
        if (kind == 1) acc = static_cast<T>(static_cast<U>(acc) * static_cast<U>(v));
      } else {
        if (kind == 0) acc += v;
        if (kind == 1) acc *= v;
      }
      if (kind == 2) acc = std::max(acc, v);
      if (kind == 3) acc = std::min(acc, v);
    }
    out.push_back(acc);
  }
  return out;
}

template <class T> void checkReductions(const std::vector<T>& values, int cols) {
  const int rows = static_cast<int>(values.size()) / cols;
  const Array x = arrayOf(values, {rows, cols});
  const char* names[] = {"sum", "prod", "max", "min"};
  for (int kind = 0; kind < 4; ++kind) {
    auto f = [kind](Tensor t) {
      return kind == 0 ? sum(t, {1}) : kind == 1 ? prod(t, {1}) : kind == 2 ? max(t, {1}) : min(t, {1});
    };
    INFO(names[kind] << " of " << x.type().str());
    const Array want = arrayOf(rowReduce(values, cols, kind), {rows});
    const Array viaJit = jit(f)(x);
    const Array viaInterpreter = trace(f, x.type()).interpret("f", {x})[0];
    // Float sums and products reassociate in compiled code: a tolerance; the rest is exact.
    const double rtol = std::is_floating_point_v<T> && kind < 2 ? 1e-5 : 0;
    ADJIT_CHECK_CLOSE(viaJit, want, rtol);
    ADJIT_CHECK_CLOSE(viaInterpreter, want, rtol);
  }
}

} // namespace

/// Rows of length n whose reduce_max / reduce_min hinge on NaN, the sign of
/// zero or infinities, with the values expected of them computed here.
template <class T> struct ExtremeRows {
  std::vector<T> data;
  int64_t rows = 0;
  explicit ExtremeRows(int64_t n) {
    const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
    auto row = [&](auto at) {
      for (int64_t i = 0; i < n; ++i) data.push_back(at(i));
      ++rows;
    };
    auto value = [](int64_t i) { return static_cast<T>(std::sin(0.7 * static_cast<double>(i)) * 3); };
    row([&](int64_t) { return -inf; });
    row([&](int64_t i) { return i == n / 2 ? T(0) : T(-0.0); });     // one +0 among -0s
    row([&](int64_t i) { return i == n - 1 ? T(-0.0) : T(0); });     // one -0 among +0s
    row([&](int64_t) { return T(-0.0); });
    row([&](int64_t i) { return i == 0 ? nan : value(i); });
    row([&](int64_t i) { return i == n - 1 ? nan : value(i); });
    row([&](int64_t i) { return i == n / 2 ? -nan : value(i); });      // a NaN with its sign bit set
    row([&](int64_t i) { return i == n / 3 ? inf : -inf; });
    row([&](int64_t i) { return value(i) - T(1e-3); });
  }
  const T* at(int64_t r, int64_t n) const { return data.data() + r * n; }
};

/// max (Max) or min of a row: NaN if any, +0 above -0.
template <bool Max, class T> T extremeOf(const T* x, int64_t n) {
  T best = Max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return std::numeric_limits<T>::quiet_NaN();
    if (x[i] == 0 && best == 0) { // -0 and +0: the max is +0 if either is, the min -0
      if (std::signbit(x[i]) != Max) best = x[i];
    } else if (Max ? x[i] > best : x[i] < best) {
      best = x[i];
    }
  }
  return best;
}

template <class T> void checkExtremes(int64_t n) {
  INFO("n = " << n << ", " << sizeof(T) * 8 << "-bit floats");
  const ExtremeRows<T> rows(n);
  const Array x(rows.data, {rows.rows, n});
  auto f = [](Tensor x) {
    return std::make_tuple(max(x, {1}), min(x, {1}), logsumexp(x, {1}), argmax(x, 1), argmin(x, 1));
  };
  const std::vector<Array> interp = trace(f, x.type()).interpret("f", {x});
  auto [mx, mn, lse, amax, amin] = jit(f)(x);
  auto bits = [](T v) { return std::isnan(v) ? std::string("nan") : bytesOf(Array(std::vector<T>{v}, {})); };
  for (int64_t r = 0; r < rows.rows; ++r) {
    INFO("row " << r);
    const T* row = rows.at(r, n);
    const T wantMax = extremeOf<true>(row, n), wantMin = extremeOf<false>(row, n);
    // NaN, infinities and the sign of zero exactly: compared as bits.
    CHECK(bits(mx.template data<T>()[r]) == bits(wantMax));
    CHECK(bits(mn.template data<T>()[r]) == bits(wantMin));
    CHECK(bits(interp[0].template data<T>()[r]) == bits(wantMax));
    CHECK(bits(interp[1].template data<T>()[r]) == bits(wantMin));
    // logsumexp: NaN with a NaN, -inf for a row of -inf, +inf with a +inf.
    double want = 0;
    if (std::isnan(wantMax) || std::isinf(wantMax)) want = wantMax;
    else {
      for (int64_t i = 0; i < n; ++i) want += std::exp(static_cast<double>(row[i]) - wantMax);
      want = wantMax + std::log(want);
    }
    const double got = lse.template data<T>()[r];
    if (std::isnan(want) || std::isinf(want)) CHECK(bits(static_cast<T>(got)) == bits(static_cast<T>(want)));
    else CHECK(got == doctest::Approx(want).epsilon(1e-5));
    // argmax / argmin: the first NaN, else the first extreme (-0 and +0 tie).
    int64_t first = 0, firstMin = 0;
    for (int64_t i = 0; i < n && !std::isnan(row[first]); ++i) {
      if (std::isnan(row[i]) || row[i] > row[first]) first = i;
    }
    for (int64_t i = 0; i < n && !std::isnan(row[firstMin]); ++i) {
      if (std::isnan(row[i]) || row[i] < row[firstMin]) firstMin = i;
    }
    CHECK(amax.template data<int64_t>()[r] == first);
    CHECK(amin.template data<int64_t>()[r] == firstMin);
  }
}

// reduce_max and reduce_min accumulate ordered integer keys (lib/ops/Reduce.cpp);
// lengths below one vector, at a remainder of every width (4, 8, 16 lanes,
// interleaved by 4) and above; run at every CPU level in CI.
TEST_CASE("max, min, logsumexp, argmax: NaN, -0 below +0 and infinities, at every vector width") {
  for (int64_t n : {1, 7, 67, 1000}) {
    checkExtremes<float>(n);
    checkExtremes<double>(n);
  }
}

TEST_CASE("max and min of one long vector: chunks on threads give the same bits, NaN and -0 included") {
  const int64_t n = 200000;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = -static_cast<float>(i % 1000) - 1;
  auto f = [](Tensor x) { return std::make_tuple(max(x), min(x * -1.0f)); };
  auto one = jit(f, {.threads = 1}), two = jit(f, {.threads = 2});
  auto same = [&](const Array& x, float wantMax, bool nan) {
    auto [a1, b1] = one(x);
    auto [a2, b2] = two(x);
    CHECK(bytesOf(a1) == bytesOf(a2));
    CHECK(bytesOf(b1) == bytesOf(b2));
    if (nan) {
      CHECK(std::isnan(a1.item<float>()));
      CHECK(std::isnan(b1.item<float>()));
    } else {
      CHECK(bytesOf(a1) == bytesOf(Array(std::vector<float>{wantMax}, {})));
      CHECK(bytesOf(b1) == bytesOf(Array(std::vector<float>{-wantMax}, {})));
    }
  };
  same(Array(v, {n}), -1.0f, false);
  v[150000] = -0.0f; // the largest, in a late chunk
  same(Array(v, {n}), -0.0f, false);
  v[3] = 0.0f; // +0 in the first chunk wins over -0 in a later one
  same(Array(v, {n}), 0.0f, false);
  v[190001] = -std::numeric_limits<float>::quiet_NaN();
  same(Array(v, {n}), 0.0f, true);
}

TEST_CASE("every reduction of every dtype agrees with plain C++, at the integer limits too") {
  // Identities held as doubles made min of i64 return INT64_MIN: INT64_MAX is
  // not a double. Rows of 20 also exercise the vectorised loops.
  constexpr int64_t big = std::numeric_limits<int64_t>::max(), small = std::numeric_limits<int64_t>::min();
  std::vector<int64_t> i64s;
  for (int i = 0; i < 20; ++i) i64s.push_back(big - i);       // min: big - 19; max: big
  for (int i = 0; i < 20; ++i) i64s.push_back(small + i);     // max: small + 19; min: small
  for (int i = 0; i < 20; ++i) i64s.push_back(i % 2 ? 3 : -2); // products wrap
  checkReductions(i64s, 20);
  std::vector<int32_t> i32s;
  for (int64_t v : i64s) i32s.push_back(static_cast<int32_t>(v % 100000));
  i32s[0] = std::numeric_limits<int32_t>::max();
  i32s[20] = std::numeric_limits<int32_t>::min();
  checkReductions(i32s, 20);
  std::vector<double> f64s;
  for (int i = 0; i < 60; ++i) f64s.push_back(std::sin(i) * (i % 7 == 0 ? 1e300 : 1.5));
  checkReductions(f64s, 20);
  std::vector<float> f32s;
  for (int i = 0; i < 60; ++i) f32s.push_back(static_cast<float>(std::cos(i) * 1.25));
  checkReductions(f32s, 20);
}
