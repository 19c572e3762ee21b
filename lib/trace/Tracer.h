// trace/Tracer.h — the state of a trace in progress: the module and function
// being built. Traces nest (a jitted function called inside another trace).
#pragma once

#include "ir/Builder.h"

#include <adjit/tensor.h>

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <memory>

namespace adjit::detail {

/// Lets a trace use tensors of other traces (a custom gradient's forward body
/// reading the enclosing trace; its grad_fn reading the forward's values):
/// each such tensor stands for a value of this trace, created on first use.
struct CaptureHook {
  virtual ~CaptureHook() = default;
  /// The type of `t` if this trace may capture it.
  virtual std::optional<Type> typeOf(const Tensor& t) = 0;
  /// The value standing for `t` in this trace.
  virtual ir::ValueId capture(const Tensor& t) = 0;
  /// The value already standing for `t`, without capturing anything (usable
  /// after the trace has ended).
  virtual std::optional<ir::ValueId> find(const Tensor& t) const = 0;
};

struct TraceState;

/// Tensors of `outer` used by a nested trace (a custom gradient's forward
/// body, a branch, a loop body) become extra parameters of the nested
/// function, in order of first use; so do tensors `outer` itself can capture.
/// `find` and `typeOf` keep working after `outer` has ended (a recompute_grad
/// region traced again by its gradient, long after its call site's trace).
struct OuterCaptures : CaptureHook {
  TraceState* outer; ///< valid while `outer` traces: only `capture` uses it
  uint64_t outerId;
  const ir::Function* outerFn;
  std::shared_ptr<CaptureHook> outerHook; ///< what `outer` itself captures
  TraceState* self = nullptr;
  std::vector<ir::ValueId> outerValues;      ///< the captured values of `outer`, in order of first use
  std::map<ir::ValueId, ir::ValueId> mapped; ///< outer value -> parameter of the nested function
  explicit OuterCaptures(TraceState* o);
  std::optional<Type> typeOf(const Tensor& t) override;
  ir::ValueId capture(const Tensor& t) override;
  std::optional<ir::ValueId> find(const Tensor& t) const override;
};

/// A variable's state: shared by every copy of the Variable handle.
struct VariableState {
  std::string name;
  Array value;
  bool trainable;
  std::mutex m; ///< guards value
};

/// A variable used by a trace: the parameter its first read became, and its
/// latest value in the trace (an assignment changes it).
struct VariableBinding {
  std::shared_ptr<VariableState> var;
  ir::ValueId param;
  ir::ValueId current;
  bool assigned = false;
  std::vector<ir::ValueId> reads; ///< every value read() returned (for tapes and grad)
};

struct TraceState {
  uint64_t id;
  std::shared_ptr<ir::Module> module;
  ir::Function* fn;
  ir::Builder builder;
  TraceState* parent;
  std::shared_ptr<CaptureHook> captures; ///< may be null
  std::vector<VariableBinding> variables;  ///< only in the outermost trace (or per jitted function)
  /// A custom gradient's forward: assignments are exported through its call
  /// site (value, then written by the enclosing trace).
  bool exportsAssigns = false;
  std::vector<std::pair<std::shared_ptr<VariableState>, ir::ValueId>> pendingAssigns;
  /// The body of a vmap (traced on one example, then batched): assignments
  /// in it, or in traces nested in it, are errors.
  bool vmapBody = false;
  /// While a VJP rule runs: the primal op's location, given to the ops it creates.
  std::optional<Location> locOverride;
  /// Weakly typed values (full without a dtype) and the value they hold:
  /// they take the dtype of the tensor they meet (lib/trace/Ops.cpp).
  std::map<ir::ValueId, double> weak;
  /// The scalar operands of binary ops (`x * 2`, a VJP rule's `1 - y`) are
  /// constants made once per trace, by dtype and bit pattern (`scalars`),
  /// and broadcast once per shape (`broadcasts`, keyed by those constants
  /// only). A sigmoid's VJP made a constant and a broadcast each time: 20,000
  /// of an unrolled LSTM gradient's 194,000 traced ops, which fold and cse
  /// then removed. full() makes its own constants: a weak one must not be
  /// shared with a strong one.
  std::map<std::pair<DType, uint64_t>, ir::ValueId> scalars;
  std::unordered_map<ir::ValueId, std::map<std::vector<int64_t>, ir::ValueId>> broadcasts;
  /// Functions already traced into this module for nested jit calls: (jit core, signature) -> name.
  std::map<std::pair<const void*, uint64_t>, std::pair<std::string, std::shared_ptr<void>>> callees;

  TraceState(std::shared_ptr<ir::Module> m, ir::Function& f, TraceState* parent);
};

/// The innermost trace on this thread, or nullptr.
TraceState* currentTrace();

/// Makes a new trace current for its lifetime: a function `name` in `module`.
class TraceScope {
public:
  TraceScope(std::shared_ptr<ir::Module> module, const std::string& name);
  ~TraceScope();
  TraceState& state() { return *state_; }
  Tensor param(const Type& t);
  void finish(const std::vector<Tensor>& outputs);

private:
  std::unique_ptr<TraceState> state_;
};

/// The trace `t` belongs to, which must be the current one; otherwise an
/// adjit::Error naming `op` at `loc`.
TraceState& traceOf(const Tensor& t, std::string_view op, const Location& loc);
Tensor wrap(TraceState& s, ir::ValueId v);
/// The outermost trace enclosing the current one (variables live there).
TraceState& rootTrace(const Location& loc);
/// The binding of `var` in `root`, created (as a new parameter) on first use.
VariableBinding& bindVariable(TraceState& root, const std::shared_ptr<VariableState>& var);

/// The value of the current trace `t` stands for (itself, or a capture).
ir::ValueId valueOf(const Tensor& t, std::string_view op, const Location& loc);

/// A function traced into `outer`'s module from `fn` on parameters of
/// `params` types; the tensors of enclosing traces it reads become further
/// parameters after those (`captured`: their values in `outer`, in order).
/// Leaves nothing behind if `fn` throws.
struct NestedFunction {
  std::string name;
  std::vector<ir::ValueId> captured;
};
NestedFunction traceNested(TraceState& outer, const std::string& base, const std::vector<Type>& params,
                           const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn);

/// Where the op of `f` that made `v` was called; unknown for a parameter. A
/// search from the end of `f`: for error messages, once there is an error.
Location madeAt(const ir::Function& f, ir::ValueId v);

} // namespace adjit::detail
