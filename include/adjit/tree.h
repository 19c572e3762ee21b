// adjit/tree.h — structures of values (JAX's pytrees): TreeTraits says what a
// type is as a tree, and flatten, unflatten and map work on every tree. Every
// transform (jit, grad, scan, custom_gradient, ...) walks its arguments and
// results through this one facility, so a user's struct registered with
// ADJIT_TREE works wherever a std::tuple of Tensors does.
//
// Leaves: Tensor, Array, Type, C++ scalars, Variable, std::optional of a leaf
// and std::nullopt. Containers: std::tuple, std::pair, std::array,
// std::vector, registered structs, nested freely.
#pragma once

#include <adjit/tensor.h>
#include <adjit/variable.h>

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace adjit {

/// What a type is as a tree.
enum class TreeKind : uint8_t {
  none,   ///< not a tree: no transform accepts it
  leaf,   ///< a value: Tensor, Array, Type, C++ scalar, Variable, std::optional of a leaf, std::nullopt
  vector, ///< std::vector: its length is known only at run time
  array,  ///< std::array
  tuple,  ///< std::tuple
  pair,   ///< std::pair
  record, ///< a struct registered with ADJIT_TREE or ADJIT_TREE_TEMPLATE
};

/// How T is a tree. Containers define `kind`, `children` (a std::tuple of the
/// distinct types of their children), `static_leaves` (the number of leaves,
/// -1 when only a value knows it), `each(t, f)` (f on each child, in order),
/// `rebind<N>` (the same structure with every leaf of type N) and
/// `map<N>(t, f)` (that structure, child i being f(child i)). Leaves define
/// `kind` only; other types are TreeKind::none.
template <class T> struct TreeTraits {
  static constexpr TreeKind kind = TreeKind::none; ///< not a tree
};

namespace detail {
/// What every leaf's TreeTraits holds.
struct LeafTraits {
  static constexpr TreeKind kind = TreeKind::leaf; ///< a leaf
};
template <class T> using Traits = TreeTraits<std::remove_cvref_t<T>>;
template <class T> inline constexpr TreeKind kindOf = Traits<T>::kind;
template <class T, class N> struct Rebind;
} // namespace detail

/// T with every leaf replaced by N, the containers unchanged.
template <class T, class N> using tree_rebind_t = typename detail::Rebind<std::remove_cvref_t<T>, N>::type;

/// A symbolic value of a trace is a leaf.
template <> struct TreeTraits<Tensor> : detail::LeafTraits {};
/// A host array is a leaf.
template <> struct TreeTraits<Array> : detail::LeafTraits {};
/// A type stands for a leaf of that type (trace, Jitted::lower).
template <> struct TreeTraits<Type> : detail::LeafTraits {};
/// A variable is a leaf (a source of GradientTape::gradient).
template <> struct TreeTraits<Variable> : detail::LeafTraits {};
/// A C++ scalar is a leaf (a rank-0 argument of a jitted function).
template <class S>
  requires std::is_arithmetic_v<S>
struct TreeTraits<S> : detail::LeafTraits {};
/// An optional leaf is a leaf: a gradient that may be absent.
template <class L>
  requires(TreeTraits<L>::kind == TreeKind::leaf)
struct TreeTraits<std::optional<L>> : detail::LeafTraits {};
/// std::nullopt is a leaf: "no gradient" (TensorFlow's None).
template <> struct TreeTraits<std::nullopt_t> : detail::LeafTraits {};

namespace detail {

/// Whether every leaf of T satisfies P (false for a type that is not a tree).
template <class T, template <class> class P> constexpr bool allLeaves();
/// Whether some leaf of T satisfies P.
template <class T, template <class> class P> constexpr bool anyLeaf();
/// Whether tree_rebind_t<T, N> exists: a struct registered with ADJIT_TREE has
/// members of fixed types and holds only the leaves it was declared with.
template <class T, class N> constexpr bool rebindable();
/// The number of leaves when the type fixes it, else -1.
template <class T> constexpr int staticLeaves() {
  if constexpr (kindOf<T> == TreeKind::leaf) return 1;
  else if constexpr (kindOf<T> == TreeKind::none) return -1;
  else return Traits<T>::static_leaves;
}
/// The sum of the children's leaf counts, -1 if one is unknown.
template <class... C> constexpr int sumLeaves() {
  return ((staticLeaves<C>() < 0) || ...) ? -1 : (staticLeaves<C>() + ... + 0);
}
/// A std::tuple of the leaf types of T (with repeats), in no particular order.
template <class T> struct LeafTypes;

/// Facts about a container computed from its children's types.
template <class Children> struct Over;
template <class... C> struct Over<std::tuple<C...>> {
  template <template <class> class P> static constexpr bool all = (allLeaves<C, P>() && ...);
  template <template <class> class P> static constexpr bool any = (anyLeaf<C, P>() || ...);
  template <class N> static constexpr bool rebindable = (detail::rebindable<C, N>() && ...);
  using leaves = decltype(std::tuple_cat(std::declval<typename LeafTypes<C>::type>()...));
};

template <class T> struct LeafTypes {
  using type = std::conditional_t<kindOf<T> == TreeKind::leaf, std::tuple<std::remove_cvref_t<T>>, std::tuple<>>;
};
template <class T>
  requires(kindOf<T> != TreeKind::leaf && kindOf<T> != TreeKind::none)
struct LeafTypes<T> {
  using type = typename Over<typename Traits<T>::children>::leaves;
};

template <class T, template <class> class P> constexpr bool allLeaves() {
  if constexpr (kindOf<T> == TreeKind::leaf) return P<std::remove_cvref_t<T>>::value;
  else if constexpr (kindOf<T> == TreeKind::none) return false;
  else return Over<typename Traits<T>::children>::template all<P>;
}
template <class T, template <class> class P> constexpr bool anyLeaf() {
  if constexpr (kindOf<T> == TreeKind::leaf) return P<std::remove_cvref_t<T>>::value;
  else if constexpr (kindOf<T> == TreeKind::none) return false;
  else return Over<typename Traits<T>::children>::template any<P>;
}
template <class T, class N> constexpr bool rebindable() {
  if constexpr (kindOf<T> == TreeKind::leaf) return true;
  else if constexpr (kindOf<T> == TreeKind::none) return false;
  else return Traits<T>::template rebindable<N>;
}

template <class T, class N> struct Rebind {
  static_assert(kindOf<T> != TreeKind::none,
                "adjit: not a tree: leaves are Tensors, Arrays, Types, C++ scalars, Variables or std::optional of "
                "them, in std::tuple, std::pair, std::array, std::vector or structs registered with ADJIT_TREE");
  using type = N;
};
template <class T, class N>
  requires(kindOf<T> != TreeKind::leaf && kindOf<T> != TreeKind::none)
struct Rebind<T, N> {
  using type = typename Traits<T>::template rebind<N>;
};

/// What a struct registered with ADJIT_TREE maps to when its members cannot
/// hold the new leaves (see rebindable); never built.
template <class T, class N> struct CannotHoldLeaves {};

} // namespace detail

/// A std::vector is a container of its elements.
template <class A> struct TreeTraits<std::vector<A>> {
  static constexpr TreeKind kind = TreeKind::vector; ///< its length is known at run time only
  using children = std::tuple<A>;                    ///< the element type
  static constexpr int static_leaves = -1;           ///< a value knows its length
  /// f(element) for each element, in order.
  template <class F> static void each(const std::vector<A>& v, F&& f) {
    for (const A& x : v) f(x);
  }
  /// The vector of the elements rebound to N.
  template <class N> using rebind = std::vector<tree_rebind_t<A, N>>;
  /// Whether the elements can hold N.
  template <class N> static constexpr bool rebindable = detail::rebindable<A, N>();
  /// The vector of f(element).
  template <class N, class F> static rebind<N> map(const std::vector<A>& v, F&& f) {
    rebind<N> r;
    r.reserve(v.size());
    for (const A& x : v) r.push_back(f(x));
    return r;
  }
};

/// A std::array is a container of its K elements.
template <class A, std::size_t K> struct TreeTraits<std::array<A, K>> {
  static constexpr TreeKind kind = TreeKind::array; ///< fixed length
  using children = std::tuple<A>;                   ///< the element type
  /// K times the element's leaves.
  static constexpr int static_leaves = detail::staticLeaves<A>() < 0 ? -1 : detail::staticLeaves<A>() * static_cast<int>(K);
  /// f(element) for each element, in order.
  template <class F> static void each(const std::array<A, K>& v, F&& f) {
    for (const A& x : v) f(x);
  }
  /// The array of the elements rebound to N.
  template <class N> using rebind = std::array<tree_rebind_t<A, N>, K>;
  /// Whether the elements can hold N.
  template <class N> static constexpr bool rebindable = detail::rebindable<A, N>();
  /// The array of f(element).
  template <class N, class F> static rebind<N> map(const std::array<A, K>& v, F&& f) {
    rebind<N> r;
    for (std::size_t i = 0; i < K; ++i) r[i] = f(v[i]);
    return r;
  }
};

/// A std::tuple is a container of its elements (references, as from
/// std::tie, stand for their referents).
template <class... A> struct TreeTraits<std::tuple<A...>> {
  static constexpr TreeKind kind = TreeKind::tuple;         ///< fixed length
  using children = std::tuple<std::remove_cvref_t<A>...>;   ///< the element types
  static constexpr int static_leaves = detail::sumLeaves<A...>(); ///< the sum of the elements'
  /// f(element) for each element, in order.
  template <class F> static void each(const std::tuple<A...>& t, F&& f) {
    std::apply([&](const auto&... x) { (f(x), ...); }, t);
  }
  /// The tuple of the elements rebound to N.
  template <class N> using rebind = std::tuple<tree_rebind_t<A, N>...>;
  /// Whether every element can hold N.
  template <class N> static constexpr bool rebindable = (detail::rebindable<A, N>() && ...);
  /// The tuple of f(element).
  template <class N, class F> static rebind<N> map(const std::tuple<A...>& t, F&& f) {
    // Braced initialisation evaluates left to right: f sees the elements in order.
    return std::apply([&](const auto&... x) { return rebind<N>{f(x)...}; }, t);
  }
};

/// A std::pair is a container of first and second.
template <class A, class B> struct TreeTraits<std::pair<A, B>> {
  static constexpr TreeKind kind = TreeKind::pair;         ///< two children
  using children = std::tuple<std::remove_cvref_t<A>, std::remove_cvref_t<B>>; ///< first's and second's types
  static constexpr int static_leaves = detail::sumLeaves<A, B>(); ///< the sum of both's
  /// f(first), then f(second).
  template <class F> static void each(const std::pair<A, B>& p, F&& f) {
    f(p.first);
    f(p.second);
  }
  /// The pair of both rebound to N.
  template <class N> using rebind = std::pair<tree_rebind_t<A, N>, tree_rebind_t<B, N>>;
  /// Whether both can hold N.
  template <class N> static constexpr bool rebindable = detail::rebindable<A, N>() && detail::rebindable<B, N>();
  /// {f(first), f(second)}.
  template <class N, class F> static rebind<N> map(const std::pair<A, B>& p, F&& f) {
    auto a = f(p.first);
    auto b = f(p.second);
    return {std::move(a), std::move(b)};
  }
};

namespace detail {

/// What ADJIT_TREE records about a struct T: its name and the members that
/// are its children, in order.
template <class T, auto... Members> struct RecordFields {
  const char* name; ///< as written in ADJIT_TREE
  /// The members' types.
  using types = std::tuple<std::remove_cvref_t<decltype(std::declval<const T&>().*Members)>...>;
  static_assert(((kindOf<decltype(std::declval<const T&>().*Members)> != TreeKind::none) && ...),
                "ADJIT_TREE: every member listed must be a Tensor, an Array, a C++ scalar, or a tuple, pair, array, "
                "vector or registered struct of them");
  /// f(member) for each member, in order.
  template <class F> static void each(const T& t, F&& f) { (f(t.*Members), ...); }
  /// r.member_i = f(t.member_i) for each i (U: T's rebinding, of the same members).
  template <class U, auto... UMembers, class F> static void assign(const T& t, U& r, RecordFields<U, UMembers...>, F&& f) {
    ((r.*UMembers = f(t.*Members)), ...);
  }
};

/// Whether ADJIT_TREE or ADJIT_TREE_TEMPLATE registered T (found by
/// argument-dependent lookup, so the macro works in T's own namespace).
template <class T> concept RegisteredStruct = requires(const T* p) { adjit_tree_fields(p); };
/// Whether T is a class template instance registered with ADJIT_TREE_TEMPLATE.
template <class T, class N> concept RebindableStruct = requires(const T* p, const N* n) { adjit_tree_rebind(p, n); };

template <class T> using FieldsOf = decltype(adjit_tree_fields(static_cast<const T*>(nullptr)));
/// A struct of fixed member types holds N where rebinding its members to N
/// changes none of them.
template <class Types, class N> struct SameUnderRebind;
template <class... M, class N> struct SameUnderRebind<std::tuple<M...>, N> {
  static constexpr bool value = ((rebindable<M, N>() && std::is_same_v<tree_rebind_t<M, N>, M>) && ...);
};
/// The members' types rebound to N.
template <class Types, class N> struct RebindEach;
template <class... M, class N> struct RebindEach<std::tuple<M...>, N> {
  using type = std::tuple<tree_rebind_t<M, N>...>;
};
/// A registered struct T holding leaves of type N: the template's instance
/// for N (ADJIT_TREE_TEMPLATE), else T itself if it holds them already.
template <class T, class N, bool Template = RebindableStruct<T, N>> struct RecordRebind {
  using type = std::conditional_t<SameUnderRebind<typename FieldsOf<T>::types, N>::value, T, CannotHoldLeaves<T, N>>;
};
template <class T, class N> struct RecordRebind<T, N, true> {
  using type = std::remove_pointer_t<decltype(adjit_tree_rebind(static_cast<const T*>(nullptr), static_cast<const N*>(nullptr)))>;
};
template <class... C> constexpr int recordLeaves(std::tuple<C...>*) { return sumLeaves<C...>(); }

} // namespace detail

/// A struct registered with ADJIT_TREE (or ADJIT_TREE_TEMPLATE) is a
/// container of the members listed, in that order.
template <class T>
  requires detail::RegisteredStruct<T>
struct TreeTraits<T> {
  using Fields = detail::FieldsOf<T>;                 ///< what the macro recorded
  static constexpr TreeKind kind = TreeKind::record; ///< a registered struct
  using children = typename Fields::types;           ///< the listed members' types
  /// The sum of the members' leaves.
  static constexpr int static_leaves = detail::recordLeaves(static_cast<children*>(nullptr));
  /// The name given to the macro ("Params"), for messages.
  static const char* name() { return adjit_tree_fields(static_cast<const T*>(nullptr)).name; }
  /// f(member) for each listed member, in order.
  template <class F> static void each(const T& t, F&& f) { Fields::each(t, f); }
  /// Whether the struct can hold leaves of type N: a class template
  /// registered with ADJIT_TREE_TEMPLATE holds any; a struct registered with
  /// ADJIT_TREE only those its members already have.
  template <class N>
  static constexpr bool rebindable = detail::RebindableStruct<T, N> || detail::SameUnderRebind<children, N>::value;
  /// The struct holding leaves of type N: the template's instance for N, T
  /// itself, or a marker that rebindable<N> rules out.
  template <class N> using rebind = typename detail::RecordRebind<T, N>::type;
  /// The struct whose member i is f(member i); default-constructs it first.
  template <class N, class F> static rebind<N> map(const T& t, F&& f) {
    static_assert(rebindable<N>,
                  "adjit: a struct registered with ADJIT_TREE has members of fixed types and cannot hold these leaves "
                  "(a compiled call returns Arrays; gradients of GradientTape are std::optional<Tensor>): register a "
                  "class template with ADJIT_TREE_TEMPLATE (template <class T> struct S { T w, b; }) instead");
    if constexpr (rebindable<N>) {
      using R = rebind<N>;
      static_assert(std::is_same_v<typename detail::RebindEach<children, N>::type, typename TreeTraits<R>::children>,
                    "ADJIT_TREE_TEMPLATE: every leaf of S<L> must be an L (members of type L, or containers of L)");
      R r{};
      Fields::assign(t, r, detail::FieldsOf<R>{nullptr}, f);
      return r;
    } else {
      return {};
    }
  }
};

namespace detail {

/// f(leaf) for each leaf of t, in order.
template <class T, class F> void forEachLeaf(const T& t, F& f) {
  if constexpr (kindOf<T> == TreeKind::leaf) f(t);
  else Traits<T>::each(t, [&](const auto& c) { forEachLeaf(c, f); });
}
/// The same structure with leaf l replaced by f(l), of type N.
template <class N, class T, class F> tree_rebind_t<T, N> mapLeaves(const T& t, F& f) {
  if constexpr (kindOf<T> == TreeKind::leaf) return f(t);
  else return Traits<T>::template map<N>(t, [&](const auto& c) { return mapLeaves<N>(c, f); });
}
/// `skeleton`'s structure with its leaves taken from `it` in order (moved
/// when `it` points to non-const leaves); `it` is advanced past them.
template <class N, class T, class L> tree_rebind_t<T, N> rebuild(const T& skeleton, L*& it) {
  auto next = [&](const auto&) -> N {
    if constexpr (std::is_const_v<L>) return *it++;
    else return std::move(*it++);
  };
  return mapLeaves<N>(skeleton, next);
}
/// The leaf type tree_flatten gives when none is asked for: the common type
/// of T's leaves (Tensor for a tree without leaves).
template <class Leaves> struct CommonLeaf;
template <> struct CommonLeaf<std::tuple<>> {
  using type = Tensor;
};
template <class... L> struct CommonLeaf<std::tuple<L...>> {
  using type = std::common_type_t<L...>;
};
/// Predicates on leaf types, for allLeaves and anyLeaf.
template <class L> struct IsTensor : std::is_same<L, Tensor> {};

/// Throws adjit::Error unless `want` leaves were given.
inline void expectLeafCount(const char* api, std::size_t want, std::size_t got) {
  if (want != got)
    throw Error(std::string(api) + ": the structure has " + std::to_string(want) + " leaves, but " + std::to_string(got) +
                " were given");
}

} // namespace detail

/// Whether T is a tree (a leaf, or a container of trees).
template <class T> inline constexpr bool is_tree_v = detail::kindOf<T> != TreeKind::none;
/// The number of leaves of every value of type T, or -1 when T holds a
/// std::vector (tree_leaf_count counts a value's).
template <class T> inline constexpr int tree_static_leaves_v = detail::staticLeaves<std::remove_cvref_t<T>>();

/// Calls f(leaf) on each leaf of t, in order (depth first, members and
/// elements in order).
template <class T, class F> void tree_for_each(const T& t, F&& f) {
  static_assert(is_tree_v<T>, "tree_for_each: not a tree (see adjit/tree.h)");
  detail::forEachLeaf(t, f);
}

/// The number of leaves of t.
template <class T> std::size_t tree_leaf_count(const T& t) {
  if constexpr (tree_static_leaves_v<T> >= 0) {
    return static_cast<std::size_t>(tree_static_leaves_v<T>);
  } else {
    std::size_t n = 0;
    tree_for_each(t, [&](const auto&) { ++n; });
    return n;
  }
}

/// The leaves of t, in order, as L (by default the common type of its leaves:
/// Tensor for a structure of Tensors).
template <class L = void, class T> auto tree_flatten(const T& t) {
  using Leaf = std::conditional_t<std::is_void_v<L>, typename detail::CommonLeaf<typename detail::LeafTypes<T>::type>::type, L>;
  std::vector<Leaf> out;
  tree_for_each(t, [&](const auto& leaf) { out.push_back(leaf); });
  return out;
}

/// The structure of `like` with the given leaves, in order: JAX's
/// tree_unflatten, the structure given by a value (a std::vector's length
/// is known only from one). A count other than like's is an adjit::Error.
template <class T, class L> tree_rebind_t<T, L> tree_unflatten(const T& like, std::span<const L> leaves) {
  detail::expectLeafCount("tree_unflatten", tree_leaf_count(like), leaves.size());
  const L* it = leaves.data();
  return detail::rebuild<L>(like, it);
}
/// The same for a vector of leaves.
template <class T, class L> tree_rebind_t<T, L> tree_unflatten(const T& like, const std::vector<L>& leaves) {
  return tree_unflatten(like, std::span<const L>(leaves));
}
/// A structure of type T, whose size the type fixes (no std::vector inside),
/// from its leaves in order. A wrong count is an adjit::Error.
template <class T, class L> T tree_unflatten(std::span<const L> leaves) {
  static_assert(tree_static_leaves_v<T> >= 0,
                "tree_unflatten: T holds a std::vector, whose length only a value knows: pass one as `like`");
  return tree_unflatten(T{}, leaves);
}

/// The structure of t with each leaf l replaced by f(l), as JAX's tree_map;
/// the new leaves have the common type of what f returns.
template <class F, class T> auto tree_map(F&& f, const T& t) {
  static_assert(is_tree_v<T>, "tree_map: not a tree (see adjit/tree.h)");
  using Leaves = typename detail::LeafTypes<T>::type;
  using N = decltype([]<class... L>(std::tuple<L...>*) {
    if constexpr (sizeof...(L) == 0) return std::type_identity<Tensor>{};
    else return std::type_identity<std::common_type_t<std::decay_t<std::invoke_result_t<F&, const L&>>...>>{};
  }(static_cast<Leaves*>(nullptr)))::type;
  return detail::mapLeaves<N>(t, f);
}

} // namespace adjit

