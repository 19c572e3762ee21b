// adjit/autodiff.h — reverse-mode differentiation as an IR-to-IR transform:
// grad, value_and_grad, vjp, TensorFlow-style gradients and GradientTape.
// Gradients are ordinary ops appended to the trace; outside a trace the
// differentiated function is compiled through adjit::jit.
#pragma once

#include <adjit/jit.h>
#include <adjit/variable.h>

#include <optional>
#include <variant>

namespace adjit {

/// What a gradient is for an x the ys do not depend on (tf.UnconnectedGradients).
enum class Unconnected {
  none, ///< std::nullopt
  zero, ///< zeros of x's shape and dtype
};

/// Symbolic gradients of sum(ys) (each weighted by its grad_ys, default ones)
/// with respect to each x, over everything traced so far in the current
/// function, as tf.gradients. Tensors in `stop_gradients` are constants, as if
/// wrapped in stop_gradient.
std::vector<std::optional<Tensor>> gradients(const std::vector<Tensor>& ys, const std::vector<Tensor>& xs,
                                             const std::vector<Tensor>& grad_ys = {},
                                             const std::vector<Tensor>& stop_gradients = {},
                                             Unconnected unconnected = Unconnected::none,
                                             std::source_location loc = std::source_location::current());

namespace detail {
/// A source of GradientTape::gradient: a watched Tensor or a Variable.
using SourceLeaf = std::variant<Tensor, Variable>;

/// The leaves of a structure of sources (Tensors and Variables in tuples,
/// pairs, arrays and vectors), and the same structure of gradients.
template <class T> struct Sources {
  static_assert(kFalse<T>, "GradientTape::gradient: sources must be Tensors or Variables, in tuples, pairs, arrays "
                           "or vectors");
};
template <> struct Sources<Tensor> {
  using Grad = std::optional<Tensor>;
  static void flatten(const Tensor& t, std::vector<SourceLeaf>& out) { out.emplace_back(t); }
  static Grad rebuild(const Tensor&, const std::optional<Tensor>*& it) { return *it++; }
};
template <> struct Sources<Variable> {
  using Grad = std::optional<Tensor>;
  static void flatten(const Variable& v, std::vector<SourceLeaf>& out) { out.emplace_back(v); }
  static Grad rebuild(const Variable&, const std::optional<Tensor>*& it) { return *it++; }
};
template <class T> struct Sources<std::vector<T>> {
  using Grad = std::vector<typename Sources<T>::Grad>;
  static void flatten(const std::vector<T>& v, std::vector<SourceLeaf>& out) {
    for (const T& x : v) Sources<T>::flatten(x, out);
  }
  static Grad rebuild(const std::vector<T>& v, const std::optional<Tensor>*& it) {
    Grad r;
    for (const T& x : v) r.push_back(Sources<T>::rebuild(x, it));
    return r;
  }
};
template <class T, std::size_t N> struct Sources<std::array<T, N>> {
  using Grad = std::array<typename Sources<T>::Grad, N>;
  static void flatten(const std::array<T, N>& v, std::vector<SourceLeaf>& out) {
    for (const T& x : v) Sources<T>::flatten(x, out);
  }
  static Grad rebuild(const std::array<T, N>& v, const std::optional<Tensor>*& it) {
    Grad r;
    for (std::size_t i = 0; i < N; ++i) r[i] = Sources<T>::rebuild(v[i], it);
    return r;
  }
};
template <class... T> struct Sources<std::tuple<T...>> {
  using Grad = std::tuple<typename Sources<T>::Grad...>;
  static void flatten(const std::tuple<T...>& v, std::vector<SourceLeaf>& out) {
    std::apply([&](const auto&... x) { (Sources<std::decay_t<decltype(x)>>::flatten(x, out), ...); }, v);
  }
  static Grad rebuild(const std::tuple<T...>& v, const std::optional<Tensor>*& it) {
    // Braced initialisation evaluates left to right, as `it` requires.
    return std::apply([&](const auto&... x) { return Grad{Sources<std::decay_t<decltype(x)>>::rebuild(x, it)...}; }, v);
  }
};
template <class A, class B> struct Sources<std::pair<A, B>> {
  using Grad = std::pair<typename Sources<A>::Grad, typename Sources<B>::Grad>;
  static void flatten(const std::pair<A, B>& v, std::vector<SourceLeaf>& out) {
    Sources<A>::flatten(v.first, out);
    Sources<B>::flatten(v.second, out);
  }
  static Grad rebuild(const std::pair<A, B>& v, const std::optional<Tensor>*& it) {
    auto a = Sources<A>::rebuild(v.first, it);
    auto b = Sources<B>::rebuild(v.second, it);
    return {std::move(a), std::move(b)};
  }
};
} // namespace detail

/// Records the ops traced while it lives; differentiates them on request, as
/// tf.GradientTape. Only watched tensors (and the trainable variables the
/// computation reads) are sources.
class GradientTape {
public:
  explicit GradientTape(bool persistent = false, std::source_location loc = std::source_location::current());
  /// Makes `t` a source: gradients with respect to it are computed.
  void watch(const Tensor& t);
  void watch(const std::vector<Tensor>& ts) {
    for (const Tensor& t : ts) watch(t);
  }
  /// d target / d source. A non-scalar target is differentiated with ones as
  /// its output gradient unless `output_gradient` is given. A second call on a
  /// non-persistent tape raises adjit::Error.
  std::optional<Tensor> gradient(const Tensor& target, const Tensor& source,
                                 std::optional<Tensor> output_gradient = std::nullopt,
                                 Unconnected unconnected = Unconnected::none,
                                 std::source_location loc = std::source_location::current());
  std::vector<std::optional<Tensor>> gradient(const Tensor& target, const std::vector<Tensor>& sources,
                                              std::optional<Tensor> output_gradient = std::nullopt,
                                              Unconnected unconnected = Unconnected::none,
                                              std::source_location loc = std::source_location::current());

