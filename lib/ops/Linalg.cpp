// ops/Linalg.cpp — matmul: [..., M, K] @ [..., K, N] -> [..., M, N] with equal
// batch dimensions (the tracer broadcasts them and turns 1-D operands into
// matrices). Lowered as i-k-j loops whose inner loop is contiguous and
// vectorised; accumulation uses fused multiply-add and may reassociate.
// tril/triu: the lower or upper triangle of (a batch of) matrices.
#include "codegen/Emitter.h"
#include "autodiff/VjpCtx.h"
#include "ops/Common.h"

#include <cstring>

namespace adjit::ops {
namespace {

using codegen::ElementCtx;
using codegen::LowerCtx;
using ir::EvalCtx;
using ir::InferCtx;

struct Dims {
  int64_t batch, m, k, n;
};
Dims dimsOf(const Shape& a, const Shape& b) {
  const std::size_t r = a.size();
  return {num_elements(Shape(a.begin(), a.end() - 2)), a[r - 2], a[r - 1], b[r - 1]};
}

/// Swaps the last two axes.
Tensor transposeLast(const Tensor& t) {
  std::vector<int64_t> perm(static_cast<std::size_t>(t.rank()));
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return transpose(t, perm);
}

/// Whether element (row, col) is kept: col - row <= k for the lower
/// triangle, col - row >= k for the upper one.
template <bool Lower> bool keeps(int64_t row, int64_t col, int64_t k) { return Lower ? col - row <= k : col - row >= k; }

/// tril (Lower) or triu {k}: x where the element is in the triangle, zero elsewhere.
template <bool Lower> Hooks triangle() {
  return {
      .infer = [](const InferCtx& c) {
        if (c.operands[0].rank() < 2) c.fail("expected a matrix (or a batch of them), got {}", c.operands[0].str());
        c.integer("k");
        return std::vector<Type>{c.operands[0]};
      },
      .eval = [](const EvalCtx& c) {
        const Array& x = c.args[0];
        const Shape& s = x.shape();
        const int64_t k = c.op.attrs.integer("k");
        Array r(c.resultType()); // zeros
        const std::size_t w = size_of(x.dtype());
        for (int64_t i = 0; i < x.size(); ++i) {
          const std::vector<int64_t> d = unravel(i, s);
          if (keeps<Lower>(d[d.size() - 2], d[d.size() - 1], k))
            std::memcpy(static_cast<char*>(r.raw()) + i * w, static_cast<const char*>(x.raw()) + i * w, w);
        }
        return std::vector<Array>{std::move(r)};
      },
      .fold = noFold,
      .element = [](ElementCtx& c) -> llvm::Value* {
        const Type& rt = c.resultType();
        const auto& d = c.dims(c.index, rt.shape);
        llvm::Value* diff = c.b.CreateSub(d[d.size() - 1], d[d.size() - 2]); // col - row
        llvm::Value* k = c.i64(c.op.attrs.integer("k"));
        llvm::Value* keep = Lower ? c.b.CreateICmpSLE(diff, k) : c.b.CreateICmpSGE(diff, k);
        return c.b.CreateSelect(keep, c.operand(0, c.index), c.constant(rt.dtype, 0));
      },
      // The triangle of the cotangent: d tril(x) = tril(dx)
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] {
          const int64_t k = c.op.attrs.integer("k");
          return Lower ? tril(c.dy(), k) : triu(c.dy(), k);
        });
      },
      .example = Lower ? R"(func @f(%0: f64[2,3,4]) -> (f64[2,3,4]) {
  %1 = tril(%0) {k = 1} : f64[2,3,4]
  return %1
})"
                       : R"(func @f(%0: f64[3,4]) -> (f64[3,4]) {
  %1 = triu(%0) {k = -1} : f64[3,4]
  return %1
})",
  };
}

} // namespace

