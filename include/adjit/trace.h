// adjit/trace.h — nested structures of tensors (the C++ form of TensorFlow's
// nests: Tensor, std::tuple, std::pair, std::array, std::vector, nested) and
// adjit::trace, which records a function into an IR module.
#pragma once

#include <adjit/module.h>
#include <adjit/tensor.h>

#include <array>
#include <functional>
#include <memory>
#include <span>
#include <tuple>
#include <typeinfo>
#include <utility>
#include <vector>

namespace adjit {
namespace detail {

// ---- inputs: host-side leaves (Array, scalars, Type, Tensor) in containers ----------

/// Receives each leaf of an argument structure in order, and container sizes.
struct LeafSink {
  virtual void array(const Array& a) = 0;
  virtual void scalar(const Type& t, const void* data) = 0; ///< a C++ scalar, in place
  virtual void type(const Type& t) = 0;
  virtual void tensor(const Tensor& t) = 0;
  virtual void size(std::size_t n) = 0;
  virtual ~LeafSink() = default;
};

template <class A> struct In;

template <> struct In<Array> {
  using tensor_type = Tensor;
  static void visit(const Array& a, LeafSink& s) { s.array(a); }
  static Tensor build(const Array&, const Tensor*& it) { return *it++; }
};
template <> struct In<Type> {
  using tensor_type = Tensor;
  static void visit(const Type& t, LeafSink& s) { s.type(t); }
  static Tensor build(const Type&, const Tensor*& it) { return *it++; }
};
template <> struct In<Tensor> {
  using tensor_type = Tensor;
  static void visit(const Tensor& t, LeafSink& s) { s.tensor(t); }
  static Tensor build(const Tensor&, const Tensor*& it) { return *it++; }
};
/// The rank-0 type of a dtype (static storage).
const Type& scalar_type(DType t);

template <class S>
  requires std::is_arithmetic_v<S>
struct In<S> {
  static_assert(std::is_same_v<S, float> || std::is_same_v<S, double> || std::is_same_v<S, int32_t> ||
                    std::is_same_v<S, int64_t> || std::is_same_v<S, bool>,
                "scalar arguments must be float, double, int32_t, int64_t or bool");
  using tensor_type = Tensor;
  static void visit(const S& v, LeafSink& s) { s.scalar(scalar_type(dtype_of<S>()), &v); }
  static Tensor build(const S&, const Tensor*& it) { return *it++; }
};
template <class A> struct In<std::vector<A>> {
  using tensor_type = std::vector<typename In<A>::tensor_type>;
  static void visit(const std::vector<A>& v, LeafSink& s) {
    s.size(v.size());
    for (const A& a : v) In<A>::visit(a, s);
  }
  static tensor_type build(const std::vector<A>& v, const Tensor*& it) {
    tensor_type r;
    r.reserve(v.size());
    for (const A& a : v) r.push_back(In<A>::build(a, it));
    return r;
  }
};
template <class A, std::size_t N> struct In<std::array<A, N>> {
  using tensor_type = std::array<typename In<A>::tensor_type, N>;
  static void visit(const std::array<A, N>& v, LeafSink& s) {
    for (const A& a : v) In<A>::visit(a, s);
  }
  static tensor_type build(const std::array<A, N>& v, const Tensor*& it) {
    tensor_type r;
    for (std::size_t i = 0; i < N; ++i) r[i] = In<A>::build(v[i], it);
    return r;
  }
};
template <class... A> struct In<std::tuple<A...>> {
  using tensor_type = std::tuple<typename In<A>::tensor_type...>;
  static void visit(const std::tuple<A...>& v, LeafSink& s) {
    std::apply([&](const auto&... a) { (In<std::decay_t<decltype(a)>>::visit(a, s), ...); }, v);
  }
  static tensor_type build(const std::tuple<A...>& v, const Tensor*& it) {
    return std::apply([&](const auto&... a) { return tensor_type{In<std::decay_t<decltype(a)>>::build(a, it)...}; }, v);
  }
};
template <class A, class B> struct In<std::pair<A, B>> {
  using tensor_type = std::pair<typename In<A>::tensor_type, typename In<B>::tensor_type>;
  static void visit(const std::pair<A, B>& v, LeafSink& s) {
    In<A>::visit(v.first, s);
    In<B>::visit(v.second, s);
  }
  static tensor_type build(const std::pair<A, B>& v, const Tensor*& it) {
    auto a = In<A>::build(v.first, it);
    auto b = In<B>::build(v.second, it);
    return {std::move(a), std::move(b)};
  }
};

/// References in a structure (std::tie of outputs for Jitted::into) are their referents.
template <class A> struct In<A&> : In<A> {};

template <class A> using tensor_type_t = typename In<std::decay_t<A>>::tensor_type;

// ---- outputs: structures of Tensors become the same structures of Arrays ------------

template <class R> struct Out;
template <> struct Out<Tensor> {
  using array_type = Array;
  static void flatten(const Tensor& t, std::vector<Tensor>& out) { out.push_back(t); }
  static Array rebuild(const Tensor&, Array*& it) { return std::move(*it++); }
};
template <class R> struct Out<std::vector<R>> {
  using array_type = std::vector<typename Out<R>::array_type>;
  static void flatten(const std::vector<R>& v, std::vector<Tensor>& out) {
    for (const R& r : v) Out<R>::flatten(r, out);
  }
  static array_type rebuild(const std::vector<R>& v, Array*& it) {
    array_type a;
    a.reserve(v.size());
    for (const R& r : v) a.push_back(Out<R>::rebuild(r, it));
    return a;
  }
};
template <class R, std::size_t N> struct Out<std::array<R, N>> {
  using array_type = std::array<typename Out<R>::array_type, N>;
  static void flatten(const std::array<R, N>& v, std::vector<Tensor>& out) {
    for (const R& r : v) Out<R>::flatten(r, out);
  }
  static array_type rebuild(const std::array<R, N>& v, Array*& it) {
    array_type a;
    for (std::size_t i = 0; i < N; ++i) a[i] = Out<R>::rebuild(v[i], it);
    return a;
  }
};
template <class... R> struct Out<std::tuple<R...>> {
  using array_type = std::tuple<typename Out<R>::array_type...>;
  static void flatten(const std::tuple<R...>& v, std::vector<Tensor>& out) {
    std::apply([&](const auto&... r) { (Out<std::decay_t<decltype(r)>>::flatten(r, out), ...); }, v);
  }
  static array_type rebuild(const std::tuple<R...>& v, Array*& it) {
    return std::apply([&](const auto&... r) { return array_type{Out<std::decay_t<decltype(r)>>::rebuild(r, it)...}; }, v);
  }
};
template <class A, class B> struct Out<std::pair<A, B>> {
  using array_type = std::pair<typename Out<A>::array_type, typename Out<B>::array_type>;
  static void flatten(const std::pair<A, B>& v, std::vector<Tensor>& out) {
    Out<A>::flatten(v.first, out);
    Out<B>::flatten(v.second, out);
  }
  static array_type rebuild(const std::pair<A, B>& v, Array*& it) {
    auto a = Out<A>::rebuild(v.first, it);
    auto b = Out<B>::rebuild(v.second, it);
    return {std::move(a), std::move(b)};
  }
};

struct VariableState;

/// The variables a traced function uses: those it reads are parameters after
/// its own (in this order); those it assigns are outputs after its own.
struct TracedVariables {
  std::vector<std::shared_ptr<VariableState>> reads, writes;
};

/// Traces into a fresh function: `params` are its parameter types; `body`
/// receives the parameter tensors and returns the output tensors.
Module traceModule(const std::string& name, const std::vector<Type>& params,
                   const std::function<std::vector<Tensor>(std::span<const Tensor>)>& body,
                   TracedVariables* variables = nullptr);

/// Collects leaf types of an argument structure.
struct TypeCollector : LeafSink {
  std::vector<Type> types;
  void array(const Array& a) override { types.push_back(a.type()); }
  void scalar(const Type& t, const void*) override { types.push_back(t); }
  void type(const Type& t) override { types.push_back(t); }
  void tensor(const Tensor& t) override { types.push_back(t.type()); }
  void size(std::size_t) override {}
};

/// "f32[3], (f32[], i32[2])": the argument types, for error messages.
std::string describeArgs(const std::vector<Type>& types);

} // namespace detail

/// Traces `f` for arguments of the given types (adjit::Type leaves in any
/// supported structure) into a module holding one function named `name`.
template <class F, class... Types> Module trace_named(const std::string& name, F&& f, const Types&... types) {
  detail::TypeCollector tc;
  (detail::In<Types>::visit(types, tc), ...);
  return detail::traceModule(name, tc.types, [&](std::span<const Tensor> params) {
    const Tensor* it = params.data();
    std::tuple<detail::tensor_type_t<Types>...> args{detail::In<Types>::build(types, it)...};
    if constexpr (!std::is_invocable_v<F&, detail::tensor_type_t<Types>...>) {
      static_assert(std::is_invocable_v<F&, detail::tensor_type_t<Types>...>,
                    "trace: the function cannot be called with arguments of these types (wrong number or structure)");
    } else {
      using R = std::decay_t<std::invoke_result_t<F&, detail::tensor_type_t<Types>...>>;
      R r = std::apply(f, args);
      std::vector<Tensor> outs;
      detail::Out<R>::flatten(r, outs);
      return outs;
    }
  });
}

/// Traces `f` into a module with one function `@f`. `adjit::trace(f, Type{DType::f32, {3}})`.
template <class F, class... Types> Module trace(F&& f, const Types&... types) {
  return trace_named("f", std::forward<F>(f), types...);
}

} // namespace adjit
