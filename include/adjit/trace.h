// adjit/trace.h — adjit::trace, which records a function into an IR module,
// and the walk that hands a call's arguments (trees, see adjit/tree.h) to it.
#pragma once

#include <adjit/module.h>
#include <adjit/tensor.h>
#include <adjit/tree.h>

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

/// The rank-0 type of a dtype (static storage).
const Type& scalar_type(DType t);

/// Gives each leaf of an argument structure to `s` in order, and each
/// std::vector's length (which its C++ type does not fix).
template <class A> void visitLeaves(const A& a, LeafSink& s) {
  using L = std::remove_cvref_t<A>;
  if constexpr (kindOf<L> == TreeKind::leaf) {
    if constexpr (std::is_same_v<L, Array>) {
      s.array(a);
    } else if constexpr (std::is_same_v<L, Type>) {
      s.type(a);
    } else if constexpr (std::is_same_v<L, Tensor>) {
      s.tensor(a);
    } else if constexpr (std::is_arithmetic_v<L>) {
      static_assert(std::is_same_v<L, float> || std::is_same_v<L, double> || std::is_same_v<L, int32_t> ||
                        std::is_same_v<L, int64_t> || std::is_same_v<L, bool>,
                    "scalar arguments must be float, double, int32_t, int64_t or bool");
      s.scalar(scalar_type(dtype_of<L>()), &a);
    } else {
      static_assert(kFalse<L>, "arguments are Arrays, C++ scalars, adjit::Types or Tensors, in structures of them");
    }
  } else {
    static_assert(kindOf<L> != TreeKind::none,
                  "arguments are Arrays, C++ scalars, adjit::Types or Tensors, in std::tuple, std::pair, std::array, "
                  "std::vector or structs registered with ADJIT_TREE");
    if constexpr (kindOf<L> == TreeKind::vector) s.size(a.size());
    if constexpr (kindOf<L> != TreeKind::none) Traits<L>::each(a, [&](const auto& c) { visitLeaves(c, s); });
  }
}

/// The structure of a traced function's argument for an argument `A` of the
/// call: the same containers with Tensor leaves.
template <class A> using tensor_type_t = tree_rebind_t<A, Tensor>;

/// The Tensors standing for argument `a` in a trace: its structure, leaves
/// taken from `it` in order.
template <class A> tensor_type_t<A> toTensors(const A& a, const Tensor*& it) { return rebuild<Tensor>(a, it); }

/// Appends the Tensor leaves of a result structure to `out`.
template <class R> void appendLeaves(const R& r, std::vector<Tensor>& out) {
  tree_for_each(r, [&](const Tensor& t) { out.push_back(t); });
}

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
  (detail::visitLeaves(types, tc), ...);
  return detail::traceModule(name, tc.types, [&](std::span<const Tensor> params) {
    const Tensor* it = params.data();
    std::tuple<detail::tensor_type_t<Types>...> args{detail::toTensors(types, it)...};
    if constexpr (!std::is_invocable_v<F&, detail::tensor_type_t<Types>...>) {
      static_assert(std::is_invocable_v<F&, detail::tensor_type_t<Types>...>,
                    "trace: the function cannot be called with arguments of these types (wrong number or structure)");
    } else {
      using R = std::decay_t<std::invoke_result_t<F&, detail::tensor_type_t<Types>...>>;
      R r = std::apply(f, args);
      std::vector<Tensor> outs;
      detail::appendLeaves(r, outs);
      return outs;
    }
  });
}

/// Traces `f` into a module with one function `@f`. `adjit::trace(f, Type{DType::f32, {3}})`.
template <class F, class... Types> Module trace(F&& f, const Types&... types) {
  return trace_named("f", std::forward<F>(f), types...);
}

} // namespace adjit
