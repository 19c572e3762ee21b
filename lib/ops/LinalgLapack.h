// ops/LinalgLapack.h — the lowerings of large factorisations that call
// LAPACK (through runtime/Lapack.h's entry points) instead of generated
// loops. Each op block's `lower` hook asks `use` with its own threshold,
// measured and written in the block's header comment.
#pragma once

#include "codegen/Emitter.h"

namespace adjit::ops::lapack {

/// Whether the op calls LAPACK for matrices of order `n`: the compilation
/// may (the JIT with a LAPACK library loaded: LowerCtx::lapack) and
/// n >= `threshold`, with n small enough for LAPACK's 32-bit sizes.
bool use(const codegen::LowerCtx& c, int64_t n, int64_t threshold);

/// Calls adjit_lapack_<op> on the op's buffers, all matrices of the batch.
void lowerCholesky(codegen::LowerCtx& c);
void lowerTriangularSolve(codegen::LowerCtx& c);
void lowerLu(codegen::LowerCtx& c);
void lowerQr(codegen::LowerCtx& c);
void lowerEigh(codegen::LowerCtx& c);
void lowerSvd(codegen::LowerCtx& c);

} // namespace adjit::ops::lapack