  /// d target / d variable: the tape watches the trainable variables its
  /// computation reads (nullopt for a variable it did not read, or one that
  /// is not trainable).
  std::optional<Tensor> gradient(const Tensor& target, const Variable& variable,
                                 std::optional<Tensor> output_gradient = std::nullopt,
                                 Unconnected unconnected = Unconnected::none,
                                 std::source_location loc = std::source_location::current());
  std::vector<std::optional<Tensor>> gradient(const Tensor& target, const std::vector<Variable>& variables,
                                              std::optional<Tensor> output_gradient = std::nullopt,
                                              Unconnected unconnected = Unconnected::none,
                                              std::source_location loc = std::source_location::current());

  /// The general form: d(sum of targets, each weighted by its output
  /// gradient) / d(each leaf of `sources`), a structure of Tensors and
  /// Variables (tuples, pairs, arrays, vectors, nested); the result mirrors it
  /// with std::optional<Tensor> leaves. `tape.gradient({y1, y2}, std::tuple{x, w})`.
  template <class S>
  typename detail::Sources<S>::Grad gradient(const std::vector<Tensor>& targets, const S& sources,
                                             const std::vector<Tensor>& output_gradients = {},
                                             Unconnected unconnected = Unconnected::none,
                                             std::source_location loc = std::source_location::current()) {
    std::vector<detail::SourceLeaf> leaves;
    detail::Sources<S>::flatten(sources, leaves);
    std::vector<std::optional<Tensor>> ogs(output_gradients.begin(), output_gradients.end());
    const std::vector<std::optional<Tensor>> g =
        gradientOfLeaves(targets, ogs, leaves, unconnected, Location::from(loc));
    const std::optional<Tensor>* it = g.data();
    return detail::Sources<S>::rebuild(sources, it);
  }
  /// One target and a structure of sources (see above).
  template <class S>
  typename detail::Sources<S>::Grad gradient(const Tensor& target, const S& sources,
                                             std::optional<Tensor> output_gradient = std::nullopt,
                                             Unconnected unconnected = Unconnected::none,
                                             std::source_location loc = std::source_location::current()) {
    std::vector<Tensor> ogs;
    if (output_gradient) ogs.push_back(*output_gradient);
    return gradient(std::vector<Tensor>{target}, sources, ogs, unconnected, loc);
  }

private:
  /// The one implementation behind every gradient overload.
  std::vector<std::optional<Tensor>> gradientOfLeaves(const std::vector<Tensor>& targets,
                                                      const std::vector<std::optional<Tensor>>& output_gradients,
                                                      const std::vector<detail::SourceLeaf>& sources,
                                                      Unconnected unconnected, const Location& loc);
  void checkUse(const Location& loc);
  std::size_t begin_;
  uint64_t trace_;
  bool persistent_;
  bool used_ = false;
  std::vector<Tensor> watched_;
};

namespace detail {

/// Makes a fresh value equal to `t` (so two arguments that are one tensor get
/// separate gradients); its gradient flows on to `t`.
Tensor alias(const Tensor& t);
/// The ops count of the current trace's function.
std::size_t traceMark();
/// Reverse pass over the ops traced since `mark`: d(y weighted by seed)/d(xs).
/// A seed whose type is not y's is an Error at `loc`.
std::vector<std::optional<Tensor>> differentiate(std::size_t mark, const Tensor& y, std::optional<Tensor> seed,
                                                 const std::vector<Tensor>& xs, const Location& loc = {});
/// The same for several ys, summed, each weighted by its seed (nullopt: ones).
std::vector<std::optional<Tensor>> differentiateAll(std::size_t mark, const std::vector<Tensor>& ys,
                                                    const std::vector<std::optional<Tensor>>& seeds,
                                                    const std::vector<Tensor>& xs);
/// Checks the output of a function given to grad: one floating scalar.
void checkGradOutput(const Tensor& y, const char* api, const Location& loc);
/// Checks a differentiated argument is floating.
void checkGradArg(const Tensor& x, int argnum, const char* api, const Location& loc);


/// Applies `fn` to every Tensor of a structure, giving a structure of results.
template <class T> struct Map;
template <> struct Map<Tensor> {
  template <class F> static Tensor apply(const Tensor& t, F& f) { return f(t); }
  template <class F> static void each(const Tensor& t, F& f) { f(t); }
};
/// Optional leaves (grad_fn results: std::nullopt is "no gradient"); `each` only.
template <> struct Map<std::optional<Tensor>> {
  template <class F> static void each(const std::optional<Tensor>& t, F& f) { f(t); }
};
template <> struct Map<std::nullopt_t> {
  template <class F> static void each(std::nullopt_t, F& f) { f(std::optional<Tensor>{}); }
};
template <class T> struct Map<std::vector<T>> {
  template <class F> static std::vector<T> apply(const std::vector<T>& v, F& f) {
    std::vector<T> r;
    for (const T& x : v) r.push_back(Map<T>::apply(x, f));
    return r;
  }
  template <class F> static void each(const std::vector<T>& v, F& f) {
    for (const T& x : v) Map<T>::each(x, f);
  }
};
template <class T, std::size_t N> struct Map<std::array<T, N>> {
  template <class F> static std::array<T, N> apply(const std::array<T, N>& v, F& f) {
    std::array<T, N> r;
    for (std::size_t i = 0; i < N; ++i) r[i] = Map<T>::apply(v[i], f);
    return r;
  }
  template <class F> static void each(const std::array<T, N>& v, F& f) {
    for (const T& x : v) Map<T>::each(x, f);
  }
};
template <class... T> struct Map<std::tuple<T...>> {
  template <class F> static std::tuple<T...> apply(const std::tuple<T...>& v, F& f) {
    return std::apply([&](const auto&... x) { return std::tuple<T...>{Map<std::decay_t<decltype(x)>>::apply(x, f)...}; }, v);
  }
  template <class F> static void each(const std::tuple<T...>& v, F& f) {
    std::apply([&](const auto&... x) { (Map<std::decay_t<decltype(x)>>::each(x, f), ...); }, v);
  }
};
template <class A, class B> struct Map<std::pair<A, B>> {
  template <class F> static std::pair<A, B> apply(const std::pair<A, B>& v, F& f) {
    auto a = Map<A>::apply(v.first, f);
    auto b = Map<B>::apply(v.second, f);
    return {std::move(a), std::move(b)};
  }
  template <class F> static void each(const std::pair<A, B>& v, F& f) {
    Map<A>::each(v.first, f);
    Map<B>::each(v.second, f);
  }
};

} // namespace detail

namespace detail {
/// Gradients of y (traced since `mark`) with respect to each variable: the sum
/// over the values its reads returned; zeros where y does not depend on it.
std::vector<Tensor> variableGradients(std::size_t mark, const Tensor& y, const std::vector<Variable>& vars);
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
    std::size_t mark = detail::traceMark();
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
    constexpr bool inTrace = std::disjunction_v<detail::HasTensor<std::decay_t<Args>>...>;
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

