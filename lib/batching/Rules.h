// batching/Rules.h — each op's batching rule (vmap), what a rule sees, and the
// rules shared by families of ops. Owned here, by the batching transform
// that uses them; filled by the op's block in lib/ops at start-up
// (ops/OpTable.cpp), next to its derivative rules and lowering.
//
// The transform copies a function op by op. A value is either *unbatched*
// (the per-example value itself, shared by every example) or *batched*: one
// more leading axis of the batch size, axis 0, example b at index b. "Not
// batched" stays symbolic, as reverse mode keeps "no cotangent": an op whose
// operands are all unbatched is copied as it is and runs once; only an op
// with a batched operand calls its rule. Rules are written with the same
// Tensor API as user code, and their results are batched along axis 0.
#pragma once

#include "ir/IR.h"

#include <adjit/tensor.h>

#include <functional>
#include <initializer_list>
#include <optional>

namespace adjit::batching {

struct BatchCtx {
  const ir::Op& op;          ///< the op being batched (its ids are the source function's)
  const ir::Function& fn;    ///< the function it belongs to
  int64_t size;              ///< the batch size
  std::function<Tensor(ir::ValueId)> value; ///< the copy of a source value (batched ones with axis 0 added)
  std::function<bool(ir::ValueId)> isBatched;
  std::function<void(std::size_t, const Tensor&, bool)> set; ///< result k, and whether it is batched

