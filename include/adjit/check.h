// adjit/check.h — checking gradients: check_grads compares reverse- and
// forward-mode derivatives with central finite differences (JAX's check_grads).
#pragma once

#include <adjit/autodiff.h>

#include <array>
#include <random>
#include <string>
#include <vector>

namespace adjit {

/// How check_grads checks.
struct CheckGradsOptions {
  int order = 1;                            ///< 1: the gradient; 2: also the gradient of the VJP; up to 3
  std::vector<std::string> modes = {"rev"}; ///< "rev" (reverse mode, through vjp) and/or "fwd" (forward mode, through jvp)
  double eps = 1e-6;                        ///< the finite-difference step along a random unit-variance direction
  double rtol = 1e-5;                       ///< allowed relative error (of the larger of the two derivatives)
  double atol = 1e-8;                       ///< allowed absolute error on top of rtol
  uint64_t seed = 0;                        ///< seeds the random directions and cotangents
};

namespace detail {
/// f64 normal samples shaped like `t`.
Array randomLike(const Type& t, std::mt19937_64& rng);
/// `a` as f64 (floating arrays; others are returned unchanged).
Array asF64(const Array& a);
/// x + s * v, elementwise, in f64.
Array axpy(const Array& x, double s, const Array& v);
/// The sum of a * b over all elements, in f64.
double dotAll(const Array& a, const Array& b);
/// Validates options; throws adjit::Error for unknown modes or orders.
void checkGradsOptions(const CheckGradsOptions& o, const Location& loc);
/// One comparison of <u, J v> by autodiff and by finite differences; false if
/// outside the tolerance. Tracks the worst relative error seen in `worst`.
struct GradCheckWorst {
  double relative = -1, autodiff = 0, finite = 0;
  std::size_t argument = 0;
  int order = 0;
};
bool compareDirectional(double autodiff, double finite, const CheckGradsOptions& o, std::size_t argument, int order,
                        GradCheckWorst& worst);
/// `mode`: "reverse" or "forward".
[[noreturn]] void throwGradCheck(const GradCheckWorst& worst, const CheckGradsOptions& o, const Location& loc,
                                 const char* mode);

/// (<u, f(x + eps v_i)> - <u, f(x - eps v_i)>) / 2 eps, v_i moving argument i only.
template <class C, std::size_t N, std::size_t... I>
double centralDifference(const C& compiled, const std::array<Array, N>& x, std::size_t i, const Array& v, const Array& u,
                         double eps, std::index_sequence<I...>) {
  std::array<Array, N> plus = x, minus = x;
  plus[i] = axpy(x[i], eps, v);
  minus[i] = axpy(x[i], -eps, v);
  return (dotAll(u, compiled(plus[I]...)) - dotAll(u, compiled(minus[I]...))) / (2 * eps);
}

template <int Level, class F, std::size_t N, std::size_t... I>
void checkReverse(const F& f, const std::array<Array, N>& x, const CheckGradsOptions& o, const Location& loc,
                  std::mt19937_64& rng, std::index_sequence<I...> seq) {
  auto compiled = jit(f, {.name = "check_grads"});
  const Array y = compiled(x[I]...);
  const Array u = randomLike(y.type(), rng);
  auto [y2, back] = vjp(f, x[I]...);
  const std::vector<Array> g = back(u);
  GradCheckWorst worst;
  bool ok = true;
  std::array<Array, N> w;
  for (std::size_t i = 0; i < N; ++i) {
    if (!is_floating(x[i].dtype())) continue;
    const Array v = randomLike(x[i].type(), rng);
    w[i] = randomLike(x[i].type(), rng);
    const double finite = centralDifference(compiled, x, i, v, u, o.eps, seq);
    ok = compareDirectional(dotAll(g.at(i), v), finite, o, i, Level, worst) && ok;
  }
  if (!ok) throwGradCheck(worst, o, loc, "reverse");
  if constexpr (Level < 3) {
    if (o.order > Level) {
      // The next order: the VJP itself, contracted with random weights, as a
      // scalar function of the same arguments.
      auto vjpOf = [f, u, w](const decltype((void)I, Tensor{})&... xs) {
        auto [yy, b] = vjp(f, xs...);
        (void)yy;
        const std::vector<Tensor> gs = b(constant(u));
        Tensor total = full({}, 0, DType::f64);
        for (std::size_t i = 0; i < N; ++i)
          if (is_floating(gs[i].dtype())) total = total + sum(gs[i] * constant(w[i]));
        return total;
      };
      checkReverse<Level + 1>(vjpOf, x, o, loc, rng, seq);
    }
  }
}

/// The forward-mode twin of checkReverse: <u, J v_i> from jvp along each
/// argument's direction v_i; the next order checks the JVP itself,
/// contracted with u, as a scalar function of the same arguments.
template <int Level, class F, std::size_t N, std::size_t... I>
void checkForward(const F& f, const std::array<Array, N>& x, const CheckGradsOptions& o, const Location& loc,
                  std::mt19937_64& rng, std::index_sequence<I...> seq) {
  auto compiled = jit(f, {.name = "check_grads"});
  const Array y = compiled(x[I]...);
  const Array u = randomLike(y.type(), rng);
  GradCheckWorst worst;
  bool ok = true;
  std::array<Array, N> v; // the directions of the next order: every argument moves
  for (std::size_t i = 0; i < N; ++i) v[i] = is_floating(x[i].dtype()) ? randomLike(x[i].type(), rng) : Array(x[i].type());
  for (std::size_t i = 0; i < N; ++i) {
    if (!is_floating(x[i].dtype())) continue;
    std::array<Array, N> t;
    for (std::size_t j = 0; j < N; ++j) t[j] = j == i ? v[j] : Array(x[j].type());
    const Array dy = jvp(f, std::tuple{x[I]...}, std::tuple{t[I]...}).second;
    const double finite = centralDifference(compiled, x, i, v[i], u, o.eps, seq);
    ok = compareDirectional(dotAll(u, dy), finite, o, i, Level, worst) && ok;
  }
  if (!ok) throwGradCheck(worst, o, loc, "forward");
  if constexpr (Level < 3) {
    if (o.order > Level) {
      auto jvpOf = [f, u, v](const decltype((void)I, Tensor{})&... xs) {
        const Tensor dy = jvp(f, std::tuple{xs...}, std::tuple{constant(v[I])...}).second;
        return sum(dy * constant(u));
      };
      checkForward<Level + 1>(jvpOf, x, o, loc, rng, seq);
    }
  }
}
} // namespace detail

/// Checks f's derivatives against central finite differences along random
/// directions, in f64 (floating arguments are converted), as JAX's
/// check_grads: for each argument, <u, J v> from the VJP (mode "rev") and
/// from the JVP (mode "fwd") against (<u, f(x + eps v)> - <u, f(x - eps v)>)
/// / 2 eps. With order 2 (or 3) the VJP's (JVP's) own derivatives are
/// checked too. f returns one Tensor; `args` are
/// Arrays. A disagreement raises adjit::Error naming the argument, both
/// values and the relative error, at the caller's line.
template <class F, class... A>
void check_grads(const F& f, const std::tuple<A...>& args, CheckGradsOptions o = {},
                 std::source_location loc = std::source_location::current()) {
  static_assert((std::is_same_v<A, Array> && ...), "check_grads: the arguments are Arrays (std::tuple{x, y})");
  const Location where = Location::from(loc);
  detail::checkGradsOptions(o, where);
  using Args = std::array<Array, sizeof...(A)>;
  const Args x = std::apply([](const auto&... a) { return Args{detail::asF64(a)...}; }, args);
  for (const std::string& mode : o.modes) {
    std::mt19937_64 rng(o.seed);
    if (mode == "rev") detail::checkReverse<1>(f, x, o, where, rng, std::index_sequence_for<A...>{});
    else detail::checkForward<1>(f, x, o, where, rng, std::index_sequence_for<A...>{});
  }
}

/// check_grads of a function of one Array.
template <class F>
void check_grads(const F& f, const Array& x, CheckGradsOptions o = {},
                 std::source_location loc = std::source_location::current()) {
  check_grads(f, std::tuple<Array>{x}, std::move(o), loc);
}

} // namespace adjit
