// adjit/reverse.h — reverse-mode differentiation as an IR-to-IR transform:
// grad and value_and_grad (of arguments or of variables) and vjp. Gradients
// are ordinary ops appended to the trace; outside a trace the differentiated
// function is compiled through adjit::jit.
#pragma once

#include <adjit/jit.h>
#include <adjit/variable.h>

#include <initializer_list>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>

namespace adjit {

namespace detail {

/// Makes a fresh value equal to `t` (so two arguments that are one tensor get
/// separate gradients); its gradient flows on to `t`.
Tensor alias(const Tensor& t);
/// Where the current trace stands: which trace, and how many ops its
/// function holds. Derivatives of what was traced since then must be taken
/// in the same trace: in a nested one (a vmap, loop or branch body) the ops
/// after the mark are not the function's (an Error, not a wrong result).
struct TraceMark {
  uint64_t trace = 0;
  std::size_t ops = 0;
};
TraceMark traceMark();
/// Whether `mark` was taken in the current trace.
bool inMarkedTrace(const TraceMark& mark);
/// The op count of `mark`, checked to be the current trace's: otherwise an
/// Error at `loc` naming `api` (a derivative function called in a nested trace).
std::size_t opsSince(const TraceMark& mark, const char* api, const Location& loc);
/// Reverse pass over the ops traced since `mark`: d(y weighted by seed)/d(xs).
/// A seed whose type is not y's is an Error at `loc`.
std::vector<std::optional<Tensor>> differentiate(const TraceMark& mark, const Tensor& y, std::optional<Tensor> seed,
                                                 const std::vector<Tensor>& xs, const Location& loc = {});
/// The same for several ys, summed, each weighted by its seed (nullopt: ones).
std::vector<std::optional<Tensor>> differentiateAll(const TraceMark& mark, const std::vector<Tensor>& ys,
                                                    const std::vector<std::optional<Tensor>>& seeds,
                                                    const std::vector<Tensor>& xs);
/// Checks the output of a function given to grad: one floating scalar.
void checkGradOutput(const Tensor& y, const char* api, const Location& loc);
/// Checks a differentiated argument is floating.
void checkGradArg(const Tensor& x, int argnum, const char* api, const Location& loc);

} // namespace detail

namespace detail {
/// Gradients of y (traced since `mark`) with respect to each variable: the sum
/// over the values its reads returned; zeros where y does not depend on it.
std::vector<Tensor> variableGradients(const TraceMark& mark, const Tensor& y, const std::vector<Variable>& vars);
} // namespace detail

/// The gradient of f with respect to variables (rather than arguments):
/// returned by grad(f, variables) and value_and_grad(f, variables).
template <class F, bool WithValue> class VariableGradFn {
public:
  /// Made by grad(f, variables) and value_and_grad(f, variables).
  VariableGradFn(F f, std::vector<Variable> vars, std::source_location loc)
      : f_(std::move(f)), vars_(std::move(vars)), loc_(Location::from(loc)),
        core_(std::make_shared<detail::JitCore>(JitOptions{.name = "grad"})) {}

  /// One gradient per variable (a std::vector), after the value with WithValue.
  template <class... Args> auto operator()(const Args&... args) const {
    return detail::tracedOrCompiled(*this, *core_, args...);
  }

  /// The gradients traced into the current trace (arguments are Tensor structures).
  template <class... Args> auto traced(const Args&... args) const {
    const detail::TraceMark mark = detail::traceMark();
    Tensor y = f_(args...);
    detail::checkGradOutput(y, WithValue ? "value_and_grad" : "grad", loc_);
    std::vector<Tensor> g = detail::variableGradients(mark, y, vars_);
    if constexpr (WithValue) return std::make_pair(y, g);
    else return g;
  }

private:
  F f_;
  std::vector<Variable> vars_;
  Location loc_; ///< where grad / value_and_grad was called, for errors
  std::shared_ptr<detail::JitCore> core_;
};

/// The gradient of f (a floating scalar) with respect to `variables`.
template <class F>
VariableGradFn<std::decay_t<F>, false> grad(F&& f, std::vector<Variable> variables,
                                            std::source_location loc = std::source_location::current()) {
  return VariableGradFn<std::decay_t<F>, false>(std::forward<F>(f), std::move(variables), loc);
}
/// Like grad(f, variables), returning std::pair{f(args...), gradients}.
template <class F>
VariableGradFn<std::decay_t<F>, true> value_and_grad(F&& f, std::vector<Variable> variables,
                                                     std::source_location loc = std::source_location::current()) {
  return VariableGradFn<std::decay_t<F>, true>(std::forward<F>(f), std::move(variables), loc);
}

/// Which arguments to differentiate: `argnums<0>` (the default), `argnums<0, 2>`.
template <int... I> struct Argnums {};
template <int... I> inline constexpr Argnums<I...> argnums{};

/// The differentiated function returned by grad and value_and_grad.
template <class F, bool WithValue, int... I> class GradFn {
public:
  /// Made by grad and value_and_grad; `loc` is where they were called.
  GradFn(F f, std::source_location loc) : f_(std::move(f)), loc_(Location::from(loc)), core_(sharedCore()) {}

  /// With Tensors (inside a trace): the gradient ops join that trace. With
  /// Arrays or scalars: compiled through jit and run.
  template <class... Args> auto operator()(const Args&... args) const {
    // Mistakes known at compile time get one static_assert each; the failing
    // branch returns a placeholder so no second error follows.
    constexpr bool inTrace = (detail::hasTensor<Args> || ...);
    using Placeholder = std::conditional_t<inTrace, Tensor, Array>;
    if constexpr (!std::is_invocable_v<const F&, detail::tensor_type_t<Args>...>) {
      static_assert(std::is_invocable_v<const F&, detail::tensor_type_t<Args>...>,
                    "grad: the function cannot be called with these arguments (wrong number or structure)");
      return Placeholder{};
    } else if constexpr (!((I >= 0 && I < static_cast<int>(sizeof...(Args))) && ...)) {
      static_assert(((I >= 0 && I < static_cast<int>(sizeof...(Args))) && ...),
                    "grad: an argnum is not the index of an argument of this call");
      return Placeholder{};
    } else {
      return detail::tracedOrCompiled(*this, *core_, args...);
    }
  }

  /// Blocks until every signature compiled so far runs its optimised code
  /// (as Jitted::wait_optimized).
  void wait_optimized() const { core_->waitOptimized(); }

  /// The gradient traced into the current trace (arguments are Tensor structures).
  template <class... Args> auto traced(const Args&... args) const {
    static_assert(sizeof...(I) > 0, "argnums must name at least one argument");
    std::tuple<Args...> in{args...};
    // Alias the differentiated arguments so each is its own source.
    auto aliased = aliasArgs(in, std::make_index_sequence<sizeof...(Args)>{});
    const detail::TraceMark mark = detail::traceMark();
    Tensor y = std::apply(f_, aliased);
    detail::checkGradOutput(y, WithValue ? "value_and_grad" : "grad", loc_);
    std::vector<Tensor> xs;
    (collect<I>(aliased, xs), ...);
    std::vector<std::optional<Tensor>> g = detail::differentiate(mark, y, std::nullopt, xs);
    std::size_t k = 0;
    // Braced initialisation evaluates left to right, as `k` requires.
    using Grads = std::tuple<decltype(rebuild<I>(aliased, g, k))...>;
    Grads grads{rebuild<I>(aliased, g, k)...};
    if constexpr (WithValue) {
      if constexpr (sizeof...(I) == 1) return std::make_pair(y, std::get<0>(std::move(grads)));
      else return std::make_pair(y, std::move(grads));
    } else {
      if constexpr (sizeof...(I) == 1) return std::get<0>(std::move(grads));
      else return grads;
    }
  }

private:
  /// The signature cache. A function without state (a captureless lambda)
  /// computes by its type alone, so every GradFn of that type shares one
  /// cache for the process: `grad(f)(x)` written inline traces and compiles
  /// once per signature, not on every call. As with jit, C++ globals the
  /// function reads are constants of its trace.
  static std::shared_ptr<detail::JitCore> sharedCore() {
    if constexpr (std::is_empty_v<F> && std::is_trivially_copyable_v<F>) {
      // Never destroyed, like the JIT it holds kernels of: no teardown order at exit.
      static const auto* core = new std::shared_ptr<detail::JitCore>(std::make_shared<detail::JitCore>(JitOptions{.name = "grad"}));
      return *core;
    } else {
      return std::make_shared<detail::JitCore>(JitOptions{.name = "grad"});
    }
  }
  template <class Tup, std::size_t... K> static Tup aliasArgs(const Tup& in, std::index_sequence<K...>) {
    return Tup{aliasIf<static_cast<int>(K)>(std::get<K>(in))...};
  }
  template <int K, class T> static T aliasIf(const T& t) {
    if constexpr (((K == I) || ...)) {
      auto f = [](const Tensor& x) { return detail::alias(x); };
      return detail::mapLeaves<Tensor>(t, f);
    } else {
      return t;
    }
  }
  template <int K, class Tup> void collect(const Tup& in, std::vector<Tensor>& xs) const {
    auto f = [&](const Tensor& x) {
      detail::checkGradArg(x, K, WithValue ? "value_and_grad" : "grad", loc_);
      xs.push_back(x);
    };
    tree_for_each(std::get<K>(in), f);
  }
  template <int K, class Tup> static auto rebuild(const Tup& in, const std::vector<std::optional<Tensor>>& g, std::size_t& k) {
    auto f = [&](const Tensor& x) {
      const std::optional<Tensor>& gi = g[k++];
      return gi ? *gi : zeros_like(x);
    };
    return detail::mapLeaves<Tensor>(std::get<K>(in), f);
  }

  F f_;
  Location loc_; ///< where grad / value_and_grad was called, for errors
  std::shared_ptr<detail::JitCore> core_;
};

/// The gradient of f (returning a floating scalar) with respect to the
/// arguments `argnums` (default: the first). One argument: a gradient shaped
/// like it; several: a tuple of them. Composes with itself and with jit.
/// Errors found when f is traced (a non-scalar result, an integer argument)
/// point at the line that called grad.
template <class F, int... I>
GradFn<std::decay_t<F>, false, I...> grad(F&& f, Argnums<I...>,
                                          std::source_location loc = std::source_location::current()) {
  return GradFn<std::decay_t<F>, false, I...>(std::forward<F>(f), loc);
}
template <class F>
GradFn<std::decay_t<F>, false, 0> grad(F&& f, std::source_location loc = std::source_location::current()) {
  return grad(std::forward<F>(f), argnums<0>, loc);
}
namespace detail {
/// What a rejected grad(f, {0, 1}) returns, so its use does not add errors.
struct RejectedGrad {
  template <class... A> RejectedGrad operator()(const A&...) const { return {}; }
};
} // namespace detail
/// `grad(f, {0, 1})` is the natural guess; argnums are template arguments.
template <class F> detail::RejectedGrad grad(F&&, std::initializer_list<int>) {
  static_assert(detail::kFalse<F>, "grad: argnums are written adjit::argnums<0, 1>, not {0, 1}");
  return {};
}

/// Like grad, returning std::pair{f(args...), gradient}.
template <class F, int... I>
GradFn<std::decay_t<F>, true, I...> value_and_grad(F&& f, Argnums<I...>,
                                                   std::source_location loc = std::source_location::current()) {
  return GradFn<std::decay_t<F>, true, I...>(std::forward<F>(f), loc);
}
template <class F>
GradFn<std::decay_t<F>, true, 0> value_and_grad(F&& f, std::source_location loc = std::source_location::current()) {
  return value_and_grad(std::forward<F>(f), argnums<0>, loc);
}
/// `value_and_grad(f, {0, 1})`: a compile-time error saying how argnums are written.
template <class F> detail::RejectedGrad value_and_grad(F&&, std::initializer_list<int>) {
  static_assert(detail::kFalse<F>, "value_and_grad: argnums are written adjit::argnums<0, 1>, not {0, 1}");
  return {};
}

namespace detail {
struct HostVjp;
/// vjp inside a trace: the backward ops join the trace (see vjp).
template <class F, class... P> auto tracedVjp(F&& f, const P&... primals);
} // namespace detail


/// The backward half of a vjp computed on Arrays: call it with the output's
/// cotangent to get the cotangent of each primal leaf, in order.
class VjpBackward {
public:
  explicit VjpBackward(std::shared_ptr<detail::HostVjp> s) : state_(std::move(s)) {}
  /// A cotangent of another type than the output's is an Error at the caller's line.
  std::vector<Array> operator()(const Array& cotangent,
                                std::source_location loc = std::source_location::current()) const;
  /// Bytes the forward kept for this backward beyond its own inputs (saved
  /// intermediates; also printed by ADJIT_LOG=compile), plus what the last
  /// call of this backward pushed onto the residual stacks of while loops
  /// without max_iterations (those stacks live within the call).
  std::size_t residual_bytes() const;

private:
  std::shared_ptr<detail::HostVjp> state_;
};

namespace detail {
/// Traces f, splits its VJP into forward and backward functions, compiles
/// both, runs the forward and keeps its residuals.
std::pair<Array, VjpBackward> hostVjp(const std::vector<Type>& types, std::span<const Leaf> leaves,
                                      const std::function<std::vector<Tensor>(std::span<const Tensor>)>& body);
} // namespace detail

namespace detail {
/// f traced on fresh copies of the primals (alias: arguments that are one
/// tensor get derivatives of their own) since a trace mark: f's result, the
/// copies' leaves in order, and the mark.
template <class F, class... P> auto traceFromMark(const F& f, const P&... primals) {
  auto a = [](const Tensor& x) { return alias(x); };
  std::tuple<P...> aliased{mapLeaves<Tensor>(primals, a)...};
  const TraceMark mark = traceMark();
  auto y = std::apply(f, aliased);
  std::vector<Tensor> xs;
  auto c = [&](const Tensor& x) { xs.push_back(x); };
  std::apply([&](const auto&... p) { (tree_for_each(p, c), ...); }, aliased);
  return std::make_tuple(std::move(y), std::move(xs), mark);
}

/// vjp on Arrays: f (returning one Tensor) as a function of the primals'
/// leaves, traced and compiled by `host` (hostVjp).
template <class H, class F, class... P> auto onArrays(const H& host, const F& f, const P&... primals) {
  ArgCollector c;
  TypeCollector tc;
  (visitLeaves(primals, c), ...);
  (visitLeaves(primals, tc), ...);
  return host(tc.types, c.leaves(), [&](std::span<const Tensor> params) {
    const Tensor* it = params.data();
    std::tuple<tensor_type_t<P>...> targs{toTensors(primals, it)...};
    return std::vector<Tensor>{std::apply(f, targs)};
  });
}
} // namespace detail

/// std::pair{f(primals...), vjp_fn} where vjp_fn(cotangent) returns the
/// cotangent of each primal leaf, in order (zeros where unconnected); f
/// returns one Tensor. With Tensors inside a trace the backward ops join the
/// trace. With Arrays, f is compiled as a forward that keeps only the
/// residuals the backward needs, and a backward that reads them: no tape.
template <class F, class... P> auto vjp(F&& f, const P&... primals) {
  if constexpr (!(detail::hasTensor<P> || ...)) {
    return detail::onArrays(detail::hostVjp, f, primals...);
  } else {
    return detail::tracedVjp(std::forward<F>(f), primals...);
  }
}

namespace detail {
/// The VJP function of f at `primals` traced in the current trace. Called in
/// that trace, it differentiates the ops f traced there. Called in a trace
/// nested in it (vmap(vjp_fn), a loop or branch body), those ops are not in
/// the nested function: f, kept by the VJP function when it can be copied,
/// is traced again there on the primals (captured from the enclosing trace;
/// under vmap the unbatched forward runs once), and that trace is
/// differentiated. A callable that cannot be copied makes that an Error.
template <class F, class... P> auto tracedVjp(F&& f, const P&... primals) {
  using Fn = std::decay_t<F>;
  constexpr bool keep = std::is_copy_constructible_v<Fn>;
  std::shared_ptr<const Fn> kept;
  if constexpr (keep) kept = std::make_shared<const Fn>(f);
  auto [out, xs, mark] = traceFromMark(f, primals...);
  const Tensor y = out;
  auto fn = [mark, y, xs, kept, again = std::make_tuple(primals...)](
                const Tensor& cotangent, std::source_location loc = std::source_location::current()) {
    std::vector<Tensor> sources = xs;
    std::vector<std::optional<Tensor>> g;
    if (inMarkedTrace(mark) || !kept) {
      g = differentiate(mark, y, cotangent, sources, Location::from(loc)); // (an Error in another trace)
    } else {
      auto [y2, xs2, mark2] = std::apply([&](const auto&... p) { return traceFromMark(*kept, p...); }, again);
      sources = xs2;
      g = differentiate(mark2, y2, cotangent, sources, Location::from(loc));
    }
    std::vector<Tensor> r;
    for (std::size_t i = 0; i < g.size(); ++i) r.push_back(g[i] ? *g[i] : zeros_like(sources[i]));
    return r;
  };
  return std::make_pair(y, fn);
}
} // namespace detail

} // namespace adjit
