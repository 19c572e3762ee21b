// bench/gradbench/descent.h — the gradient-descent solver the `particle` and
// `saddle` evals prescribe (GradBench's cpp/gradbench/gd.hpp, restated), as
// adjit control flow, so that a descent can run inside a traced function and
// be differentiated, and the forward- and reverse-mode gradients the evals
// combine.
//
// argmin(f, g, x0): eta = 1e-5, i = 0, fx = f(x0), gx = g(x0); then repeat:
// stop with x if |gx| <= 1e-5; else if i == 10 double eta and reset i; else
// x' = x - eta gx, stop with x if |x - x'| <= 1e-5, take x' (fx, gx at x',
// i + 1) if f(x') < fx, else halve eta and reset i.
#pragma once

#include <adjit/adjit.h>

#include <tuple>

namespace gradbench {

/// The gradient of a scalar function `f` of a vector x by forward mode
/// (`forward`: adjit's jacfwd, one JVP batched over the basis, loops inside f
/// included) or reverse mode (adjit's grad).
template <class F> adjit::Tensor gradientOf(bool forward, const F& f, const adjit::Tensor& x) {
  return forward ? adjit::jacfwd(f)(x) : adjit::grad(f)(x);
}

/// The point where the descent above stops, from x0; `f` returns a scalar,
/// `g` its gradient (a vector like x0). A while_loop: traced once, and
/// differentiable (both modes) when it runs inside a differentiated function.
template <class F, class G> adjit::Tensor argmin(const F& f, const G& g, const adjit::Tensor& x0) {
  using adjit::Tensor;
  using State = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>; // x, f(x), g(x), i, eta
  auto norm = [](const Tensor& v) { return adjit::sqrt(adjit::sum(v * v)); };
  auto running = [&](const State& s) {
    const auto& [x, fx, gx, i, eta] = s;
    Tensor xNext = x - eta * gx;
    return adjit::logical_and(adjit::gt(norm(gx), 1e-5),
                              adjit::logical_or(adjit::eq(i, 10.0), adjit::gt(norm(x - xNext), 1e-5)));
  };
  auto step = [&](const State& s) {
    return adjit::cond(
        adjit::eq(std::get<3>(s), 10.0),
        [](const State& t) {
          const auto& [x, fx, gx, i, eta] = t;
          return State{x, fx, gx, adjit::zeros_like(i), eta * 2.0};
        },
        [&](const State& t) {
          const auto& [x, fx, gx, i, eta] = t;
          Tensor xNext = x - eta * gx;
          Tensor fNext = f(xNext);
          return adjit::cond(
              adjit::lt(fNext, fx),
              [&](const Tensor& xn, const Tensor& fn, const State& u) {
                return State{xn, fn, g(xn), std::get<3>(u) + 1.0, std::get<4>(u)};
              },
              [](const Tensor&, const Tensor&, const State& u) {
                const auto& [x, fx, gx, i, eta] = u;
                return State{x, fx, gx, adjit::zeros_like(i), eta * 0.5};
              },
              xNext, fNext, t);
        },
        s);
  };
  State init{x0, f(x0), g(x0), adjit::full({}, 0.0, adjit::DType::f64), adjit::full({}, 1e-5, adjit::DType::f64)};
  return std::get<0>(adjit::while_loop(running, step, init));
}

/// argmin of -f (the solver's argmax): `g` is f's gradient.
template <class F, class G> adjit::Tensor argmax(const F& f, const G& g, const adjit::Tensor& x0) {
  return argmin([&](const adjit::Tensor& x) { return -f(x); }, [&](const adjit::Tensor& x) { return -g(x); }, x0);
}

} // namespace gradbench
