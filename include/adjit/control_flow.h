// adjit/control_flow.h — conditionals and loops on traced values: cond,
// switch_case, fori_loop, scan and while_loop. A C++ `if` or `for` runs while
// tracing and sees no data; these record branches and loop bodies as
// functions of the module, compiled to real branches and loops (never
// unrolled) and differentiated in reverse mode with TensorFlow's semantics:
// only floating results carry cotangents, and a floating operand a branch or
// body does not use gets zeros, not "no gradient".
//
// Operands, carries and scanned values are nested structures of Tensors
// (std::tuple, std::pair, std::array, std::vector, structs registered with
// ADJIT_TREE; see adjit/tree.h). Tensors of the enclosing
// trace may be used inside branches and bodies: they become extra operands.
#pragma once

#include <adjit/autodiff.h>

#include <initializer_list>
#include <optional>
#include <variant>

namespace adjit {

/// How a differentiated scan or fori_loop keeps what its backward needs.
struct Checkpoint {
  /// What is kept.
  enum class Policy : uint8_t {
    all,      ///< every step's residuals (the default)
    every,    ///< the carry every k steps; each block of k steps recomputed
    binomial, ///< Griewank-Walther binomial checkpointing with s snapshots
  };
  Policy policy = Policy::all;
  int64_t n = 0; ///< k for every(k), s for binomial(s)