  /// The gradient traced into the current trace (arguments are Tensor structures).
  template <class... Args> auto traced(const Args&... args) const {
    static_assert(sizeof...(I) > 0, "argnums must name at least one argument");
    std::tuple<Args...> in{args...};
    // Alias the differentiated arguments so each is its own source.
    auto aliased = aliasArgs(in, std::make_index_sequence<sizeof...(Args)>{});
    std::size_t mark = detail::traceMark();
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
      return detail::Map<T>::apply(t, f);
    } else {
      return t;
    }
  }
  template <int K, class Tup> void collect(const Tup& in, std::vector<Tensor>& xs) const {
    using T = std::decay_t<std::tuple_element_t<K, Tup>>;
    auto f = [&](const Tensor& x) {
      detail::checkGradArg(x, K, WithValue ? "value_and_grad" : "grad", loc_);
      xs.push_back(x);
    };
    detail::Map<T>::each(std::get<K>(in), f);
  }
  template <int K, class Tup> static auto rebuild(const Tup& in, const std::vector<std::optional<Tensor>>& g, std::size_t& k) {
    using T = std::decay_t<std::tuple_element_t<K, Tup>>;
    auto f = [&](const Tensor& x) {
      const std::optional<Tensor>& gi = g[k++];
      return gi ? *gi : zeros_like(x);
    };
    return detail::Map<T>::apply(std::get<K>(in), f);
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
} // namespace detail

template <class F, class... P> auto tracedVjp(F&& f, const P&... primals);

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
  std::tuple<P...> aliased{Map<P>::apply(primals, a)...};
  const std::size_t mark = traceMark();
  auto y = std::apply(f, aliased);
  std::vector<Tensor> xs;
  auto c = [&](const Tensor& x) { xs.push_back(x); };
  std::apply([&](const auto&... p) { (Map<std::decay_t<decltype(p)>>::each(p, c), ...); }, aliased);
  return std::make_tuple(std::move(y), std::move(xs), mark);
}