  std::size_t arity() const { return op.operands.size(); }
  /// Operand i as copied: batched (axis 0 = the batch) or not.
  Tensor x(std::size_t i) const { return value(op.operands.at(i)); }
  bool batched(std::size_t i) const { return isBatched(op.operands.at(i)); }
  /// The per-example type of operand i / result k (the source's).
  const Type& type(std::size_t i) const { return fn.type(op.operands.at(i)); }
  const Type& resultType(std::size_t k = 0) const { return fn.type(op.results.at(k)); }
  /// Operand i with the batch axis at 0: broadcast along it if unbatched.
  Tensor bx(std::size_t i) const;
  /// Sets result k to `t`, batched along axis 0 (its type is the source's with the batch size prepended).
  void result(std::size_t k, const Tensor& t) const { set(k, t, true); }
  /// Sets result k to `t`, the same for every example.
  void unbatchedResult(std::size_t k, const Tensor& t) const { set(k, t, false); }
  /// The op again (same kind, callees, location) on other operands and attributes.
  std::vector<Tensor> reapply(const std::vector<Tensor>& operands, const ir::Attrs& attrs) const;
  std::vector<Tensor> reapply(const std::vector<Tensor>& operands) const { return reapply(operands, op.attrs); }
};

/// The batching rule of an op kind.
struct Rules {
  /// Sets every result from the copied operands, at least one of them
  /// batched. Required for every op (ops/OpTable.cpp gives elementwise ops
  /// elementwiseBatch unless their block sets one).
  void (*batch)(const BatchCtx&) = nullptr;
};

/// The batching rule of op kind k.
const Rules& rules(ir::OpKind k);
/// Sets op kind k's rule: called once per op, at start-up (ops/OpTable.cpp).
void define(ir::OpKind k, const Rules& r);

// Rules shared by families of ops.

/// Elementwise ops (and any op whose operands all have the result's shape
/// and that treats leading axes alike): every operand broadcast along the
/// batch axis where unbatched, the op applied once to the whole batch.
void elementwiseBatch(const BatchCtx& c);
/// Ops that are already batched over any leading axes of their operands
/// (cholesky, qr, triangular_solve, ...), whose attributes do not name
/// leading axes: every operand with the batch axis, the op applied once.
void leadingAxesBatch(const BatchCtx& c);
/// Ops of no operands (constant, iota): nothing batched reaches them, so the
/// driver never calls their rule; this one says so if it does.
void neverBatched(const BatchCtx& c);
/// Ops whose attributes `axes` name operand axes (reductions, cumulative
/// ops, ...) and that treat the other axes alike: every operand with the
/// batch axis, those attributes shifted past it (shiftAxes), the op applied once.
void shiftedBatch(const BatchCtx& c, std::initializer_list<std::string_view> axes);
/// Any op: a scan over the batch that applies the op to one example per
/// step (unbatched operands read whole). Correct for every op, fast for
/// none; for ops whose batched form does not exist (yet), said so in their block.
void loopBatch(const BatchCtx& c);

/// `attrs` with the integer (or integer-list) attribute `name` counting one
/// more leading axis: every entry ≥ 0 grows by one; negative entries count
/// from the end and stay.
ir::Attrs shiftAxes(const ir::Attrs& attrs, std::string_view name);
/// `attrs` with the integer-list attribute `name` (a shape) given a leading `size`.
ir::Attrs prependDim(const ir::Attrs& attrs, std::string_view name, int64_t size);

/// `t` (per-example type `type`, batched along axis 0 if `batched`) with
/// the batch axis at 0: broadcast along it if unbatched.
Tensor withBatch(const Tensor& t, bool batched, int64_t size);
/// Moves axis `from` of t to position `to` (numpy's moveaxis).
Tensor moveAxis(const Tensor& t, int64_t from, int64_t to);

/// One value of a batched copy: the Tensor, and whether it is batched along axis 0.
struct Batched {
  Tensor t;
  bool batched = false;
};

/// Copies the ops of `g` into the current trace on `args` (one per
/// parameter), batching every op that reads a batched value; returns the
/// copies of g's outputs. The caller's loop over ops: linear in g's size.
std::vector<Batched> batchInline(const ir::Function& g, const std::vector<Batched>& args, int64_t size);

/// Which outputs of `g` are batched when its parameters are batched as `in`
/// says: any output that depends on a batched parameter.
std::vector<char> batchReach(const ir::Function& g, const std::vector<char>& in);

/// Where each parameter and result of a batched function has its batch
/// axis (nullopt: none; negative counts from the end), and the batch size.
struct AxisSpec {
  std::vector<std::optional<int64_t>> in, out;
  int64_t size = 0;
};
/// `@name.vmap`: function `name` of `m` batched as `spec` says (JAX's
/// vmap with in_axes and out_axes). A result with out axis nullopt must not
/// depend on a batched parameter (an Error); an unbatched result with an
/// axis is broadcast along it. Built once per module and spec.
std::string vmapFunction(const std::shared_ptr<ir::Module>& m, const std::string& name, const AxisSpec& spec);

/// The batched twin of function `name` of `m`: parameters marked in `in`
/// take one more leading axis of `size`, and every output marked in `out`
/// is batched along axis 0 (broadcast if it does not depend on a batched
/// parameter); outputs not marked must not. Built once per module and
/// layout (`@name.vmap`), like the derivative functions. Returns its name.
std::string batchFunction(const std::shared_ptr<ir::Module>& m, const std::string& name, const std::vector<char>& in,
                          const std::vector<char>& out, int64_t size);

// Helpers for the rules of ops that reference functions (call, control
// flow, custom gradients), which batch their callees into twins.

/// The per-example type `t` with a leading batch axis of `size`.
Type batchedType(const Type& t, int64_t size);
/// The module of the current trace: where batched twins of callees go.
std::shared_ptr<ir::Module> currentModule();
/// Whether each operand of c's op is batched.
std::vector<char> operandsBatched(const BatchCtx& c);
/// Records op `kind` on `operands` with `attrs` and `callees`, at c's op's
/// location, in the current trace; returns its results.
std::vector<Tensor> emitOp(const BatchCtx& c, ir::OpKind kind, const std::vector<Tensor>& operands, const ir::Attrs& attrs,
                           const std::vector<std::string>& callees);

} // namespace adjit::batching

namespace adjit::batching {

/// Whether transposing a tensor of shape `s` by `perm` moves elements: false
/// when the axes longer than 1 keep their order (a reshape would do).
bool permutationMoves(const Shape& s, const std::vector<int64_t>& perm);
/// transpose(t, perm), as a reshape when it moves no element (permutationMoves).
Tensor permuteAxes(const Tensor& t, const std::vector<int64_t>& perm);

} // namespace adjit::batching
