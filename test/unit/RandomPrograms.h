// test/unit/RandomPrograms.h — the random program generator: compositions
// of ops and control flow over f64[4] values, from a seed (test_random_programs,
// test_tiers).
#pragma once

#include <adjit/adjit.h>

#include <array>
#include <random>
#include <vector>

namespace adjit::test {

constexpr int kOpKinds = 28;

/// A value of the pool combined with another by op `kind` (all values are f64[4]).
inline Tensor step(int kind, const Tensor& a, const Tensor& b) {
  switch (kind) {
  case 0: return a + b;
  case 1: return a - b * 0.5;
  case 2: return a * b;
  case 3: return tanh(a);
  case 4: return sin(a) + b;
  case 5: return cos(a) * b;
  case 6: return sigmoid(a - b);
  case 7: return exp(tanh(a));
  case 8: return a / (1.0 + b * b);
  case 9: return maximum(a, b);
  case 10: return broadcast_to(sum(a, {0}, true), {4}) * 0.25 + b; // reduce then broadcast back
  case 11: return log1p(a * a);
  case 12: return sqrt(a * a + 1.0);
  case 13: return where(a > b, a, b * b);
  case 14: return reshape(transpose(reshape(a, {2, 2})), {4}) * b;
  case 15: return reshape(broadcast_to(logsumexp(reshape(a, {2, 2}), {1}, true), {2, 2}), {4}) - b; // row-wise logsumexp
  // Control flow: branches and loops that read outer values.
  case 16: return cond(gt(sum(a), sum(b)), [&](Tensor x) { return x * b; }, [&](Tensor x) { return sin(x) - b; }, a);
  case 17: return fori_loop(0, 3, [&](Tensor, Tensor c) { return tanh(c * 0.9 + b); }, a);
  case 18: { // a scan over the elements of a, stacking each step's carry
    auto [c, ys] = scan([&](Tensor c, Tensor x) { return std::pair{c * 0.5 + broadcast_to(x, {4}), sin(c)}; }, b, a);
    return sum(ys, {0}) + c;
  }
  case 19: // halve until small: the trip count depends on the data (max_iterations bounds it;
           // tanh keeps the fixed point small, so every finite start ends)
    return while_loop([](Tensor c) { return gt(sum(c * c), 0.5); }, [&](Tensor c) { return c * 0.5 + tanh(b) * 0.01; },
                      a * 2.0, {.max_iterations = 40});
  // What random programs compared with PyTorch found wrong (issue 50):
  case 21: { // a product with a transposed operand feeding a switch_case
    Tensor m = matmul(reshape(a * a, {2, 2}), reshape(b, {2, 2}), {.transpose_b = true});
    Tensor k = cast(gt(sum(a), sum(b)), DType::i32);
    Tensor r = switch_case(k, std::tuple{[](Tensor t) { return t; }, [](Tensor t) { return sin(t); }}, m);
    return reshape(matmul(r, reshape(a, {2, 2}), {.transpose_a = true}), {4});
  }
  case 22: { // a scan whose body multiplies by a captured matrix, transposed
    Tensor w = reshape(b, {2, 2}) * 0.5;
    auto [c, ys] = scan([&](Tensor c, Tensor x) { return std::pair{tanh(matmul(c, w, {.transpose_a = true}) + x), c}; },
                        reshape(a, {2, 2}), full({2, 2, 2}, 0.1, DType::f64));
    return reshape(c, {4}) + reshape(sum(ys, {0}), {4});
  }
  case 23: { // max and min over each axis of a fused transcendental
    Tensor x = sin(reshape(a, {2, 2}) * 1.3 + reshape(b, {2, 2}));
    return reshape(broadcast_to(max(x, {0}, true), {2, 2}) + broadcast_to(min(x, {1}, true), {2, 2}), {4}) +
           broadcast_to(max(tanh(a + b), {0}, true), {4});
  }
  case 24: { // integer exponents of negative bases, a constant exponent captured by a loop body
    Tensor two = full({}, 2.0, DType::f64);
    auto [c, ys] = scan([&](Tensor c, Tensor s) { return std::pair{c, pow(a * s - 0.5, two) + pow(b - 1.0, 3.0) * 0.1}; },
                        full({}, 0.0, DType::f64), full({2}, 1.0, DType::f64));
    return sum(ys, {0}) + c;
  }
  case 25: { // a loop whose carry is a structure: a pair of a tensor and a vector of two
    using C = std::pair<Tensor, std::vector<Tensor>>;
    C out = fori_loop(0, 2, [&](Tensor, const C& c) {
      return C{c.first * 0.5 + c.second[1], {sin(c.second[0]) + b * 0.1, c.first * c.second[0] * 0.3}};
    }, C{a, {b, a * 0.5}});
    return out.first + out.second[0] - out.second[1];
  }
  case 26: // a recompute_grad region (its forward mode differentiates the region)
    return recompute_grad([](Tensor x, Tensor y) { return tanh(x) * y + exp(x * 0.3); })(a, b);
  case 27: { // a while loop with a bound it does not reach (its gradient checks the bound)
    return while_loop([](Tensor c) { return gt(sum(c * c), 0.5); }, [&](Tensor c) { return c * 0.6 + tanh(b) * 0.01; },
                      a * 2.0, {.max_iterations = 80});
  }
  default: { // the same without a bound (a counter ends it): reverse mode keeps a run-time stack
    using S = std::pair<Tensor, Tensor>;
    auto [c, k] = while_loop([](const S& s) { return logical_and(lt(s.second, full({}, 6, DType::i32)), gt(sum(s.first * s.first), 0.5)); },
                             [&](const S& s) { return S{sin(s.first) * 0.7 + b * 0.01, s.second + full({}, 1, DType::i32)}; },
                             S{a * 2.0, full({}, 0, DType::i32)});
    return c;
  }
  }
}

struct Program {
  std::vector<std::array<int, 3>> steps; // kind, operand a, operand b (pool indices)
};

inline Program randomProgram(unsigned seed) {
  std::mt19937 rng(seed);
  Program p;
  int pool = 3;
  int n = 2 + static_cast<int>(rng() % 7);
  for (int i = 0; i < n; ++i) {
    int kind = static_cast<int>(rng() % kOpKinds);
    int a = static_cast<int>(rng() % pool), b = static_cast<int>(rng() % pool);
    p.steps.push_back({kind, a, b});
    ++pool;
  }
  return p;
}

/// The program's value pool on inputs x0, x1 (f64[4]) and s (f64[]).
inline std::vector<Tensor> runProgram(const Program& p, const Tensor& x0, const Tensor& x1, const Tensor& s) {
  std::vector<Tensor> pool = {x0, x1, broadcast_to(s, {4})};
  for (const auto& st : p.steps) pool.push_back(step(st[0], pool[st[1]], pool[st[2]]));
  return pool;
}

/// The program as a scalar function (its last value squared and summed, and
/// its first step's mixed in, so all inputs usually matter); `vector`: its
/// last value (f64[4]) instead.
inline Module traceProgram(const Program& p, bool vector = false) {
  return trace(
      [&](Tensor x0, Tensor x1, Tensor s) {
        const std::vector<Tensor> pool = runProgram(p, x0, x1, s);
        Tensor out = pool.back();
        return vector ? out : sum(out * out) + sum(pool[3]) * 0.1;
      },
      Type{DType::f64, {4}}, Type{DType::f64, {4}}, Type{DType::f64, {}});
}

} // namespace adjit::test
