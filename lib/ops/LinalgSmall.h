// ops/LinalgSmall.h — lowerings of cholesky, triangular_solve and lu for batches
// of small matrices, vectorised across the batch (LinalgSmallLowering.cpp),
// which the op blocks of LinalgSolve.cpp try before their per-matrix loops.
#pragma once

#include "codegen/Emitter.h"

#include <functional>
#include <vector>

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

/// A buffer of a batch of matrices of `elements` elements each.
struct Matrices {
  llvm::Value* buffer;
  int64_t elements;
};

/// The general form, for algorithms written once over an arithmetic whose
/// values are vectors (the spectral lowerings' Gen): for every group of G
/// matrices of a batch of `batch` (G = the target's vector width in
/// elements of t), the group's matrices of each of `in` gathered into
/// lane-interleaved scratch (element e of every matrix in vector e), then
/// compute(the inputs' scratch, the outputs' scratch, `extraBytes` of
/// scratch of its own), then the outputs' scratch scattered into `out` (all
/// in the op's workspace, which compute must not ask for again). Returns
/// false, emitting nothing, where the per-matrix code is the better choice
/// (as lowerCholeskyAcrossBatch: orders above 32, batches of fewer than G).
/// `vectorType` is the lanes' type.
bool acrossBatch(codegen::LowerCtx& c, DType t, int64_t batch, int64_t order, const std::vector<Matrices>& in,
                 const std::vector<Matrices>& out, uint64_t extraBytes,
                 const std::function<void(const std::vector<llvm::Value*>& in, const std::vector<llvm::Value*>& out, llvm::Value* extra)>& compute);
llvm::FixedVectorType* vectorType(const codegen::LowerCtx& c, DType t);

} // namespace adjit::ops::small
