// adjit/custom_gradient.h — TensorFlow's custom_gradient as a compiler
// feature: a region whose gradient is a user-supplied VJP, kept in the IR as
// one call-site op naming its forward and VJP functions.
#pragma once

#include <adjit/autodiff.h>
#include <adjit/variable.h>

namespace adjit {
template <class F> class CustomGradientFn;

namespace detail {

/// What a grad_fn returned: gradients for the inputs and, if it takes
/// `variables`, for those; nullopt where it returned std::nullopt (None).
struct GradResult {
  std::vector<std::optional<Tensor>> inputs, variables;
};

/// Flattens a grad_fn result: a structure whose leaves are Tensors or
/// std::optional<Tensor> (std::nullopt: no gradient, TensorFlow's None).
template <class R> std::vector<std::optional<Tensor>> flattenGrads(const R& r) {
  std::vector<std::optional<Tensor>> out;
  tree_for_each(r, [&](const auto& leaf) {
    if constexpr (std::is_same_v<std::decay_t<decltype(leaf)>, std::nullopt_t>) out.emplace_back();
    else out.emplace_back(leaf);
  });
  return out;
}
using GradFnErased = std::function<GradResult(const std::vector<Tensor>&, const std::vector<Variable>&)>;
/// Traces the forward; fills the grad_fn and whether it accepts `variables`.
using ForwardBody = std::function<std::vector<Tensor>(std::span<const Tensor>, GradFnErased&, bool& acceptsVariables)>;

/// Traces the forward body into a function, registers its grad_fn for lazy
/// tracing, and records the custom_vjp call site in the current trace.
/// With `variablesAreConstants` (grad_pass_through), variables the forward
/// reads get no gradient and grad_fn need not take them. With
/// `exactGradient` (recompute_grad), grad_fn is the forward's own derivative:
/// forward mode differentiates the forward instead of transposing grad_fn.
std::vector<Tensor> customGradientCall(const std::vector<Tensor>& xs, const ForwardBody& body, std::source_location loc,
                                       bool variablesAreConstants = false, bool exactGradient = false);

/// The Tensor leaves of a result structure, in order.
template <class R> std::vector<Tensor> flatten(const R& r) {
  std::vector<Tensor> out;
  appendLeaves(r, out);
  return out;
}

template <class G> struct IsCustomGradientFn : std::false_type {};
template <class F> struct IsCustomGradientFn<CustomGradientFn<F>> : std::true_type {
  using Function = F;
};

/// Whether grad_fn can be called with arguments A. A custom_gradient object's
/// call operator accepts any arguments in form (a wrong call is a
/// static_assert in its body, not a substitution failure), so for one the
/// question goes to the function it wraps.
template <class G, class... A> constexpr bool gradFnInvocable() {
  if constexpr (IsCustomGradientFn<G>::value)
    return std::is_invocable_v<const typename IsCustomGradientFn<G>::Function&, A...>;
  else
    return std::is_invocable_v<const G&, A...>;
}

/// Whether grad_fn takes `variables` after the cotangents (given one by one,
/// or as a vector). A custom_gradient object given as grad_fn (TensorFlow's
/// grad_grad_fn pattern) takes the cotangents only: it accepts any arguments
/// in form, so asking it would say yes.
template <class G> constexpr bool takesVariableVector() {
  if constexpr (IsCustomGradientFn<G>::value) return false;
  else return std::is_invocable_v<const G&, const std::vector<Tensor>&, const std::vector<Variable>&>;
}
template <class Ys, class G> constexpr bool acceptsVariables() {
  constexpr int n = tree_static_leaves_v<Ys>;
  if constexpr (IsCustomGradientFn<G>::value)
    return false;
  else if constexpr (takesVariableVector<G>())
    return true;
  else if constexpr (n >= 0)
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return std::is_invocable_v<const G&, decltype((void)I, Tensor{})..., const std::vector<Variable>&>;
    }(std::make_index_sequence<static_cast<std::size_t>(n)>{});
  else
    return false;
}

/// Calls grad_fn with one cotangent per output leaf (as separate arguments when
/// their number is fixed, else as a vector), and `variables` if it takes them
/// (it then returns std::pair{grad_xs, grad_vars}); flattens what it returns.
template <class Ys, class G>
GradResult callGradFn(const G& g, const std::vector<Tensor>& dys, const std::vector<Variable>& vars) {
  constexpr int n = tree_static_leaves_v<Ys>;
  constexpr bool withVars = acceptsVariables<Ys, G>();
  auto finish = [](const auto& r) {
    if constexpr (withVars) return GradResult{flattenGrads(r.first), flattenGrads(r.second)};
    else return GradResult{flattenGrads(r), {}};
  };
  if constexpr (takesVariableVector<G>()) {
    return finish(g(dys, vars));
  } else if constexpr (n >= 0) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      if constexpr (withVars) {
        return finish(g(dys.at(I)..., vars));
      } else if constexpr (gradFnInvocable<G, decltype((void)I, Tensor{})...>()) {
        return finish(g(dys.at(I)...));
      } else if constexpr (gradFnInvocable<G, const std::vector<Tensor>&>()) {
        return finish(g(dys));
      } else {
        static_assert(gradFnInvocable<G, decltype((void)I, Tensor{})...>(),
                      "custom_gradient: grad_fn must take one Tensor per output leaf of f (or a "
                      "std::vector<Tensor> of them), then `const std::vector<Variable>&` if f reads variables");
        return GradResult{};
      }
    }(std::make_index_sequence<static_cast<std::size_t>(n)>{});
  } else {
    return finish(g(dys));
  }
}

} // namespace detail

