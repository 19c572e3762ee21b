// ops/LinalgSpectral.h — what the decompositions' two files share: the
// bound on Jacobi sweeps, matrix dimensions, and the lowerings (generated
// code, LinalgSpectralLowering.cpp) that the op blocks of
// LinalgSpectral.cpp name.
#pragma once

#include "codegen/Emitter.h"

#include <limits>

namespace adjit::ops::spectral {

/// Bound on Jacobi sweeps. Both Jacobi methods converge quadratically, in 6
/// to 12 sweeps for n up to a few hundred; the bound only stops inputs that
/// never converge (NaNs stop at once: their tests are false).
constexpr int64_t kMaxSweeps = 40;

template <class T> constexpr T kEps = std::numeric_limits<T>::epsilon();

/// The matrix dimensions of a [..., m, n] type and the batch size.
struct Mat {
  int64_t batch, m, n;
};
inline Mat matOf(const Shape& s) {
  return {num_elements(Shape(s.begin(), s.end() - 2)), s[s.size() - 2], s[s.size() - 1]};
}

/// The generated-code versions of qrMatrix, eighMatrix and svdMatrix
/// (LinalgSpectral.cpp), step for step, over every matrix of the batch.
void lowerQr(codegen::LowerCtx& c);
/// lowerQr for a batch of at least a vector's lanes of matrices up to 32 ×
/// 32, one matrix per lane (LinalgSmall.h's acrossBatch): the same steps and
/// bits; returns false, emitting nothing, otherwise.
bool lowerQrAcrossBatch(codegen::LowerCtx& c);
void lowerEigh(codegen::LowerCtx& c);
/// lowerEigh across the batch (as lowerQrAcrossBatch); each lane sweeps
/// until its own matrix converges.
bool lowerEighAcrossBatch(codegen::LowerCtx& c);
/// lowerSvd across the batch (as lowerEighAcrossBatch).
bool lowerSvdAcrossBatch(codegen::LowerCtx& c);
void lowerSvd(codegen::LowerCtx& c);

} // namespace adjit::ops::spectral
