// trace/OpsShared.h — what the files of user-facing op functions share
// (Ops.cpp defines them): finding the trace, recording an op, numpy
// broadcasting and weak dtypes made explicit.
#pragma once

#include "trace/Tracer.h"

#include <adjit/tensor.h>

#include <initializer_list>
#include <string_view>
#include <vector>

namespace adjit::detail {

/// The trace the tensors belong to (the current one when none is given);
/// `op` names the caller in errors.
TraceState& stateOf(std::initializer_list<const Tensor*> ts, const char* op, const Location& loc);
/// Records op k. Errors name `api`, the function the user called, where it is
/// not the op's own name (where builds a select, take a gather).
Tensor emit(TraceState& s, ir::OpKind k, const std::vector<Tensor>& in, ir::Attrs attrs, const Location& loc,
            std::string_view api = {});
/// x broadcast to `shape` (x itself when it has it), shared for a scalar's constant.
Tensor broadcastTo(TraceState& s, const Tensor& x, const Shape& shape, const Location& loc);
/// Gives weakly typed operands the dtype of a strongly typed one they meet
/// (the first such). Strong operands of different dtypes are left for the
/// op's type rule to report.
void meetDtypes(TraceState& s, const char* op, std::vector<Tensor*> xs, const Location& loc);
/// `xs` with their weakly typed members given the dtype of the first strong
/// one, for the ops that take a list of tensors (meetDtypes).
std::vector<Tensor> metDtypes(const char* op, std::vector<Tensor> xs, const Location& loc);

} // namespace adjit::detail

namespace adjit {
// The op-function files call these unqualified.
using detail::broadcastTo;
using detail::emit;
using detail::meetDtypes;
using detail::metDtypes;
using detail::stateOf;
using detail::TraceState;
using ir::OpKind;
} // namespace adjit