/// The callable returned by custom_gradient.
template <class F> class CustomGradientFn {
public:
  /// Made by custom_gradient, grad_pass_through and recompute_grad.
  CustomGradientFn(F f, std::source_location loc, bool variablesAreConstants = false, bool exactGradient = false)
      : f_(std::move(f)), loc_(loc), variablesAreConstants_(variablesAreConstants), exactGradient_(exactGradient),
        core_(std::make_shared<detail::JitCore>(JitOptions{.name = "custom_gradient"})) {}

  /// With Tensors inside a trace: records the call site. With Arrays or
  /// scalars: compiled through jit and run (the forward only). With no
  /// arguments: joins the current trace (its variables may get gradients).
  template <class... Args> auto operator()(const Args&... args) const {
    if constexpr (sizeof...(Args) == 0) return traced();
    else return detail::tracedOrCompiled(*this, *core_, args...);
  }

  /// Records the call site in the current trace (arguments are Tensor structures).
  template <class... Args> auto traced(const Args&... args) const {
    using namespace detail;
    if constexpr (!std::is_invocable_v<const F&, tensor_type_t<Args>...>) {
      static_assert(std::is_invocable_v<const F&, tensor_type_t<Args>...>,
                    "custom_gradient: the function cannot be called with these arguments (wrong number or structure)");
      return Tensor{};
    } else {
      return tracedInvocable(args...);
    }
  }

private:
  template <class... Args> auto tracedInvocable(const Args&... args) const {
    using namespace detail;
    using R = std::decay_t<std::invoke_result_t<const F&, tensor_type_t<Args>...>>;
    using Ys = std::decay_t<typename R::first_type>;
    ArgCollector c;
    (visitLeaves(args, c), ...);
    std::shared_ptr<Ys> skeleton;
    using G = std::decay_t<typename R::second_type>;
    ForwardBody body = [&](std::span<const Tensor> params, GradFnErased& gradFn, bool& takesVariables) {
      const Tensor* it = params.data();
      std::tuple<tensor_type_t<Args>...> targs{toTensors(args, it)...};
      R r = std::apply(f_, targs);
      skeleton = std::make_shared<Ys>(r.first);
      takesVariables = acceptsVariables<Ys, G>();
      gradFn = [g = std::move(r.second)](const std::vector<Tensor>& dys, const std::vector<Variable>& vars) {
        return callGradFn<Ys>(g, dys, vars);
      };
      return flatten(r.first);
    };
    std::vector<Tensor> outs = customGradientCall(c.tensors, body, loc_, variablesAreConstants_, exactGradient_);
    const Tensor* it = outs.data();
    return rebuild<Tensor>(*skeleton, it);
  }

  F f_;
  std::source_location loc_;
  bool variablesAreConstants_;
  bool exactGradient_;
  std::shared_ptr<detail::JitCore> core_;
};

