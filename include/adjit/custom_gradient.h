// adjit/custom_gradient.h — TensorFlow's custom_gradient as a compiler
// feature: a region whose gradient is a user-supplied VJP, kept in the IR as
// one call-site op naming its forward and VJP functions.
#pragma once

#include <adjit/autodiff.h>

namespace adjit {
namespace detail {

using GradFnErased = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
using ForwardBody = std::function<std::vector<Tensor>(std::span<const Tensor>, GradFnErased&)>;

/// Traces the forward body into a function, registers its grad_fn for lazy
/// tracing, and records the custom_vjp call site in the current trace.
std::vector<Tensor> customGradientCall(const std::vector<Tensor>& xs, const ForwardBody& body, std::source_location loc);

/// Number of Tensor leaves of a structure whose size is fixed at compile time (-1 otherwise).
template <class T> struct StaticLeaves : std::integral_constant<int, -1> {};
template <> struct StaticLeaves<Tensor> : std::integral_constant<int, 1> {};
template <class... T> struct StaticLeaves<std::tuple<T...>>
    : std::integral_constant<int, ((StaticLeaves<T>::value < 0) || ...) ? -1 : (StaticLeaves<T>::value + ... + 0)> {};
template <class A, class B> struct StaticLeaves<std::pair<A, B>> : StaticLeaves<std::tuple<A, B>> {};
template <class T, std::size_t N> struct StaticLeaves<std::array<T, N>>
    : std::integral_constant<int, StaticLeaves<T>::value < 0 ? -1 : StaticLeaves<T>::value * static_cast<int>(N)> {};

/// Calls grad_fn with one cotangent per output leaf (as separate arguments when
/// their number is fixed, else as a vector) and flattens what it returns.
template <class Ys, class G> std::vector<Tensor> callGradFn(const G& g, const std::vector<Tensor>& dys) {
  auto flat = [](const auto& r) {
    std::vector<Tensor> out;
    Out<std::decay_t<decltype(r)>>::flatten(r, out);
    return out;
  };
  constexpr int n = StaticLeaves<Ys>::value;
  if constexpr (n >= 0) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      if constexpr (!std::is_invocable_v<const G&, decltype((void)I, Tensor{})...>) {
        throw Error("custom_gradient: grad_fn cannot be called with " + std::to_string(n) + " output cotangent(s)");
        return std::vector<Tensor>{};
      } else {
        return flat(g(dys.at(I)...));
      }
    }(std::make_index_sequence<static_cast<std::size_t>(n)>{});
  } else {
    return flat(g(dys));
  }
}

} // namespace detail

/// The callable returned by custom_gradient.
template <class F> class CustomGradientFn {
public:
  CustomGradientFn(F f, std::source_location loc)
      : f_(std::move(f)), loc_(loc), core_(std::make_shared<detail::JitCore>(JitOptions{.name = "custom_gradient"})) {}

  /// With Tensors inside a trace: records the call site. With Arrays or
  /// scalars: compiled through jit and run (the forward only).
  template <class... Args> auto operator()(const Args&... args) const {
    if constexpr (std::disjunction_v<detail::HasTensor<std::decay_t<Args>>...>) {
      return traced(args...);
    } else {
      auto self = *this;
      return detail::callCompiled(*core_, [self](const auto&... ts) { return self.traced(ts...); }, args...);
    }
  }

  template <class... Args> auto traced(const Args&... args) const {
    using namespace detail;
    using R = std::decay_t<std::invoke_result_t<const F&, tensor_type_t<Args>...>>;
    using Ys = std::decay_t<typename R::first_type>;
    ArgCollector c;
    (In<Args>::visit(args, c), ...);
    std::shared_ptr<Ys> skeleton;
    ForwardBody body = [&](std::span<const Tensor> params, GradFnErased& gradFn) {
      const Tensor* it = params.data();
      std::tuple<tensor_type_t<Args>...> targs{In<Args>::build(args, it)...};
      R r = std::apply(f_, targs);
      skeleton = std::make_shared<Ys>(r.first);
      gradFn = [g = std::move(r.second)](const std::vector<Tensor>& dys) { return callGradFn<Ys>(g, dys); };
      std::vector<Tensor> outs;
      Out<Ys>::flatten(r.first, outs);
      return outs;
    };
    std::vector<Tensor> outs = customGradientCall(c.tensors, body, loc_);
    const Tensor* it = outs.data();
    return OutTensors<Ys>::rebuild(*skeleton, it);
  }

private:
  F f_;
  std::source_location loc_;
  std::shared_ptr<detail::JitCore> core_;
};

/// custom_gradient(f): f(xs...) returns std::pair{ys, grad_fn}; grad_fn(dys...)
/// returns one gradient per flattened input (a Tensor, or a tuple/vector of
/// them). Autodiff never differentiates f's body: it calls grad_fn, traced only
/// when a gradient reaches the call. Tensors of f that grad_fn captures become
/// residuals; tensors f captures from outside are constants for it.
template <class F>
CustomGradientFn<std::decay_t<F>> custom_gradient(F&& f, std::source_location loc = std::source_location::current()) {
  return CustomGradientFn<std::decay_t<F>>(std::forward<F>(f), loc);
}

namespace detail {

/// grad_fn of grad_pass_through: the output cotangents are the input gradients.
struct IdentityGrad {
  std::vector<Tensor> operator()(const std::vector<Tensor>& dys) const { return dys; }
  template <class... T>
    requires(std::is_same_v<T, Tensor> && ...)
  std::vector<Tensor> operator()(const T&... dys) const {
    return {dys...};
  }
};

} // namespace detail

/// grad_pass_through(f): forward is f; the gradient is the identity from
/// outputs to inputs (their flattened types must match), as if f were not
/// there. Useful around non-differentiable updates (an assignment, a moving
/// average): the gradient flows to f's inputs unchanged.
template <class F> auto grad_pass_through(F&& f, std::source_location loc = std::source_location::current()) {
  return custom_gradient(
      [f = std::forward<F>(f)](const auto&... xs) { return std::make_pair(f(xs...), detail::IdentityGrad{}); }, loc);
}

/// recompute_grad(f): the forward keeps only f's inputs for the backward,
/// which runs f again and differentiates it: memory for computation. f takes
/// Tensors and returns one Tensor. The recomputation lives in the VJP
/// function, so no optimisation can merge it with the original forward.
template <class F> auto recompute_grad(F&& f, std::source_location loc = std::source_location::current()) {
  return custom_gradient(
      [f = std::forward<F>(f)](const auto&... xs) {
        auto again = [f, xs...](Tensor dy) {
          auto [y, back] = vjp(f, xs...);
          (void)y;
          return back(dy);
        };
        return std::make_pair(f(xs...), again);
      },
      loc);
}

} // namespace adjit
