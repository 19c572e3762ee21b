// ir/IR.h — the SSA IR: modules of functions of ops over statically shaped tensors.
// Values are numbered per function; an op has a kind, operands, results,
// attributes, function references (callees) and a source location.
#pragma once

#include <adjit/array.h>
#include <adjit/dtype.h>
#include <adjit/error.h>

#include "ir/ValueList.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace adjit::ir {

enum class OpKind : uint16_t {
#define ADJIT_OP(Id, name, arity, traits) Id,
#include "ir/Ops.def"
};
inline constexpr std::size_t kNumOps = 0
#define ADJIT_OP(Id, name, arity, traits) +1
#include "ir/Ops.def"
    ;

/// An attribute value. Doubles always print with a '.' or exponent so the
/// parser can tell them from integers.
using Attr = std::variant<bool, int64_t, double, std::vector<int64_t>, DType, std::string, Array>;

/// Attributes of an op, kept sorted by name so printing is canonical.
class Attrs {
public:
  void set(std::string name, Attr value);
  bool has(std::string_view name) const { return find(name) != nullptr; }
  const Attr* find(std::string_view name) const;
  const std::vector<std::pair<std::string, Attr>>& entries() const { return entries_; }

  /// Typed getters for verified IR (a missing attribute is an internal error).
  int64_t integer(std::string_view name) const;
  bool boolean(std::string_view name) const;
  const std::vector<int64_t>& ints(std::string_view name) const;
  DType dtype(std::string_view name) const;
  const Array& array(std::string_view name) const;
  const std::string& string(std::string_view name) const;

private:
  std::vector<std::pair<std::string, Attr>> entries_;
};

struct Op {
  OpKind kind;
  ValueList operands;
  ValueList results;
  Attrs attrs;
  std::vector<std::string> callees; ///< names of functions of the module this op references
  Location loc;
};

/// A function: parameters, ops in SSA order, and the values it returns.
struct Function {
  std::string name;
  std::vector<Type> types; ///< type of every value, indexed by ValueId
  std::vector<ValueId> params;
  std::vector<ValueId> outputs;
  std::vector<Op> ops;
  Location loc;

  ValueId newValue(Type t) {
    types.push_back(std::move(t));
    return static_cast<ValueId>(types.size() - 1);
  }
  const Type& type(ValueId v) const { return types.at(static_cast<std::size_t>(v)); }
  std::vector<Type> paramTypes() const;
  std::vector<Type> resultTypes() const;
  /// "(f32[3], f32[]) -> (f32[3])".
  std::string signature() const;
};

/// How to trace a custom gradient's VJP function on first use; attached by
/// the tracer, keyed by the call site's forward function, never printed.
struct LazyVjp;
/// A copy of a lazy VJP for another module: materialising it adds functions
/// to one module only (defined with LazyVjp, in autodiff/CustomGradient.cpp).
std::shared_ptr<LazyVjp> copyLazyVjp(const LazyVjp& lazy);

/// An ordered set of uniquely named functions.
struct Module {
  std::vector<std::unique_ptr<Function>> functions;
  std::map<std::string, std::shared_ptr<LazyVjp>> lazyVjps;
  /// Functions generated from others ("vjp @g" -> its name), never printed: a
  /// function named like a generated one (a user's @g.vjp) is not taken for one.
  std::map<std::string, std::string> derived;

  Function* lookup(std::string_view name);
  const Function* lookup(std::string_view name) const;
  /// Adds an empty function named `base`, or `base.1`, `base.2`, ... if taken.
  Function& add(const std::string& base);
  std::unique_ptr<Module> clone() const;
};

} // namespace adjit::ir
