// adjit/forward.h — forward-mode differentiation: jvp and linearize, and
// what is built on them: jacfwd and jacrev, hessian (forward over reverse)
// and hvp.
#pragma once

#include <adjit/reverse.h>

#include <functional>
#include <optional>

namespace adjit {

namespace detail {
/// Forward pass over the ops traced since `mark`: the tangents of `ys` when
/// the `xs` move along `dxs` (zeros where no tangent reaches a y). A tangent
/// whose type is not its primal's is an Error at `loc`.
std::vector<Tensor> pushForward(const char* api, const TraceMark& mark, const std::vector<Tensor>& xs,
                                const std::vector<Tensor>& dxs, const std::vector<Tensor>& ys, const Location& loc);
/// The Jacobian of g at x, shaped g(x).shape + x.shape: the JVP of g along
/// every vector of the basis of x (`forward`), or the VJP of every vector of
/// the basis of g(x), at once: one JVP or VJP traced on one basis vector and
/// batched over the basis (vmap), so the tangent ops become products with the
/// whole basis and the program's size does not grow with the basis. The
/// primal ops read no basis vector and run once. Where the batched tangents
/// would not fit the policy's byte budget (or an op has no batching rule),
/// a `scan` over the basis computes one JVP or VJP per step instead.
Tensor jacobian(bool forward, const std::function<Tensor(const Tensor&)>& g, const Tensor& x, const Location& loc);

/// How jacfwd, jacrev and hessian form a Jacobian (internal: benchmarks and
/// tests force one path or the other; users leave it automatic).
enum class JacobianPath {
  automatic, ///< batched unless the batched tangents exceed budget_bytes
  batched,   ///< batched whenever every op has a batching rule
  scan,      ///< always one scan step per basis vector
};
/// The policy of detail::jacobian: the path and the byte budget of the
/// automatic choice (n basis vectors times the largest per-vector tangent
/// value; lib/api/Jacobian.cpp says why 1 GiB).
struct JacobianPolicy {
  JacobianPath path = JacobianPath::automatic;
  int64_t budget_bytes = int64_t(1) << 30;
};
/// Sets the policy for every later trace (of any thread); returns the one
/// before. Compiled Jacobians already cached keep the path they were traced with.
JacobianPolicy setJacobianPolicy(const JacobianPolicy& p);
/// The current policy.
JacobianPolicy jacobianPolicy();
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
  if constexpr (!(detail::hasTensor<P> || ...)) {
    detail::JitCore core(JitOptions{.name = "jvp"});
    return detail::callCompiled(core, [&f, sl](const auto& ps, const auto& ts) { return jvp(f, ps, ts, sl); }, primals,
                                tangents);
  } else {
    const Location loc = Location::from(sl);
    auto [out, xs, mark] = std::apply([&](const auto&... p) { return detail::traceFromMark(f, p...); }, primals);
    std::vector<Tensor> dxs;
    auto cd = [&](const Tensor& x) { dxs.push_back(x); };
    std::apply([&](const auto&... t) { (tree_for_each(t, cd), ...); }, tangents);
    std::vector<Tensor> ys;
    detail::appendLeaves(out, ys);
    const std::vector<Tensor> dys = detail::pushForward("jvp", mark, xs, dxs, ys, loc);
    const Tensor* it = dys.data();
    return std::make_pair(out, detail::rebuild<Tensor>(out, it));
  }
}

namespace detail {

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
    return detail::rebuild<Array>(*skeleton_, it);
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
  TraceMark mark;
  R y;
  std::vector<Tensor> xs;
  /// One tangent per primal leaf; zeros for outputs no tangent reaches.
  R operator()(const std::vector<Tensor>& tangents, std::source_location loc = std::source_location::current()) const {
    std::vector<Tensor> ys;
    appendLeaves(y, ys);
    const std::vector<Tensor> dys = pushForward("linearize", mark, xs, tangents, ys, Location::from(loc));
    const Tensor* it = dys.data();
    return rebuild<Tensor>(y, it);
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
  if constexpr (!(detail::hasTensor<P> || ...)) {
    using R = std::decay_t<std::invoke_result_t<F&, detail::tensor_type_t<P>...>>;
    detail::ArgCollector c;
    detail::TypeCollector tc;
    (detail::visitLeaves(primals, c), ...);
    (detail::visitLeaves(primals, tc), ...);
    std::shared_ptr<R> skeleton;
    auto [ys, state] = detail::hostLinearize(tc.types, c.leaves(), [&](std::span<const Tensor> params) {
      const Tensor* it = params.data();
      std::tuple<detail::tensor_type_t<P>...> targs{detail::toTensors(primals, it)...};
      R r = std::apply(f, targs);
      std::vector<Tensor> out;
      detail::appendLeaves(r, out);
      skeleton = std::make_shared<R>(std::move(r));
      return out;
    });
    Array* it = ys.data();
    auto y = detail::rebuild<Array>(*skeleton, it);
    return std::make_pair(std::move(y), LinearFn<R>(std::move(state), std::move(skeleton)));
  } else {
    auto [out, xs, mark] = detail::traceFromMark(f, primals...);
    using R = std::decay_t<decltype(out)>;
    return std::make_pair(out, detail::TracedLinear<R>{mark, out, std::move(xs)});
  }
}

/// The Jacobian of f with respect to the arguments `argnums` (default: the
/// first), as JAX's: per output leaf (f may return any structure of
/// Tensors), the argument's structure with one Jacobian per Tensor leaf,
/// shaped that output's shape + that leaf's shape; with several argnums, a
/// tuple of those per output leaf. One Tensor in, one Tensor out: a Tensor
/// (an Array when called with Arrays). jacfwd pushes the argument's basis
/// forward (cheap for few inputs), jacrev pulls the output's basis back
/// (cheap for few outputs); each Jacobian is one JVP or VJP batched over the
/// whole basis (vmap: matrix products where one basis vector made
/// matrix-vector products), a program whose size does not grow with the
/// basis. Where the batched tangents would pass 1 GiB, it is a loop of one
/// JVP or VJP per basis vector instead.
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
  /// Waits until every signature compiled so far runs its optimised code
  /// (JitOptions::tiers; as Jitted::wait_optimized).
  void wait_optimized() const { core_->waitOptimized(); }
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
      using J = decltype(atLeaf());
      auto relabel = [&](const Tensor&) { return atLeaf(); };
      return detail::mapLeaves<J>(skeleton, relabel);
    }
  }