// ---- registering users' structs ---------------------------------------------

#define ADJIT_TREE_PARENS ()
#define ADJIT_TREE_EXPAND(...) ADJIT_TREE_EXPAND3(ADJIT_TREE_EXPAND3(ADJIT_TREE_EXPAND3(ADJIT_TREE_EXPAND3(__VA_ARGS__))))
#define ADJIT_TREE_EXPAND3(...) ADJIT_TREE_EXPAND2(ADJIT_TREE_EXPAND2(ADJIT_TREE_EXPAND2(ADJIT_TREE_EXPAND2(__VA_ARGS__))))
#define ADJIT_TREE_EXPAND2(...) ADJIT_TREE_EXPAND1(ADJIT_TREE_EXPAND1(ADJIT_TREE_EXPAND1(ADJIT_TREE_EXPAND1(__VA_ARGS__))))
#define ADJIT_TREE_EXPAND1(...) __VA_ARGS__
/// `, &T::a, &T::b` for the members a, b.
#define ADJIT_TREE_MEMBERS(T, ...) __VA_OPT__(ADJIT_TREE_EXPAND(ADJIT_TREE_MEMBERS_NEXT(T, __VA_ARGS__)))
#define ADJIT_TREE_MEMBERS_NEXT(T, m, ...) , &T::m __VA_OPT__(ADJIT_TREE_MEMBERS_AGAIN ADJIT_TREE_PARENS(T, __VA_ARGS__))
#define ADJIT_TREE_MEMBERS_AGAIN() ADJIT_TREE_MEMBERS_NEXT

