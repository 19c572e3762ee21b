// autodiff/ControlFlowTrace.h — what the control-flow derivative rules share
// (ControlFlow.cpp: VJPs; ControlFlowJvp.cpp: JVPs and second order): ops
// created in the current trace, functions of its module, and the while_vjp
// op both directions build.
#pragma once

#include "autodiff/VjpCtx.h"
#include "ir/IR.h"
#include "trace/Tracer.h"

#include <adjit/tensor.h>

#include <optional>
#include <string>
#include <vector>

namespace adjit::autodiff::controlflow {

/// The trace the rules add their ops to.
detail::TraceState& current();
/// Creates op `kind` in the current trace; returns its results as Tensors.
std::vector<Tensor> create(ir::OpKind kind, const std::vector<Tensor>& operands, ir::Attrs attrs, std::vector<std::string> callees,
                           const Location& loc);
/// Function `name` of the current trace's module.
const ir::Function& fn(const std::string& name);
/// The function the module derived under `key` (a JVP or split of a body), or "".
std::string derived(const std::string& key);
/// Whether values of type t carry gradients.
inline bool floating(const Type& t) { return is_floating(t.dtype); }
/// Adds each present cotangent to its operand.
void addGrads(const VjpCtx& c, const std::vector<std::optional<Tensor>>& dxs);
/// The cotangents of the op's results (nullopt where none).
std::vector<std::optional<Tensor>> resultCts(const VjpCtx& c);
/// A while_vjp op on the loop (cond, body): `operands` are the k consts and
/// the carries' initial values, `dfinal` the cotangents of the floating
/// carries' final values. Returns the cotangents of the floating carries'
/// initial values, then of the floating consts.
std::vector<Tensor> whileVjpOf(const std::string& cond, const std::string& body, std::vector<Tensor> operands, std::size_t k,
                               const std::vector<Tensor>& dfinal, const Location& loc);

} // namespace adjit::autodiff::controlflow