void defineLinalgOps(Table& t) {
  set(t, OpKind::Tril, triangle<true>());
  set(t, OpKind::Triu, triangle<false>());

  // matmul(a, b): r[..., i, j] = sum_k a[..., i, k] * b[..., k, j]
  set(t, OpKind::Matmul, {
      .infer = [](const InferCtx& c) {
        const Type &a = c.operands[0], &b = c.operands[1];
        if (a.dtype != b.dtype) c.fail("mismatched dtypes {} and {}", a.str(), b.str());
        if (a.dtype == DType::i1) c.fail("expected numeric operands, got {}", a.str());
        if (a.rank() < 2 || a.rank() != b.rank())
          c.fail("expected operands of equal rank >= 2, got {} and {}", a.str(), b.str());
        const std::size_t r = a.shape.size();
        if (!std::equal(a.shape.begin(), a.shape.end() - 2, b.shape.begin()) || a.shape[r - 1] != b.shape[r - 2])
          c.fail("incompatible shapes {} and {}", a.str(), b.str());
        Shape out = a.shape;
        out[r - 1] = b.shape[r - 1];
        return std::vector<Type>{Type{a.dtype, out}};
      },
      .eval = [](const EvalCtx& c) {
        const Array &a = c.args[0], &b = c.args[1];
        Dims d = dimsOf(a.shape(), b.shape());
        Array r(c.resultType());
        dispatch(a.dtype(), [&](auto tag) {
          using T = decltype(tag);
          for (int64_t bt = 0; bt < d.batch; ++bt)
            for (int64_t i = 0; i < d.m; ++i)
              for (int64_t j = 0; j < d.n; ++j) {
                T s{};
                for (int64_t k = 0; k < d.k; ++k)
                  s = wrap(s, wrap(elems<T>(a)[(bt * d.m + i) * d.k + k], elems<T>(b)[(bt * d.k + k) * d.n + j],
                                   [](auto x, auto y) { return x * y; }),
                           [](auto x, auto y) { return x + y; }); // integers wrap
                elems<T>(r)[(bt * d.m + i) * d.n + j] = s;
              }
        });
        return std::vector<Array>{std::move(r)};
      },
      .fold = noFold,
      .lower = [](LowerCtx& c) {
        Dims d = dimsOf(c.operandType(0).shape, c.operandType(1).shape);
        const DType t = c.resultType().dtype;
        const bool f = is_floating(t);
        llvm::Value *A = c.operandBuffer(0), *B = c.operandBuffer(1), *C = c.results[0];
        llvm::IRBuilder<>::FastMathFlagGuard guard(c.b);
        c.b.setFastMathFlags(c.reassocFlags());
        c.loop(d.batch * d.m * d.n, [&](llvm::Value* i) { c.store(t, c.constant(t, 0), C, i); });
        c.loop(d.batch, [&](llvm::Value* bt) {
          c.loop(d.m, [&](llvm::Value* i) {
            llvm::Value* row = c.b.CreateAdd(c.b.CreateMul(bt, c.i64(d.m)), i);
            c.loop(d.k, [&](llvm::Value* k) {
              llvm::Value* a = c.load(t, A, c.b.CreateAdd(c.b.CreateMul(row, c.i64(d.k)), k));
              llvm::Value* brow = c.b.CreateMul(c.b.CreateAdd(c.b.CreateMul(bt, c.i64(d.k)), k), c.i64(d.n));
              llvm::Value* crow = c.b.CreateMul(row, c.i64(d.n));
              c.loop(d.n, [&](llvm::Value* j) {
                llvm::Value* cj = c.b.CreateAdd(crow, j);
                llvm::Value* bv = c.load(t, B, c.b.CreateAdd(brow, j));
                llvm::Value* acc = c.load(t, C, cj);
                llvm::Value* v = f ? c.intrinsic(llvm::Intrinsic::fmuladd, {{a, bv, acc}})
                                   : c.b.CreateAdd(acc, c.b.CreateMul(a, bv));
                c.store(t, v, C, cj);
              });
            });
          });
        });
      },
      // d(A B) = dA B + A dB: dA = dY B^T, dB = A^T dY
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] { return matmul(c.dy(), transposeLast(c.x(1))); });
        c.grad(1, [&] { return matmul(transposeLast(c.x(0)), c.dy()); });
      },
      .example = R"(func @f(%0: f64[2,3,4], %1: f64[2,4,2]) -> (f64[2,3,2]) {
  %2 = matmul(%0, %1) : f64[2,3,2]
  return %2
})",
  });
}

} // namespace adjit::ops