/// custom_gradient(f): f(xs...) returns std::pair{ys, grad_fn}; grad_fn(dys...)
/// returns one gradient per flattened input (a Tensor, or a tuple/vector of
/// them; std::optional<Tensor> leaves may be std::nullopt for "no gradient",
/// TensorFlow's None, which becomes zeros where a value is needed). Autodiff
/// never differentiates f's body: it calls grad_fn, traced only when a
/// gradient reaches the call. Tensors of f that grad_fn captures become
/// residuals; tensors f captures from outside are constants for it. If f reads
/// variables, grad_fn takes them too, grad_fn(dys..., const
/// std::vector<Variable>& variables), and returns std::pair{grad_xs,
/// std::vector<Tensor> grad_vars}, one per variable in that order.
template <class F>
CustomGradientFn<std::decay_t<F>> custom_gradient(F&& f, std::source_location loc = std::source_location::current()) {
  return CustomGradientFn<std::decay_t<F>>(std::forward<F>(f), loc);
}

namespace detail {

/// grad_fn of grad_pass_through: the output cotangents are the input
/// gradients (variables read inside are constants: they get none).
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
  auto body = [f = std::forward<F>(f)](const auto&... xs) { return std::make_pair(f(xs...), detail::IdentityGrad{}); };
  return CustomGradientFn<decltype(body)>(std::move(body), loc, /*variablesAreConstants=*/true);
}

namespace detail {

/// recompute_grad's grad_fn: runs f again on the saved inputs (the VJP
/// function's trace, where nothing merges it with the forward) and
/// differentiates it with respect to the inputs and the variables it reads.
template <class F, class... X> struct Recompute {
  F f;
  std::tuple<X...> xs;
  std::pair<std::vector<Tensor>, std::vector<Tensor>> operator()(const std::vector<Tensor>& dys,
                                                                 const std::vector<Variable>& vars) const {
    const TraceMark mark = traceMark();
    auto aliasOne = [](const Tensor& t) { return alias(t); };
    std::tuple<X...> again = std::apply([&](const auto&... x) {
      return std::tuple<X...>{mapLeaves<Tensor>(x, aliasOne)...};
    }, xs);
    std::vector<Tensor> ys = flatten(std::apply(f, again));
    std::vector<Tensor> sources;
    auto collect = [&](const Tensor& t) { sources.push_back(t); };
    std::apply([&](const auto&... x) { (tree_for_each(x, collect), ...); }, again);
    const std::size_t nx = sources.size();
    for (const Variable& v : vars) sources.push_back(v.read());
    std::vector<std::optional<Tensor>> g = differentiateAll(mark, ys, {dys.begin(), dys.end()}, sources);
    std::pair<std::vector<Tensor>, std::vector<Tensor>> out;
    for (std::size_t i = 0; i < sources.size(); ++i)
      (i < nx ? out.first : out.second).push_back(g[i] ? *g[i] : zeros_like(sources[i]));
    return out;
  }
};
} // namespace detail

/// recompute_grad(f): the forward keeps only f's inputs for the backward,
/// which runs f again and differentiates it: memory for computation. f takes
/// Tensor structures and returns any structure of Tensors; the variables it
/// reads get gradients too (TensorFlow's recompute_grad with `variables`).
/// The recomputation lives in the VJP function, so no optimisation can merge
/// it with the original forward. Variables are read again for the
/// recomputation: assigning one between the forward and its gradient is an error.
/// Forward mode (jvp, linearize, ForwardAccumulator) has nothing to
/// recompute: it differentiates f once, directly.
template <class F> auto recompute_grad(F&& f, std::source_location loc = std::source_location::current()) {
  auto body = [f = std::forward<F>(f)](const auto&... xs) {
    return std::make_pair(f(xs...), detail::Recompute<std::decay_t<F>, std::decay_t<decltype(xs)>...>{f, {xs...}});
  };
  return CustomGradientFn<decltype(body)>(std::move(body), loc, /*variablesAreConstants=*/false, /*exactGradient=*/true);
}

namespace detail {
/// What custom_jvp traces: the function on its input leaves, and the rule on
/// (primal leaves, tangent leaves) returning (output leaves, tangent leaves).
struct CustomJvpBodies {
  std::function<std::vector<Tensor>(std::span<const Tensor>)> primal;
  std::function<std::pair<std::vector<Tensor>, std::vector<Tensor>>(std::span<const Tensor>, std::span<const Tensor>)> rule;
};
/// Traces both into functions of the module and records the custom_jvp call site.
std::vector<Tensor> customJvpCall(const std::vector<Tensor>& xs, const CustomJvpBodies& bodies, std::source_location loc);
} // namespace detail

