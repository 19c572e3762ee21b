// autodiff/ControlFlow.h — reverse mode through switch, scan and while.
//
// The first time a reverse pass reaches one of these ops it is rebound in
// place to forward functions that also return what the backward reads
// (residuals; a scan stacks them per step, a switch returns the taken
// branch's and zeros for the others), and the backward is the same construct
// over the VJP functions: a switch on the same index, a scan in the opposite
// direction carrying the carries' cotangents. A while loop with
// max_iterations is differentiated as a scan of that many steps whose steps
// past the loop's exit leave the carry unchanged; one without is
// differentiated by a while_vjp op, which runs the loop again keeping each
// step's residuals on a stack sized at run time.
#pragma once

#include "autodiff/VjpCtx.h"

namespace adjit::autodiff {

struct JvpCtx;

void switchVjp(const VjpCtx& c);
void scanVjp(const VjpCtx& c);
void whileVjp(const VjpCtx& c);
/// while_vjp's own derivatives (second order through a loop without
/// max_iterations): each is the reverse of the loop's JVP, another while_vjp
/// (see the comment above whileVjpJvp in ControlFlow.cpp).
void whileVjpVjp(const VjpCtx& c);
void whileVjpJvp(const JvpCtx& c);

/// Forward mode: the same construct over JVP functions of the branches or
/// the body, carrying tangents next to the carries (no residuals, so a
/// while loop needs no max_iterations).
void switchJvp(const JvpCtx& c);
void scanJvp(const JvpCtx& c);
void whileJvp(const JvpCtx& c);


} // namespace adjit::autodiff
