// ops/LinalgLapack.cpp — lowerings of cholesky, triangular_solve, lu, qr,
// eigh and svd as one call to runtime/Lapack.h's entry point for the whole batch;
// the layouts, conventions and NaN results are handled there, in C++.
#include "ops/LinalgLapack.h"

#include <llvm/IR/Module.h>

namespace adjit::ops::lapack {
namespace {

using codegen::LowerCtx;

/// Beyond this order LAPACK's workspace sizes (2n² + 6n for eigh) overflow
/// its 32-bit integers.
constexpr int64_t kMaxOrder = 20000;

/// Emits name(f64, ints..., buffers...): void.
void emitCall(const LowerCtx& c, const char* name, std::vector<llvm::Value*> ints, const std::vector<llvm::Value*>& buffers) {
  std::vector<llvm::Type*> params{c.b.getInt32Ty()};
  std::vector<llvm::Value*> args{c.b.getInt32(c.operandType(0).dtype == DType::f64 ? 1 : 0)};
  for (llvm::Value* v : ints) params.push_back(v->getType()), args.push_back(v);
  for (llvm::Value* v : buffers) params.push_back(c.b.getPtrTy()), args.push_back(v);
  llvm::FunctionCallee fn = c.llvmModule().getOrInsertFunction(name, llvm::FunctionType::get(c.b.getVoidTy(), params, false));
  c.b.CreateCall(fn, args);
}

/// The number of matrices in a batch of [..., r, c].
int64_t batchOf(const Shape& s) { return num_elements(Shape(s.begin(), s.end() - 2)); }

bool flag(const ir::Attrs& attrs, std::string_view name) { return attrs.has(name) && attrs.boolean(name); }

} // namespace

bool use(const LowerCtx& c, int64_t n, int64_t threshold) { return c.lapack() && n >= threshold && n <= kMaxOrder; }

void lowerCholesky(LowerCtx& c) {
  const Shape& s = c.operandType(0).shape;
  emitCall(c, "adjit_lapack_cholesky", {c.i64(batchOf(s)), c.i64(s.back())}, {c.operandBuffer(0), c.results[0]});
}

void lowerTriangularSolve(LowerCtx& c) {
  const Shape &as = c.operandType(0).shape, &bs = c.operandType(1).shape;
  const ir::Attrs& at = c.op.attrs;
  const bool left = flag(at, "left_side");
  const int32_t flags = (flag(at, "lower") ? 1 : 0) | (left ? 2 : 0) | (flag(at, "transpose_a") ? 4 : 0) | (flag(at, "unit_diagonal") ? 8 : 0);
  const int64_t n = left ? bs.back() : bs[bs.size() - 2];
  emitCall(c, "adjit_lapack_triangular_solve", {c.b.getInt32(static_cast<uint32_t>(flags)), c.i64(batchOf(bs)), c.i64(as.back()), c.i64(n)},
           {c.operandBuffer(0), c.operandBuffer(1), c.results[0]});
}

void lowerLu(LowerCtx& c) {
  const Shape& s = c.operandType(0).shape;
  emitCall(c, "adjit_lapack_lu", {c.i64(batchOf(s)), c.i64(s[s.size() - 2]), c.i64(s.back())}, {c.operandBuffer(0), c.results[0], c.results[1], c.results[2]});
}

void lowerQr(LowerCtx& c) {
  const Shape& s = c.operandType(0).shape;
  emitCall(c, "adjit_lapack_qr", {c.i64(batchOf(s)), c.i64(s[s.size() - 2]), c.i64(s.back())},
           {c.operandBuffer(0), c.results[0], c.results[1]});
}

void lowerEigh(LowerCtx& c) {
  const Shape& s = c.operandType(0).shape;
  emitCall(c, "adjit_lapack_eigh", {c.i64(batchOf(s)), c.i64(s.back())}, {c.operandBuffer(0), c.results[0], c.results[1]});
}

void lowerSvd(LowerCtx& c) {
  const Shape& s = c.operandType(0).shape;
  emitCall(c, "adjit_lapack_svd", {c.i64(batchOf(s)), c.i64(s[s.size() - 2]), c.i64(s.back())},
           {c.operandBuffer(0), c.results[0], c.results[1], c.results[2]});
}

} // namespace adjit::ops::lapack