/// The callable returned by custom_jvp.
template <class F, class J> class CustomJvpFn {
public:
  /// Made by custom_jvp.
  CustomJvpFn(F f, J rule, std::source_location loc)
      : f_(std::move(f)), rule_(std::move(rule)), loc_(loc),
        core_(std::make_shared<detail::JitCore>(JitOptions{.name = "custom_jvp"})) {}

  /// With Tensors inside a trace: records the call site. With Arrays or
  /// scalars: compiled through jit and run.
  template <class... Args> auto operator()(const Args&... args) const {
    return detail::tracedOrCompiled(*this, *core_, args...);
  }

  /// Records the call site in the current trace (arguments are Tensor structures).
  template <class... Args> auto traced(const Args&... args) const {
    using namespace detail;
    using P = std::tuple<tensor_type_t<Args>...>;
    if constexpr (!std::is_invocable_v<const F&, tensor_type_t<Args>...>) {
      static_assert(std::is_invocable_v<const F&, tensor_type_t<Args>...>,
                    "custom_jvp: the function cannot be called with these arguments (wrong number or structure)");
      return Tensor{};
    } else if constexpr (!std::is_invocable_v<const J&, const P&, const P&>) {
      static_assert(std::is_invocable_v<const J&, const P&, const P&>,
                    "custom_jvp: the JVP rule must take (primals, tangents), each a std::tuple of the function's "
                    "arguments, and return std::pair{outputs, output_tangents}");
      return Tensor{};
    } else {
      using Ys = std::decay_t<std::invoke_result_t<const F&, tensor_type_t<Args>...>>;
      ArgCollector c;
      (visitLeaves(args, c), ...);
      std::shared_ptr<Ys> skeleton;
      CustomJvpBodies bodies;
      bodies.primal = [&](std::span<const Tensor> ps) {
        const Tensor* it = ps.data();
        P targs{toTensors(args, it)...};
        Ys ys = std::apply(f_, targs);
        skeleton = std::make_shared<Ys>(ys);
        return flatten(ys);
      };
      bodies.rule = [&](std::span<const Tensor> ps, std::span<const Tensor> ts) {
        const Tensor* ip = ps.data();
        const Tensor* it = ts.data();
        const P primals{toTensors(args, ip)...};
        const P tangents{toTensors(args, it)...};
        const auto r = rule_(primals, tangents);
        return std::make_pair(flatten(std::get<0>(r)), flatten(std::get<1>(r)));
      };
      std::vector<Tensor> outs = customJvpCall(c.tensors, bodies, loc_);
      const Tensor* it = outs.data();
      return rebuild<Tensor>(*skeleton, it);
    }
  }

private:
  F f_;
  J rule_;
  std::source_location loc_;
  std::shared_ptr<detail::JitCore> core_;
};

/// custom_jvp(f, jvp_fn) (JAX's custom_jvp): f with a user-supplied forward
/// rule. jvp_fn(std::tuple primals, std::tuple tangents) returns
/// std::pair{outputs, output_tangents}: f's outputs and their tangents, in
/// f's output structure, leaf by leaf of f's types. Integer and boolean
/// arguments get zero tangents; an integer output's tangent is ignored.
/// Forward mode (jvp, jacfwd, linearize, ForwardAccumulator) runs jvp_fn;
/// reverse mode (grad, vjp, gradients, GradientTape) transposes it, which
/// needs it linear in the tangents: an op that is not (dx * dx, exp(dx)) is
/// an adjit::Error naming it. f's body is never differentiated. Tensors f
/// or jvp_fn capture from outside are constants: differentiating with
/// respect to one through this call is an Error (pass it as an argument).
/// Higher derivatives differentiate jvp_fn.
template <class F, class J>
CustomJvpFn<std::decay_t<F>, std::decay_t<J>> custom_jvp(F&& f, J&& jvp_fn,
                                                         std::source_location loc = std::source_location::current()) {
  return CustomJvpFn<std::decay_t<F>, std::decay_t<J>>(std::forward<F>(f), std::forward<J>(jvp_fn), loc);
}

} // namespace adjit