/// vjp on Arrays: f (returning one Tensor) as a function of the primals'
/// leaves, traced and compiled by `host` (hostVjp).
template <class H, class F, class... P> auto onArrays(const H& host, const F& f, const P&... primals) {
  ArgCollector c;
  TypeCollector tc;
  (In<P>::visit(primals, c), ...);
  (In<P>::visit(primals, tc), ...);
  return host(tc.types, c.leaves(), [&](std::span<const Tensor> params) {
    const Tensor* it = params.data();
    std::tuple<tensor_type_t<P>...> targs{In<P>::build(primals, it)...};
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
  if constexpr (!std::disjunction_v<detail::HasTensor<std::decay_t<P>>...>) {
    return detail::onArrays(detail::hostVjp, f, primals...);
  } else {
    return tracedVjp(std::forward<F>(f), primals...);
  }
}

/// vjp inside a trace: the backward ops join the trace (see vjp).
template <class F, class... P> auto tracedVjp(F&& f, const P&... primals) {
  auto [out, xs, mark] = detail::traceFromMark(f, primals...);
  const Tensor y = out;
  auto fn = [mark, y, xs](const Tensor& cotangent, std::source_location loc = std::source_location::current()) {
    std::vector<std::optional<Tensor>> g = detail::differentiate(mark, y, cotangent, xs, Location::from(loc));
    std::vector<Tensor> r;
    for (std::size_t i = 0; i < g.size(); ++i) r.push_back(g[i] ? *g[i] : zeros_like(xs[i]));
    return r;
  };
  return std::make_pair(y, fn);
}

} // namespace adjit

// ---- Forward mode -------------------------------------------------------------

namespace adjit {

namespace detail {
/// Forward pass over the ops traced since `mark`: the tangents of `ys` when
/// the `xs` move along `dxs` (zeros where no tangent reaches a y). A tangent
/// whose type is not its primal's is an Error at `loc`.
std::vector<Tensor> pushForward(const char* api, std::size_t mark, const std::vector<Tensor>& xs,
                                const std::vector<Tensor>& dxs, const std::vector<Tensor>& ys, const Location& loc);
/// The Jacobian of g at x, shaped g(x).shape + x.shape: one `scan` over the
/// basis of x pushing each vector forward (`forward`), or over the basis of
/// g(x) pulling each back. The primal ops read only x, so they leave the loop
/// and run once; the loop body is one JVP or VJP.
Tensor jacobian(bool forward, const std::function<Tensor(const Tensor&)>& g, const Tensor& x, const Location& loc);
} // namespace detail

/// Forward mode: std::pair{f(primals...), the derivative of f along tangents}.
/// `primals` and `tangents` are tuples of the same structure (leaf by leaf the
/// same types); f returns any structure of Tensors, and the tangents come in
/// that structure (zeros where no tangent reaches an output; integer outputs
/// get zeros). Inside a trace the tangent ops join it; with Arrays, compiled.
template <class F, class... P, class... T>
auto jvp(const F& f, const std::tuple<P...>& primals, const std::tuple<T...>& tangents,
         std::source_location sl = std::source_location::current()) {
  static_assert(sizeof...(P) == sizeof...(T), "jvp: give one tangent per primal (tuples of the same structure)");
  if constexpr (!std::disjunction_v<detail::HasTensor<std::decay_t<P>>...>) {
    detail::JitCore core(JitOptions{.name = "jvp"});
    return detail::callCompiled(core, [&f, sl](const auto& ps, const auto& ts) { return jvp(f, ps, ts, sl); }, primals,
                                tangents);
  } else {
    const Location loc = Location::from(sl);
    auto [out, xs, mark] = std::apply([&](const auto&... p) { return detail::traceFromMark(f, p...); }, primals);
    std::vector<Tensor> dxs;
    auto cd = [&](const Tensor& x) { dxs.push_back(x); };
    std::apply([&](const auto&... t) { (detail::Map<std::decay_t<decltype(t)>>::each(t, cd), ...); }, tangents);
    using R = std::decay_t<decltype(out)>;
    std::vector<Tensor> ys;
    detail::Out<R>::flatten(out, ys);
    const std::vector<Tensor> dys = detail::pushForward("jvp", mark, xs, dxs, ys, loc);
    const Tensor* it = dys.data();
    return std::make_pair(out, detail::OutTensors<R>::rebuild(out, it));
  }
}

namespace detail {
struct AccumulatorState;

/// A first argument that remembers the caller's line: the default argument
/// of a converting constructor is evaluated where the conversion happens,
/// in the caller's expression (for variadic calls, which cannot end in a
/// std::source_location parameter).
template <class T> struct Located {
  Located(const T& v, std::source_location l = std::source_location::current()) : value(v), loc(l) {}
  const T& value;
  std::source_location loc;
};
} // namespace detail

/// tf.autodiff.ForwardAccumulator inside a trace: tangents for `primals`
/// (moving along `tangents`, leaf by leaf of the same type) propagate
/// through the ops traced while the accumulator lives, and `jvp(y)` asks for
/// the tangent of a value traced since. Integer and boolean primals take no
/// tangent. Nests with GradientTape either way: an accumulator around a
/// tape's gradient computes Hessian-vector products (forward over reverse),
/// a tape around an accumulator differentiates its jvp (reverse over
/// forward). Tangents are built when asked for, each op's once; as in
/// TensorFlow, the ops an answer adds are not watched (the jvp of a jvp is
/// None: nest a second accumulator for second order).
class ForwardAccumulator {
public:
  ForwardAccumulator(const Tensor& primal, const Tensor& tangent,
                     std::source_location loc = std::source_location::current());
  ForwardAccumulator(std::vector<Tensor> primals, std::vector<Tensor> tangents,
                     std::source_location loc = std::source_location::current());
  /// The tangent of `y`: std::nullopt when no primal's tangent reaches it
  /// (zeros with Unconnected::zero), as TensorFlow's acc.jvp.
  std::optional<Tensor> jvp(const Tensor& y, Unconnected unconnected = Unconnected::none,
                            std::source_location loc = std::source_location::current()) const;
  std::vector<std::optional<Tensor>> jvp(const std::vector<Tensor>& ys, Unconnected unconnected = Unconnected::none,
                                         std::source_location loc = std::source_location::current()) const;

private:
  std::shared_ptr<detail::AccumulatorState> state_; ///< shared by copies
};

namespace detail {
/// The linear function's output tangents (one per output leaf, zeros for
/// integer ones) for one tangent per primal leaf, checked against the
/// primals' types ("linearize: ..." at `loc`).
std::vector<Array> applyLinear(const HostVjp& s, const std::vector<Array>& tangents, const Location& loc);
/// Bytes the first half of a split kept for the second beyond its inputs.
std::size_t residualBytes(const HostVjp& s);
/// Traces `body` (f on the primal leaves, returning its output leaves),
/// splits its JVP by partial evaluation, runs the primal half on `leaves`:
/// f's output leaves and what the linear half needs.
std::pair<std::vector<Array>, std::shared_ptr<HostVjp>>
hostLinearize(const std::vector<Type>& types, std::span<const Leaf> leaves,
              const std::function<std::vector<Tensor>(std::span<const Tensor>)>& body);
} // namespace detail

/// linearize's linear function on Arrays: f's derivative at the primals,
/// compiled once; each call computes only the tangent, from what the primal
/// computation kept (residual_bytes()). R is f's output structure (of
/// Tensors); calls return it with Arrays (an Array for one Tensor).
template <class R = Tensor> class LinearFn {
public:
  /// Made by linearize: the compiled halves' state and f's output structure.
  LinearFn(std::shared_ptr<detail::HostVjp> s, std::shared_ptr<const R> skeleton)
      : state_(std::move(s)), skeleton_(std::move(skeleton)) {}
  /// One tangent per primal leaf, each of its primal's type (integer leaves'
  /// tangents are ignored); a wrong count or type is an Error at the caller's
  /// line. Integer outputs get zero tangents.
  auto operator()(const std::vector<Array>& tangents, std::source_location loc = std::source_location::current()) const {
    std::vector<Array> dys = detail::applyLinear(*state_, tangents, Location::from(loc));
    Array* it = dys.data();
    return detail::Out<R>::rebuild(*skeleton_, it);
  }
  /// The tangents as separate arguments.
  template <class... T>
    requires(std::is_same_v<T, Array> && ...)
  auto operator()(detail::Located<Array> first, const T&... rest) const {
    return (*this)(std::vector<Array>{first.value, rest...}, first.loc);
  }
  /// Bytes the primal computation kept for this function beyond the primals.
  std::size_t residual_bytes() const { return detail::residualBytes(*state_); }

private:
  std::shared_ptr<detail::HostVjp> state_;
  std::shared_ptr<const R> skeleton_;
};

namespace detail {
/// linearize's linear function inside a trace: each call pushes tangents
/// through the ops f traced (pushForward), reading f's values; it returns
/// them in f's output structure R.
template <class R> struct TracedLinear {
  std::size_t mark;
  R y;
  std::vector<Tensor> xs;
  /// One tangent per primal leaf; zeros for outputs no tangent reaches.
  R operator()(const std::vector<Tensor>& tangents, std::source_location loc = std::source_location::current()) const {
    std::vector<Tensor> ys;
    Out<R>::flatten(y, ys);
    const std::vector<Tensor> dys = pushForward("linearize", mark, xs, tangents, ys, Location::from(loc));
    const Tensor* it = dys.data();
    return OutTensors<R>::rebuild(y, it);
  }
  /// The tangents as separate arguments.
  template <class... T>
    requires(std::is_same_v<T, Tensor> && ...)
  R operator()(Located<Tensor> first, const T&... rest) const {
    return (*this)(std::vector<Tensor>{first.value, rest...}, first.loc);
  }
};
} // namespace detail

/// JAX's linearize: std::pair{f(primals...), f_jvp} where f_jvp(tangents...)
/// is the derivative of f at the primals along the tangents (one per primal
/// leaf), in f's output structure (f returns any structure of Tensors). With
/// Arrays, f's JVP is split by partial evaluation: everything that reads no
/// tangent runs once, now, and keeps what the tangent needs; f_jvp (a
/// LinearFn) is the compiled rest, linear in the tangents, so it never
/// recomputes f (inside recompute_grad regions it recomputes by design,
/// keeping the memory saving). With Tensors inside a trace, each f_jvp call
/// adds the tangent ops to the trace, reading f's values.
template <class F, class... P> auto linearize(F&& f, const P&... primals) {
  if constexpr (!std::disjunction_v<detail::HasTensor<std::decay_t<P>>...>) {
    using R = std::decay_t<std::invoke_result_t<F&, detail::tensor_type_t<P>...>>;
    detail::ArgCollector c;
    detail::TypeCollector tc;
    (detail::In<P>::visit(primals, c), ...);
    (detail::In<P>::visit(primals, tc), ...);
    std::shared_ptr<R> skeleton;
    auto [ys, state] = detail::hostLinearize(tc.types, c.leaves(), [&](std::span<const Tensor> params) {
      const Tensor* it = params.data();
      std::tuple<detail::tensor_type_t<P>...> targs{detail::In<P>::build(primals, it)...};
      R r = std::apply(f, targs);
      std::vector<Tensor> out;
      detail::Out<R>::flatten(r, out);
      skeleton = std::make_shared<R>(std::move(r));
      return out;
    });
    Array* it = ys.data();
    auto y = detail::Out<R>::rebuild(*skeleton, it);
    return std::make_pair(std::move(y), LinearFn<R>(std::move(state), std::move(skeleton)));
  } else {
    auto [out, xs, mark] = detail::traceFromMark(f, primals...);
    using R = std::decay_t<decltype(out)>;
    return std::make_pair(out, detail::TracedLinear<R>{mark, out, std::move(xs)});
  }
}

namespace detail {
/// Rebuilds an output structure R with each Tensor leaf replaced by what
/// `make()` returns, called once per leaf in order (a Jacobian's out-tree).
template <class R> struct Relabel;
template <> struct Relabel<Tensor> {
  template <class M> static auto build(const Tensor&, M& make) { return make(); }
};
template <class T> struct Relabel<std::vector<T>> {
  template <class M> static auto build(const std::vector<T>& v, M& make) {
    std::vector<decltype(Relabel<T>::build(std::declval<const T&>(), make))> r;
    for (const T& x : v) r.push_back(Relabel<T>::build(x, make));
    return r;
  }
};
template <class T, std::size_t N> struct Relabel<std::array<T, N>> {
  template <class M> static auto build(const std::array<T, N>& v, M& make) {
    std::array<decltype(Relabel<T>::build(std::declval<const T&>(), make)), N> r;
    for (std::size_t i = 0; i < N; ++i) r[i] = Relabel<T>::build(v[i], make);
    return r;
  }
};
template <class... T> struct Relabel<std::tuple<T...>> {
  template <class M> static auto build(const std::tuple<T...>& v, M& make) {
    return std::apply([&](const auto&... x) {
      return std::tuple<decltype(Relabel<std::decay_t<decltype(x)>>::build(x, make))...>{
          Relabel<std::decay_t<decltype(x)>>::build(x, make)...};
    }, v);
  }
};
template <class A, class B> struct Relabel<std::pair<A, B>> {
  template <class M> static auto build(const std::pair<A, B>& v, M& make) {
    auto a = Relabel<A>::build(v.first, make);
    auto b = Relabel<B>::build(v.second, make);
    return std::pair<decltype(a), decltype(b)>{std::move(a), std::move(b)};
  }
};
} // namespace detail

/// The Jacobian of f with respect to the arguments `argnums` (default: the
/// first), as JAX's: per output leaf (f may return any structure of
/// Tensors), the argument's structure with one Jacobian per Tensor leaf,
/// shaped that output's shape + that leaf's shape; with several argnums, a
/// tuple of those per output leaf. One Tensor in, one Tensor out: a Tensor
/// (an Array when called with Arrays). jacfwd pushes the argument's basis
/// forward (cheap for few inputs), jacrev pulls the output's basis back
/// (cheap for few outputs); each Jacobian is one loop whose body is one JVP
/// or VJP.
template <class F, bool Forward, int... I> class JacobianFn {
public:
  /// Made by jacfwd and jacrev; `loc` is where they were called.
  JacobianFn(F f, std::source_location loc)
      : f_(std::move(f)), loc_(Location::from(loc)),
        core_(std::make_shared<detail::JitCore>(JitOptions{.name = Forward ? "jacfwd" : "jacrev"})) {}
  /// With Tensors (inside a trace): the Jacobian ops join that trace. With
  /// Arrays or scalars: compiled through jit and run.
  template <class... Args> auto operator()(const Args&... args) const {
    return detail::tracedOrCompiled(*this, *core_, args...);
  }
  /// The Jacobians traced into the current trace.
  template <class... Args> auto traced(const Args&... args) const {
    static_assert(sizeof...(I) > 0, "argnums must name at least one argument");
    static_assert(((I >= 0 && I < static_cast<int>(sizeof...(Args))) && ...),
                  "jacfwd/jacrev: an argnum is not the index of an argument of this call");
    using Tup = std::tuple<Args...>;
    using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
    const Tup in{args...};
    std::size_t o = 0; // the output leaf
    auto atLeaf = [&] {
      const std::size_t leaf = o++;
      if constexpr (sizeof...(I) == 1) return argument<I...>(in, leaf);
      else return std::make_tuple(argument<I>(in, leaf)...);
    };
    if constexpr (std::is_same_v<R, Tensor>) {
      return atLeaf();
    } else {
      // The output's structure, from one more trace of f (left dead, as
      // jacrev's own; effects in f run once more).
      const R skeleton = std::apply(f_, in);
      return detail::Relabel<R>::build(skeleton, atLeaf);
    }
  }

private:
  /// Output leaf `o`'s Jacobians with respect to argument K: K's structure,
  /// a Jacobian per leaf.
  template <int K, class Tup> auto argument(const Tup& in, std::size_t o) const {
    using S = std::decay_t<std::tuple_element_t<K, Tup>>;
    static_assert(detail::HasTensor<S>::value,
                  "jacfwd/jacrev: a differentiated argument must be a Tensor or a structure of Tensors");
    std::size_t j = 0;
    auto perLeaf = [&](const Tensor& leaf) {
      const std::size_t at = j++;
      auto g = [&](const Tensor& x) {
        Tup moved = in;
        std::size_t c = 0;
        auto swap = [&](const Tensor& t) { return c++ == at ? x : t; };
        std::get<K>(moved) = detail::Map<S>::apply(std::get<K>(in), swap);
        const auto y = std::apply(f_, moved);
        std::vector<Tensor> ys;
        detail::Out<std::decay_t<decltype(y)>>::flatten(y, ys);
        return ys.at(o);
      };
      return detail::jacobian(Forward, g, leaf, loc_);
    };
    return detail::Map<S>::apply(std::get<K>(in), perLeaf);
  }
  F f_;
  Location loc_;
  std::shared_ptr<detail::JitCore> core_;
};

/// Forward-mode Jacobian (see JacobianFn).
template <class F, int... I>
JacobianFn<std::decay_t<F>, true, I...> jacfwd(F&& f, Argnums<I...>, std::source_location loc = std::source_location::current()) {
  return JacobianFn<std::decay_t<F>, true, I...>(std::forward<F>(f), loc);
}
/// Forward-mode Jacobian with respect to the first argument.
template <class F> JacobianFn<std::decay_t<F>, true, 0> jacfwd(F&& f, std::source_location loc = std::source_location::current()) {
  return jacfwd(std::forward<F>(f), argnums<0>, loc);
}
/// Reverse-mode Jacobian (see JacobianFn).
template <class F, int... I>
JacobianFn<std::decay_t<F>, false, I...> jacrev(F&& f, Argnums<I...>, std::source_location loc = std::source_location::current()) {
  return JacobianFn<std::decay_t<F>, false, I...>(std::forward<F>(f), loc);
}
/// Reverse-mode Jacobian with respect to the first argument.
template <class F> JacobianFn<std::decay_t<F>, false, 0> jacrev(F&& f, std::source_location loc = std::source_location::current()) {
  return jacrev(std::forward<F>(f), argnums<0>, loc);
}

/// The Hessian of f (returning a floating scalar) with respect to the
/// arguments `argnums` (default: the first): forward mode over the gradient
/// (jacfwd of grad), as JAX's hessian. One argnum x: shaped x.shape +
/// x.shape. Several: a tuple of tuples, element [i][j] the derivative of the
/// gradient for argument i with respect to argument j.
template <class F, int... I>
auto hessian(F&& f, Argnums<I...> an, std::source_location loc = std::source_location::current()) {
  return jacfwd(grad(std::forward<F>(f), an, loc), an, loc);
}
/// The Hessian with respect to the first argument.
template <class F> auto hessian(F&& f, std::source_location loc = std::source_location::current()) {
  return hessian(std::forward<F>(f), argnums<0>, loc);
}

/// hvp(f)(x, v): the Hessian of f (a floating scalar of one Tensor) at x times
/// v, without forming the Hessian: the JVP of the gradient along v.
template <class F> class HvpFn {
public:
  /// Made by hvp; `loc` is where it was called.
  HvpFn(F f, std::source_location loc)
      : f_(std::move(f)), loc_(loc), core_(std::make_shared<detail::JitCore>(JitOptions{.name = "hvp"})) {}
  /// With Tensors inside a trace, or compiled with Arrays: H(x) v.
  template <class X, class V> auto operator()(const X& x, const V& v) const {
    return detail::tracedOrCompiled(*this, *core_, x, v);
  }
  /// H(x) v traced into the current trace.
  Tensor traced(const Tensor& x, const Tensor& v) const {
    auto g = grad(f_, argnums<0>, loc_);
    return jvp(g, std::tuple<Tensor>{x}, std::tuple<Tensor>{v}, loc_).second;
  }

private:
  F f_;
  std::source_location loc_;
  std::shared_ptr<detail::JitCore> core_;
};
/// hvp(f): see HvpFn.
template <class F> HvpFn<std::decay_t<F>> hvp(F&& f, std::source_location loc = std::source_location::current()) {
  return HvpFn<std::decay_t<F>>(std::forward<F>(f), loc);
}

} // namespace adjit