  /// The backward keeps the carry at every k-th step and recomputes each block
  /// of k steps from it (JAX's checkpointed scan): residual memory of about
  /// length / k carries plus one block's residuals, for one more forward pass.
  static Checkpoint every(int64_t k) { return {Policy::every, k}; }
  /// Binomial checkpointing (revolve): at most s carries held at once, and the
  /// fewest recomputed steps any schedule with s snapshots needs: r * length -
  /// C(s + r, s + 1) for the least r with C(s + r, s) >= length, so each step
  /// runs at most r + 1 times (r grows like log length when s does).
  static Checkpoint binomial(int64_t snapshots) { return {Policy::binomial, snapshots}; }
  /// "every(32)", "binomial(8)", "all steps".
  std::string str() const {
    return policy == Policy::every ? "every(" + std::to_string(n) + ")"
         : policy == Policy::binomial ? "binomial(" + std::to_string(n) + ")" : "all steps";
  }
};
/// Checkpoint::every(k).
inline Checkpoint every(int64_t k) { return Checkpoint::every(k); }
/// Checkpoint::binomial(snapshots).
inline Checkpoint binomial(int64_t snapshots) { return Checkpoint::binomial(snapshots); }

namespace detail {

/// A branch or body on the flattened leaves of its arguments.
using FlatFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct Structure;
/// Records `switch` over the branches (traced in order on `operands`' types);
/// `names` name them in errors ("true_fn"); each branch adds its result's
/// structure to `results` as it is traced. Returns the results' leaves.
std::vector<Tensor> switchCall(const Tensor& index, const std::vector<FlatFn>& branches, const std::vector<std::string>& names,
                               const std::vector<Structure>& results, const std::vector<Tensor>& operands, const char* api,
                               const Location& loc);
/// cond's index: the one-element i1 predicate as an i32 scalar (an error otherwise).
Tensor predicateIndex(const Tensor& pred, const Location& loc);
/// Records `scan`; `body` takes (carry..., x...) and returns (carry..., y...).
/// Returns the final carry's leaves and the stacked ys' leaves.
std::pair<std::vector<Tensor>, std::vector<Tensor>> scanCall(const FlatFn& body, const std::vector<Tensor>& init,
                                                             const std::vector<Tensor>& xs, std::optional<int64_t> length,
                                                             bool reverse, int64_t snapshots, const char* api, const Location& loc);
/// An Error at `loc` unless the policy's parameter is at least 1.
void checkPolicy(const Checkpoint& c, const char* api, const Location& loc);
/// Traces `fn` on `args` into a function called with {recompute = true}: its
/// gradient keeps no residuals and runs it again (checkpointing).
std::vector<Tensor> rematCall(const FlatFn& fn, const std::vector<Tensor>& args, const char* api, const Location& loc);
/// Records `while`; returns the final carry's leaves.
std::vector<Tensor> whileCall(const FlatFn& cond, const FlatFn& body, const std::vector<Tensor>& init,
                              std::optional<int64_t> maxIterations, const char* api, const Location& loc);

/// The Tensor leaves of a structure, in order.
template <class T> std::vector<Tensor> leavesOf(const T& s) {
  std::vector<Tensor> out;
  appendLeaves(s, out);
  return out;
}
/// `skeleton`'s structure with the leaves flat[from], flat[from + 1], ...
template <class T> T rebuildLike(const T& skeleton, const std::vector<Tensor>& flat, std::size_t from = 0) {
  const Tensor* it = flat.data() + from;
  return rebuild<Tensor>(skeleton, it);
}

/// The containers of a structure of Tensors, nested as written, with their
/// sizes (which a vector's C++ type does not fix); a leaf has no children.
struct Tree {
  using Kind = TreeKind;
  Kind kind = Kind::leaf;
  std::string_view name; ///< a registered struct's name ("Params"); empty otherwise
  std::vector<Tree> children;
  friend bool operator==(const Tree&, const Tree&) = default;
};
/// A structure of Tensors as a loop checks its carry: the Tree and the leaves' types in order.
struct Structure {
  Tree tree;
  std::vector<Type> leaves;
  friend bool operator==(const Structure&, const Structure&) = default;
};
/// Fills `node` with the containers of `s` and appends its leaves' types.
template <class T> void nestingOf(const T& s, Tree& node, std::vector<Type>& leaves) {
  if constexpr (kindOf<T> == TreeKind::leaf) {
    leaves.push_back(s.type());
  } else {
    node.kind = kindOf<T>;
    if constexpr (kindOf<T> == TreeKind::record) node.name = Traits<T>::name();
    Traits<T>::each(s, [&](const auto& c) { nestingOf(c, node.children.emplace_back(), leaves); });
  }
}
/// The Structure of `s` (Tensors of the current trace, or of one it may capture).
template <class T> Structure structureOf(const T& s) {
  Structure r;
  nestingOf(s, r.tree, r.leaves);
  return r;
}
/// An Error at `loc` unless the carry a loop body returned (`got`) has the
/// initial carry's structure, dtypes and shapes (`want`), naming both.
void expectCarry(const Structure& got, const Structure& want, const char* api, const Location& loc);

/// A cond predicate: a Tensor. A C++ bool is known while tracing: use an `if`.
struct Predicate {
  Tensor t;
  std::source_location loc;
  Predicate(const Tensor& p, std::source_location l = std::source_location::current()) : t(p), loc(l) {}
  template <class B>
    requires std::is_same_v<B, bool>
  Predicate(B) {
    static_assert(kFalse<B>, "cond: the predicate is a C++ bool, known while tracing: use an `if` instead");
  }
};

/// A switch_case index: a scalar integer Tensor.
struct CaseIndex {
  Tensor t;
  std::source_location loc;
  CaseIndex(const Tensor& i, std::source_location l = std::source_location::current()) : t(i), loc(l) {}
};

/// A structure a loop can carry: Tensors in tuples, pairs, vectors, arrays
/// and registered structs (an Array is data, not a traced value).
template <class T> concept TensorTree = allLeaves<std::decay_t<T>, IsTensor>();
#define ADJIT_NOT_A_TENSOR_TREE(api, what)                                                                         \
  api ": " what " must be Tensors, or tuples, pairs, vectors, arrays or ADJIT_TREE structs of them (make an "   \
      "Array a Tensor with constant(a))"

/// The branches called on the operands' structure; all must return the same structure.
template <class... Ops> struct Branches {
  std::tuple<const Ops&...> operands;
  std::vector<FlatFn> fns;
  std::shared_ptr<void> skeleton;
  std::vector<Structure> results; ///< of each branch traced so far

  template <class Fn> void add(const Fn& fn) {
    using R = std::decay_t<std::invoke_result_t<const Fn&, const Ops&...>>;
    fns.push_back([this, &fn](const std::vector<Tensor>& ps) {
      std::size_t at = 0;
      auto rebuildOne = [&](const auto& op) {
        using O = std::decay_t<decltype(op)>;
        O r = rebuildLike(op, ps, at);
        at += leavesOf(op).size();
        return r;
      };
      R r = std::apply([&](const auto&... op) { return std::apply(fn, std::tuple<std::decay_t<decltype(op)>...>{rebuildOne(op)...}); },
                       operands);
      if (!skeleton) skeleton = std::make_shared<R>(r);
      results.push_back(structureOf(r));
      std::vector<Tensor> out;
      appendLeaves(r, out);
      return out;
    });
  }
  std::vector<Tensor> flatOperands() const {
    std::vector<Tensor> flat;
    std::apply([&](const auto&... op) { ((void)[&] { auto l = leavesOf(op); flat.insert(flat.end(), l.begin(), l.end()); }(), ...); },
               operands);
    return flat;
  }
  template <class R> R result(const std::vector<Tensor>& flat) const { return rebuildLike(*std::static_pointer_cast<R>(skeleton), flat); }
};

/// A loop bound: a C++ integer (static) or a scalar integer Tensor (dynamic).
struct Bound {
  std::variant<int64_t, Tensor> v;
  Bound(int i) : v(int64_t{i}) {}
  Bound(int64_t i) : v(i) {}
  Bound(const Tensor& t) : v(t) {}
};

std::vector<Tensor> foriCall(const Bound& lower, const Bound& upper, const std::function<std::vector<Tensor>(const Tensor&, const std::vector<Tensor>&)>& body,
                             const std::vector<Tensor>& init, std::optional<int64_t> maxIterations, const Location& loc);
/// fori_loop's bounds as C++ integers (upper clamped to lower): an Error at
/// `loc` for a Tensor bound or a trip count past maxIterations.
std::pair<int64_t, int64_t> staticBounds(const Bound& lower, const Bound& upper, std::optional<int64_t> maxIterations, const Location& loc);

} // namespace detail

/// cond(pred, true_fn, false_fn, operands...): true_fn(operands...) where the
/// one-element i1 `pred` holds, else false_fn(operands...). Both branches
/// must return the same structure of the same dtypes and shapes. Compiled to
/// a branch: only the taken branch runs.
template <class T, class F, class... Ops>
auto cond(detail::Predicate pred, const T& true_fn, const F& false_fn, const Ops&... operands) {
  using R = std::decay_t<std::invoke_result_t<const T&, const Ops&...>>;
  static_assert(std::is_same_v<R, std::decay_t<std::invoke_result_t<const F&, const Ops&...>>>,
                "cond: true_fn and false_fn must return the same structure type");
  const Location loc = Location::from(pred.loc);
  detail::Branches<Ops...> b{{operands...}, {}, {}, {}};
  b.add(false_fn);
  b.add(true_fn);
  return b.template result<R>(
      detail::switchCall(detail::predicateIndex(pred.t, loc), b.fns, {"false_fn", "true_fn"}, b.results, b.flatOperands(), "cond", loc));
}

/// switch_case(index, {branch0, branch1, ...}, operands...): branch
/// clamp(index, 0, n-1) on the operands (JAX's lax.switch). `index` is a
/// scalar i32 or i64 Tensor; the branches are callables of one type (or pass
/// a std::tuple of callables of different types).
template <class B, class... Ops>
auto switch_case(detail::CaseIndex index, std::initializer_list<B> branches, const Ops&... operands) {
  using R = std::decay_t<std::invoke_result_t<const B&, const Ops&...>>;
  detail::Branches<Ops...> b{{operands...}, {}, {}, {}};
  std::vector<std::string> names;
  for (const B& fn : branches) {
    b.add(fn);
    names.push_back("branch " + std::to_string(names.size()));
  }
  return b.template result<R>(detail::switchCall(index.t, b.fns, names, b.results, b.flatOperands(), "switch_case", Location::from(index.loc)));
}
template <class... Bs, class... Ops>
auto switch_case(detail::CaseIndex index, const std::tuple<Bs...>& branches, const Ops&... operands) {
  using R = std::decay_t<std::invoke_result_t<const std::tuple_element_t<0, std::tuple<Bs...>>&, const Ops&...>>;
  static_assert((std::is_same_v<R, std::decay_t<std::invoke_result_t<const Bs&, const Ops&...>>> && ...),
                "switch_case: every branch must return the same structure type");
  detail::Branches<Ops...> b{{operands...}, {}, {}, {}};
  std::vector<std::string> names;
  std::apply([&](const auto&... fn) { ((b.add(fn), names.push_back("branch " + std::to_string(names.size()))), ...); }, branches);
  return b.template result<R>(detail::switchCall(index.t, b.fns, names, b.results, b.flatOperands(), "switch_case", Location::from(index.loc)));
}

/// Options of scan.
struct ScanOptions {
  std::optional<int64_t> length; ///< required when xs has no leaves; must agree with xs otherwise
  bool reverse = false;          ///< iterate from the last slice to the first; ys stay in the original order
  Checkpoint checkpoint = {};    ///< what the backward keeps (default: every step's residuals)
};

template <class Body, class C, class X>
  requires detail::TensorTree<C> && detail::TensorTree<X>
auto scan(const Body& body, const C& init, const X& xs, ScanOptions opts = {},
          std::source_location sl = std::source_location::current());
/// scan with a carry or xs that is not a structure of Tensors: a compile-time error.
template <class Body, class C, class X>
  requires(!(detail::TensorTree<C> && detail::TensorTree<X>))
std::pair<C, X> scan(const Body&, const C& init, const X& xs, ScanOptions = {},
                     std::source_location = std::source_location::current()) {
  static_assert(detail::kFalse<C, X>, ADJIT_NOT_A_TENSOR_TREE("scan", "init and xs"));
  return {init, xs}; // (a result type for what follows the call: no further errors)
}

namespace detail {

/// scan without checkpointing; snapshots > 0 marks the loop for binomial
/// checkpointing with that many snapshots (its VJP rule reads the mark).
template <class Body, class C, class X>
auto plainScan(const Body& body, const C& init, const X& xs, ScanOptions opts, std::source_location sl, int64_t snapshots = 0) {
  using R = std::decay_t<std::invoke_result_t<const Body&, const C&, const X&>>;
  using Y = std::decay_t<typename R::second_type>;
  static_assert(std::is_same_v<C, std::decay_t<typename R::first_type>>,
                "scan: the body must return std::pair{carry, y} with the carry of the same structure type as init");
  std::shared_ptr<Y> skeleton;
  const std::vector<Tensor> flatInit = leavesOf(init);
  const std::size_t nc = flatInit.size();
  FlatFn fn = [&](const std::vector<Tensor>& ps) {
    R r = body(rebuildLike(init, ps), rebuildLike(xs, ps, nc));
    expectCarry(structureOf(r.first), structureOf(init), "scan", Location::from(sl));
    skeleton = std::make_shared<Y>(r.second);
    std::vector<Tensor> out;
    appendLeaves(r.first, out);
    appendLeaves(r.second, out);
    return out;
  };
  auto [carry, ys] = scanCall(fn, flatInit, leavesOf(xs), opts.length, opts.reverse, snapshots, "scan", Location::from(sl));
  return std::pair<C, Y>{rebuildLike(init, carry), rebuildLike(*skeleton, ys)};
}

/// Rows [from, to) of t along its leading axis.
inline Tensor leadingRows(const Tensor& t, int64_t from, int64_t to) {
  std::vector<int64_t> start(static_cast<std::size_t>(t.rank()), 0);
  std::vector<int64_t> limit = t.shape();
  start[0] = from;
  limit[0] = to;
  return slice(t, start, limit);
}

/// The number of steps of a scan, or -1 where a plain scan reports an error.
template <class X> int64_t scanLength(const X& xs, const ScanOptions& opts) {
  const std::vector<Tensor> lx = leavesOf(xs);
  const int64_t n = opts.length ? *opts.length : (lx.empty() || lx[0].rank() == 0 ? -1 : lx[0].shape()[0]);
  return opts.length && !lx.empty() && (lx[0].rank() == 0 || lx[0].shape()[0] != n) ? -1 : n;
}

/// scan with Checkpoint::every(k): an outer scan over blocks of k steps, each
/// a recompute_grad region holding an inner scan, then the steps left over.
template <class Body, class C, class X>
auto checkpointedScan(const Body& body, const C& init, const X& xs, ScanOptions opts, std::source_location sl) {
  const int64_t k = opts.checkpoint.n;
  const int64_t n = scanLength(xs, opts);
  ScanOptions plain = opts;
  plain.checkpoint = {};
  if (n < 0 || k >= n) return plainScan(body, init, xs, plain, sl); // nothing to split (or an error plain scan reports)
  const int64_t blocks = n / k, mainSteps = blocks * k;
  auto toBlocks = [&](const Tensor& t) {
    std::vector<int64_t> shape = t.shape();
    shape[0] = k;
    shape.insert(shape.begin(), blocks);
    return reshape(leadingRows(t, 0, mainSteps), shape);
  };
  auto tailOf = [&](const Tensor& t) { return leadingRows(t, mainSteps, n); };
  const X mainXs = mapLeaves<Tensor>(xs, toBlocks);
  const X tailXs = mapLeaves<Tensor>(xs, tailOf);
  // Each block is traced once into a function whose call recomputes it in the backward.
  using Y = std::decay_t<typename std::decay_t<std::invoke_result_t<const Body&, const C&, const X&>>::second_type>;
  auto outerBody = [&](const C& c, const X& xb) {
    std::shared_ptr<std::pair<C, Y>> skeleton;
    FlatFn fn = [&](const std::vector<Tensor>& ps) {
      auto r = plainScan(body, rebuildLike(c, ps), rebuildLike(xb, ps, leavesOf(c).size()), ScanOptions{.length = k, .reverse = opts.reverse}, sl);
      skeleton = std::make_shared<std::pair<C, Y>>(r);
      std::vector<Tensor> out;
      appendLeaves(r, out);
      return out;
    };
    std::vector<Tensor> args = leavesOf(c), xl = leavesOf(xb);
    args.insert(args.end(), xl.begin(), xl.end());
    // (rematCall traces fn, which sets skeleton: call it before reading it.)
    const std::vector<Tensor> outs = rematCall(fn, args, "scan", Location::from(sl));
    return rebuildLike(*skeleton, outs);
  };
  auto runMain = [&](const C& c) { return plainScan(outerBody, c, mainXs, ScanOptions{.length = blocks, .reverse = opts.reverse}, sl); };
  auto runTail = [&](const C& c) { return plainScan(body, c, tailXs, ScanOptions{.length = n - mainSteps, .reverse = opts.reverse}, sl); };
  // Steps run in order (or in reverse order): the blocks cover [0, mainSteps), the tail the rest.
  auto first = opts.reverse ? runTail(init) : runMain(init);
  auto second = opts.reverse ? runMain(first.first) : runTail(first.first);
  const auto& mainYs = opts.reverse ? second.second : first.second;
  const auto& tailYs = opts.reverse ? first.second : second.second;
  std::vector<Tensor> ys, tail = leavesOf(tailYs);
  std::size_t i = 0;
  for (const Tensor& y : leavesOf(mainYs)) {
    std::vector<int64_t> shape = y.shape();
    shape.erase(shape.begin());
    shape[0] = mainSteps;
    Tensor joined = reshape(y, shape);
    ys.push_back(n > mainSteps ? concatenate({joined, tail[i]}) : joined);
    ++i;
  }
  return std::pair{second.first, rebuildLike(tailYs, ys)};
}

} // namespace detail

/// scan(body, init, xs, {.length, .reverse, .checkpoint}) -> std::pair{final_carry, ys}:
/// body(carry, x) -> std::pair{carry, y} runs once per slice of xs along its
/// leading axis (every leaf of xs is sliced; xs may be std::tuple<>{}), and
/// the y's are stacked along a new leading axis. The carry must keep its
/// structure, dtypes and shapes. Compiled to one loop calling the body.
template <class Body, class C, class X>
  requires detail::TensorTree<C> && detail::TensorTree<X>
auto scan(const Body& body, const C& init, const X& xs, ScanOptions opts, std::source_location sl) {
  detail::checkPolicy(opts.checkpoint, "scan", Location::from(sl));
  if (opts.checkpoint.policy == Checkpoint::Policy::every) return detail::checkpointedScan(body, init, xs, opts, sl);
  // binomial(s) only marks the loop; its VJP rule schedules the recomputation.
  return detail::plainScan(body, init, xs, opts, sl, opts.checkpoint.policy == Checkpoint::Policy::binomial ? opts.checkpoint.n : 0);
}

/// Options of fori_loop and while_loop.
struct LoopOptions {
  /// A bound on the trip count: running past it is an adjit::Error. Required
  /// to differentiate a loop whose trip count is known only at run time.
  std::optional<int64_t> max_iterations;
  /// What the backward keeps (fori_loop with C++ integer bounds only; as for scan).
  Checkpoint checkpoint = {};
};

/// fori_loop(lower, upper, body, init) -> the final carry: carry =
/// body(i, carry) for i in [lower, upper). Bounds are C++ integers (a loop of
/// known length) or scalar integer Tensors (a trip count known at run time),
/// mixed freely; `i` is i32 unless a bound is an i64 Tensor.
template <class Body, class C>
  requires detail::TensorTree<C>
C fori_loop(const detail::Bound& lower, const detail::Bound& upper, const Body& body, const C& init, LoopOptions opts = {},
            std::source_location sl = std::source_location::current()) {
  static_assert(std::is_same_v<C, std::decay_t<std::invoke_result_t<const Body&, const Tensor&, const C&>>>,
                "fori_loop: the body must return a carry of the same structure type as init");
  auto checkedBody = [&](const Tensor& i, const C& c) {
    C next = body(i, c);
    detail::expectCarry(detail::structureOf(next), detail::structureOf(init), "fori_loop", Location::from(sl));
    return next;
  };
  auto fn = [&](const Tensor& i, const std::vector<Tensor>& carry) {
    std::vector<Tensor> out;
    detail::appendLeaves(checkedBody(i, detail::rebuildLike(init, carry)), out);
    return out;
  };
  if (opts.checkpoint.policy != Checkpoint::Policy::all) { // a scan over the step indices
    const auto [lo, hi] = detail::staticBounds(lower, upper, opts.max_iterations, Location::from(sl));
    auto step = [&](const C& c, const Tensor& i) { return std::pair{checkedBody(i, c), std::tuple<>{}}; };
    const ScanOptions scanOpts{.length = std::nullopt, .reverse = false, .checkpoint = opts.checkpoint};
    return scan(step, init, add(iota({hi - lo}), full({}, static_cast<double>(lo), DType::i32)), scanOpts, sl).first;
  }
  return detail::rebuildLike(init, detail::foriCall(lower, upper, fn, detail::leavesOf(init), opts.max_iterations, Location::from(sl)));
}

/// fori_loop with a carry that is not a structure of Tensors: a compile-time error.
template <class Body, class C>
  requires(!detail::TensorTree<C>)
C fori_loop(const detail::Bound&, const detail::Bound&, const Body&, const C& init, LoopOptions = {},
            std::source_location = std::source_location::current()) {
  static_assert(detail::kFalse<C>, ADJIT_NOT_A_TENSOR_TREE("fori_loop", "the carry"));
  return init;
}

/// while_loop(cond_fn, body_fn, init, {.max_iterations}) -> the final carry:
/// carry = body_fn(carry) while cond_fn(carry) (a one-element i1) holds.
template <class Cond, class Body, class C>
  requires detail::TensorTree<C>
C while_loop(const Cond& cond_fn, const Body& body_fn, const C& init, LoopOptions opts = {},
             std::source_location sl = std::source_location::current()) {
  static_assert(std::is_same_v<C, std::decay_t<std::invoke_result_t<const Body&, const C&>>>,
                "while_loop: body_fn must return a carry of the same structure type as init");
  if (opts.checkpoint.policy != Checkpoint::Policy::all)
    throw Error("while_loop: .checkpoint needs a trip count known when tracing: use scan or fori_loop with C++ integer bounds",
                Location::from(sl));
  detail::FlatFn c = [&](const std::vector<Tensor>& ps) { return std::vector<Tensor>{cond_fn(detail::rebuildLike(init, ps))}; };
  detail::FlatFn b = [&](const std::vector<Tensor>& ps) {
    C next = body_fn(detail::rebuildLike(init, ps));
    detail::expectCarry(detail::structureOf(next), detail::structureOf(init), "while_loop", Location::from(sl));
    std::vector<Tensor> out;
    detail::appendLeaves(next, out);
    return out;
  };
  return detail::rebuildLike(init, detail::whileCall(c, b, detail::leavesOf(init), opts.max_iterations, "while_loop", Location::from(sl)));
}

/// while_loop with a carry that is not a structure of Tensors: a compile-time error.
template <class Cond, class Body, class C>
  requires(!detail::TensorTree<C>)
C while_loop(const Cond&, const Body&, const C& init, LoopOptions = {}, std::source_location = std::source_location::current()) {
  static_assert(detail::kFalse<C>, ADJIT_NOT_A_TENSOR_TREE("while_loop", "the carry"));
  return init;
}

} // namespace adjit

#undef ADJIT_NOT_A_TENSOR_TREE