private:
  /// Output leaf `o`'s Jacobians with respect to argument K: K's structure,
  /// a Jacobian per leaf.
  template <int K, class Tup> auto argument(const Tup& in, std::size_t o) const {
    using S = std::decay_t<std::tuple_element_t<K, Tup>>;
    static_assert(detail::hasTensor<S>,
                  "jacfwd/jacrev: a differentiated argument must be a Tensor or a structure of Tensors");
    std::size_t j = 0;
    auto perLeaf = [&](const Tensor& leaf) {
      const std::size_t at = j++;
      auto g = [&](const Tensor& x) {
        Tup moved = in;
        std::size_t c = 0;
        auto swap = [&](const Tensor& t) { return c++ == at ? x : t; };
        std::get<K>(moved) = detail::mapLeaves<Tensor>(std::get<K>(in), swap);
        const auto y = std::apply(f_, moved);
        std::vector<Tensor> ys;
        detail::appendLeaves(y, ys);
        return ys.at(o);
      };
      return detail::jacobian(Forward, g, leaf, loc_);
    };
    return detail::mapLeaves<Tensor>(std::get<K>(in), perLeaf);
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
  /// Waits until every signature compiled so far runs its optimised code
  /// (JitOptions::tiers; as Jitted::wait_optimized).
  void wait_optimized() const { core_->waitOptimized(); }
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
