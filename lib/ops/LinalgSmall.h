// ops/LinalgSmall.h — lowerings of cholesky, triangular_solve and lu for batches
// of small matrices, vectorised across the batch (LinalgSmallLowering.cpp),
// which the op blocks of LinalgSolve.cpp try before their per-matrix loops.
#pragma once

#include "codegen/Emitter.h"

namespace adjit::ops::small {

/// The flags of a triangular solve (triangular_solve's attributes).
struct SolveFlags {
  bool lower, left, transpose, unit;
};

/// Emits cholesky for a batch of small matrices, one matrix per SIMD lane,
/// and returns true; returns false (emitting nothing) where the per-matrix
/// loops are the better choice: matrices larger than 32×32 or a batch
/// smaller than one vector of lanes.
bool lowerCholeskyAcrossBatch(codegen::LowerCtx& c);

/// The same for triangular_solve (operands a and b, result x).
bool lowerTriangularSolveAcrossBatch(codegen::LowerCtx& c, const SolveFlags& f);

/// The same for lu of square matrices (results lu, pivots, permutation).
bool lowerLuAcrossBatch(codegen::LowerCtx& c);

} // namespace adjit::ops::small