/// Registers a struct as a tree whose children are the listed members, in
/// that order: `struct Params { adjit::Tensor w, b; }; ADJIT_TREE(Params, w, b)`,
/// at namespace scope in Params' namespace. The struct must be default
/// constructible and its members public. Its member types are fixed: it
/// holds the leaves it was declared with (Tensors, say), so transforms that
/// keep the leaf type (grad, scan, cond, custom_gradient, jit inside a
/// trace) accept and return it, but a compiled call cannot return it with
/// Arrays: for that, register a class template with ADJIT_TREE_TEMPLATE.
#define ADJIT_TREE(Type, ...)                                                                                  \
  [[maybe_unused]] inline ::adjit::detail::RecordFields<Type ADJIT_TREE_MEMBERS(Type, __VA_ARGS__)>           \
  adjit_tree_fields(const Type*) {                                                                             \
    return {#Type};                                                                                            \
  }

/// Registers a class template of one leaf type, `template <class T> struct
/// Params { T w, b; };  ADJIT_TREE_TEMPLATE(Params, w, b)`: Params<L> holds
/// leaves of type L (its members are L, or containers of L), and maps to
/// Params<N> for other leaves, so jit takes Params<Array>, traces
/// f(Params<Tensor>) and returns Params<Array> for a Params<Tensor> result,
/// and GradientTape's gradients come as Params<std::optional<Tensor>>.
#define ADJIT_TREE_TEMPLATE(Template, ...)                                                                     \
  template <class AdjitLeaf, class AdjitNewLeaf>                                                               \
  Template<AdjitNewLeaf>* adjit_tree_rebind(const Template<AdjitLeaf>*, const AdjitNewLeaf*);                   \
  template <class AdjitLeaf>                                                                                   \
  [[maybe_unused]] inline ::adjit::detail::RecordFields<Template<AdjitLeaf> ADJIT_TREE_MEMBERS(                \
      Template<AdjitLeaf>, __VA_ARGS__)>                                                                       \
  adjit_tree_fields(const Template<AdjitLeaf>*) {                                                              \
    return {#Template};                                                                                        \
  }
