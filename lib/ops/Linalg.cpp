// ops/Linalg.cpp — matmul: [..., M, K] @ [..., K, N] -> [..., M, N] with equal
// batch dimensions (the tracer broadcasts them and turns 1-D operands into
// matrices), either operand optionally stored transposed. Floating products
// of some size use the packed kernel of codegen/Gemm.cpp; others plain loops.
// Accumulation uses fused multiply-add and may reassociate.
// tril/triu: the lower or upper triangle of (a batch of) matrices.
#include "codegen/Emitter.h"
#include "codegen/Gemm.h"
#include "autodiff/JvpCtx.h"
#include "autodiff/VjpCtx.h"
#include "ops/Common.h"

#include <cstring>

namespace adjit::ops {
namespace {

using codegen::ElementCtx;
using codegen::LowerCtx;
using ir::EvalCtx;
using ir::InferCtx;

/// Unpacked products over at most this many terms (k) sum each element of
/// the result in a register. A GMM objective's 5 × [2,2]·[2,1000] products
/// (k = 2): i-k-j loops took about a fifth of its 7 us. At k = 12 too (ht's
/// Jacobian: 5 × [12,12]·[12,100], i-k-j loading and storing C 12 times)
/// the register sums took its time from 43 to 40 us (one Zen 4 core).
constexpr int64_t kRegisterDepth = 16;

/// A matmul's transposition flags (absent attributes are false).
struct Form {
  bool ta = false, tb = false;
};
Form formOf(const ir::Attrs& attrs) {
  auto flag = [&](std::string_view n) { return attrs.has(n) && attrs.boolean(n); };
  return {flag("transpose_a"), flag("transpose_b")};
}

struct Dims {
  int64_t batch, m, k, n;
};
/// Dimensions of op(a) [batch, m, k] and op(b) [batch, k, n].
Dims dimsOf(const Shape& a, const Shape& b, const Form& f) {
  const std::size_t r = a.size();
  return {num_elements(Shape(a.begin(), a.end() - 2)), f.ta ? a[r - 1] : a[r - 2], f.ta ? a[r - 2] : a[r - 1],
          f.tb ? b[r - 2] : b[r - 1]};
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
      .keepsRows = [](const Type&, std::size_t, const Type&, const ir::Attrs&) { return true; }, // reads its own index
      // The triangle of the cotangent: d tril(x) = tril(dx)
      // linear: the same triangle of the tangent
      .jvp = autodiff::linearJvp,
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] {
          const int64_t k = c.op.attrs.integer("k");
          return Lower ? tril(c.dy(), k) : triu(c.dy(), k);
        });
      },
      // acts on the last two axes: the batch is one more leading axis
      .batch = batching::leadingAxesBatch,
      // keeps some elements, zeroes the others
      .deps = sparsity::movementDeps,
  };
}

/// matmul's batching rule. With per-example operands [L..., ·, ·] (L the
/// op's own leading axes, often none) and a batch of B:
/// - both batched: the batched matmul, the batch one more leading axis;
/// - only a: the batch folds into op(a)'s rows, [L..., B·M, K] op(b), one
///   product of B times the rows instead of B products;
/// - only b: r = op(a) op(b) gives rᵀ = op(b)ᵀ op(a)ᵀ, and op(b)ᵀ of every
///   example stacks into [L..., B·N, K], so the batch folds into the rows of
///   the transposed product: one product, [L..., B·N, M], transposed back.
///   For a matrix-vector product (N = 1, no transpose_b) both ends are
///   reshapes.
/// Folding moves the batch next to the rows: a reshape when L is empty (or
/// of ones) and the layout allows, else a transpose of the batched operand
/// and of the result. Where those copies (B·(|x| + |r|) elements, x the
/// batched operand) exceed the B·|y| of broadcasting the unbatched operand y,
/// the batched matmul of the broadcast is taken instead.
///
/// Measured (test_vmap_linalg.cpp "vmap matmul forms: timing", f32, default
/// threads on a 2-core AVX2 host shared with other jobs, load ~9; median of
/// 20 runs, two runs), 256 examples of W x, W [256, 784] shared, x [784, n]:
///   n = 1:  this rule 0.48-0.55 ms; the batch folded into N instead
///           (W [K, B·n], transposes at both ends) 0.66-0.72 ms; the batched
///           matmul of W broadcast 43-49 ms (256 matrix-vector products).
///   n = 16: this rule 52-56 ms; folded into N 66-68 ms; broadcast 60-67 ms.
void batchMatmul(const batching::BatchCtx& c) {
  using batching::permuteAxes;
  using batching::permutationMoves;
  if (c.batched(0) && c.batched(1)) return c.result(0, c.reapply({c.x(0), c.x(1)}).at(0));
  const Form f = formOf(c.op.attrs);
  const int64_t r = c.type(0).rank(), B = c.size;
  const Shape &as = c.type(0).shape, &bs = c.type(1).shape, &rs = c.resultType().shape;
  const Shape lead(as.begin(), as.end() - 2);
  const int64_t M = rs[static_cast<std::size_t>(r - 2)], N = rs[static_cast<std::size_t>(r - 1)];
  const int64_t K = f.ta ? as[static_cast<std::size_t>(r - 2)] : as[static_cast<std::size_t>(r - 1)];
  // The batched operand's axes (batch 0, L 1..r-2, its matrix axes r-1 and
  // r) in the order [L..., B, u, v], u and v swapped when asked.
  auto foldPerm = [&](bool batchBetween, bool swapLast) {
    std::vector<int64_t> p;
    for (int64_t d = 1; d <= r - 2; ++d) p.push_back(d);
    if (!batchBetween) p.push_back(0);
    p.push_back(swapLast ? r : r - 1);
    if (batchBetween) p.push_back(0);
    p.push_back(swapLast ? r - 1 : r);
    return p;
  };
  // From the product's [L..., B, u, v] (axes 0..r) to [B, L..., ·, ·], u and v swapped when asked.
  auto unfoldPerm = [&](bool swapLast) {
    std::vector<int64_t> p{r - 2};
    for (int64_t d = 0; d < r - 2; ++d) p.push_back(d);
    p.push_back(swapLast ? r : r - 1);
    p.push_back(swapLast ? r - 1 : r);
    return p;
  };
  auto withLead = [&](std::initializer_list<int64_t> tail) {
    Shape s = lead;
    s.insert(s.end(), tail);
    return s;
  };
  const int64_t aSize = num_elements(as), bSize = num_elements(bs), rSize = num_elements(rs);
  if (c.batched(0)) {
    // a [B, L..., M, K] -> [L..., B·M, K]; with transpose_a [B, L..., K, M] -> [L..., K, B·M].
    const std::vector<int64_t> in = foldPerm(f.ta, false), out = unfoldPerm(false);
    const int64_t copies = (permutationMoves(c.x(0).shape(), in) ? aSize : 0) + (permutationMoves(withLead({B, M, N}), out) ? rSize : 0);
    if (copies > bSize) return c.result(0, c.reapply({c.x(0), c.bx(1)}).at(0));
    const Tensor a = reshape(permuteAxes(c.x(0), in), f.ta ? withLead({K, B * M}) : withLead({B * M, K}));
    const Tensor y = c.reapply({a, c.x(1)}).at(0);
    return c.result(0, permuteAxes(reshape(y, withLead({B, M, N})), out));
  }
  // Only b: op(b)ᵀ [N, K] of each example stacked along the rows, [L..., B·N, K].
  const std::vector<int64_t> in = foldPerm(false, !f.tb), out = unfoldPerm(true);
  const int64_t copies = (permutationMoves(c.x(1).shape(), in) ? bSize : 0) + (permutationMoves(withLead({B, N, M}), out) ? rSize : 0);
  if (copies > aSize) return c.result(0, c.reapply({c.bx(0), c.x(1)}).at(0));
  const Tensor bt = reshape(permuteAxes(c.x(1), in), withLead({B * N, K}));
  const Tensor y = matmul(bt, c.x(0), {.transpose_b = !f.ta}); // [L..., B·N, M]
  c.result(0, permuteAxes(reshape(y, withLead({B, N, M})), out));
}

/// r[b, i, j] reads op(a)[b, i, k] and op(b)[b, k, j] for every k: K terms
/// of two reads (a product: the pair couples, a read not with itself).
void matmulDeps(const sparsity::SparsityCtx& c) {
  const Form f = formOf(c.op.attrs);
  const Dims d = dimsOf(c.type(0).shape, c.type(1).shape, f);
  for (int64_t bt = 0; bt < d.batch; ++bt)
    for (int64_t i = 0; i < d.m; ++i)
      for (int64_t j = 0; j < d.n; ++j)
        for (int64_t k = 0; k < d.k; ++k) {
          const int64_t a = bt * d.m * d.k + (f.ta ? k * d.m + i : i * d.k + k);
          const int64_t b = bt * d.k * d.n + (f.tb ? j * d.k + k : k * d.n + j);
          c.term(0, (bt * d.m + i) * d.n + j, {sparsity::Read{0, a}, sparsity::Read{1, b}});
        }
}

/// matmul's fold: a product with identity matrices (`FoldCtx::identity`,
/// known to the fold pass from the ops that made them: one_hot of an iota,
/// as the Jacobians' basis is made, reshapes and broadcasts of it, or a
/// constant eye) is the other operand, op(x), with its transpose flag as a
/// transpose. Where jacfwd batches A e over a basis, the 256 × 256 × 256
/// product becomes a transpose the next loop reads in place (adjit_vmap_bench,
/// jacfwd of tanh(A x)).
///
/// Exact, as XLA's and JAX's simplifiers treat x * 1 and x + 0 (and adjit's
/// own mul and add folds do): the identity's zeros are taken as structural,
/// not multiplied out. Where the other operand's elements are finite and
/// nonzero the product is bitwise op(x) already (x * 1 exactly, + 0 * y
/// exactly); the fold differs only where the product would not equal op(x):
/// an inf or NaN elsewhere in x's row or column (0 * inf = NaN spreads along
/// it in the product, stays in its place in op(x)) and the sign of a zero
/// (-0 * 1 + 0 * y is +0 in the product, -0 in op(x)).
std::optional<ir::Folded> foldIdentityProduct(const ir::FoldCtx& c) {
  const Form f = formOf(c.op.attrs);
  for (std::size_t side : {0, 1}) {
    if (!c.identity(side)) continue;
    const ir::ValueId x = c.op.operands[1 - side];
    if (!(side == 0 ? f.tb : f.ta)) return ir::Folded{x};
    std::vector<int64_t> perm;
    const auto r = static_cast<int64_t>(c.type(x).rank());
    for (int64_t d = 0; d < r - 2; ++d) perm.push_back(d);
    perm.push_back(r - 1);
    perm.push_back(r - 2);
    ir::Attrs attrs;
    attrs.set("perm", perm);
    return ir::Folded{ir::Rewrite{OpKind::Transpose, {x}, std::move(attrs)}};
  }
  return std::nullopt;
}

} // namespace

void defineLinalgOps(Table& t) {
  set(t, OpKind::Tril, triangle<true>());
  set(t, OpKind::Triu, triangle<false>());

  // matmul(a, b) {transpose_a, transpose_b}: r[..., i, j] = sum_k op(a)[..., i, k] * op(b)[..., k, j]
  // where op(x) swaps the last two axes when its flag is set (TensorFlow's
  // tf.linalg.matmul flags): the VJP's products read transposes in place.
  set(t, OpKind::Matmul, {
      .infer = [](const InferCtx& c) {
        const Type &a = c.operands[0], &b = c.operands[1];
        c.expectSameDtype(a, b);
        if (a.dtype == DType::i1) c.fail("expected numeric operands, got {}", a.str());
        if (a.rank() < 2 || a.rank() != b.rank())
          c.fail("expected operands of equal rank >= 2, got {} and {}", a.str(), b.str());
        const Form f{c.boolean("transpose_a", false), c.boolean("transpose_b", false)};
        const std::size_t r = a.shape.size();
        const Dims d = dimsOf(a.shape, b.shape, f);
        const int64_t bk = f.tb ? b.shape[r - 1] : b.shape[r - 2];
        if (!std::equal(a.shape.begin(), a.shape.end() - 2, b.shape.begin()))
          c.fail("incompatible batch shapes {} and {}", a.str(), b.str());
        if (d.k != bk)
          c.fail("the contracting axes disagree: axis {} of {}{} has {}, but axis {} of {}{} has {}", r - (f.ta ? 2 : 1), a.str(),
                 f.ta ? " (transpose_a)" : "", d.k, r - (f.tb ? 1 : 2), b.str(), f.tb ? " (transpose_b)" : "", bk);
        Shape out(a.shape.begin(), a.shape.end() - 2);
        out.push_back(d.m);
        out.push_back(d.n);
        return std::vector<Type>{Type{a.dtype, out}};
      },
      .eval = [](const EvalCtx& c) {
        const Array &a = c.args[0], &b = c.args[1];
        const Form f = formOf(c.op.attrs);
        const Dims d = dimsOf(a.shape(), b.shape(), f);
        Array r(c.resultType());
        dispatch(a.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const T* A = elems<T>(a);
          const T* B = elems<T>(b);
          for (int64_t bt = 0; bt < d.batch; ++bt)
            for (int64_t i = 0; i < d.m; ++i)
              for (int64_t j = 0; j < d.n; ++j) {
                T s{};
                for (int64_t k = 0; k < d.k; ++k) {
                  const T x = A[bt * d.m * d.k + (f.ta ? k * d.m + i : i * d.k + k)];
                  const T y = B[bt * d.k * d.n + (f.tb ? j * d.k + k : k * d.n + j)];
                  s = wrap(s, wrap(x, y, [](auto u, auto v) { return u * v; }), [](auto u, auto v) { return u + v; }); // integers wrap
                }
                elems<T>(r)[(bt * d.m + i) * d.n + j] = s;
              }
        });
        return std::vector<Array>{std::move(r)};
      },
      // I op(b) = op(b), op(a) I = op(a): the operand itself, or its
      // transpose (an op the fused loops read in place) where its flag is set.
      .fold = foldIdentityProduct,
      .lower = [](LowerCtx& c) {
        const Form f = formOf(c.op.attrs);
        const Dims d = dimsOf(c.operandType(0).shape, c.operandType(1).shape, f);
        const DType t = c.resultType().dtype;
        llvm::Value *A = c.operandBuffer(0), *B = c.operandBuffer(1), *C = c.results[0];
        const codegen::GemmShape gs{t, d.batch, d.m, d.n, d.k, f.ta, f.tb};
        if (codegen::usePackedGemm(gs, c.vectorUnit())) return codegen::emitPackedGemm(c, gs, A, B, C);
        // Small or integer products: i-k-j loops, the inner one contiguous in
        // B and C when B is not transposed (vectorised), a dot product otherwise.
        const bool fl = is_floating(t);
        llvm::IRBuilder<>::FastMathFlagGuard guard(c.b);
        c.b.setFastMathFlags(c.reassocFlags());
        auto madd = [&](llvm::Value* x, llvm::Value* y, llvm::Value* acc) {
          return fl ? c.intrinsic(llvm::Intrinsic::fmuladd, {{x, y, acc}}) : c.b.CreateAdd(acc, c.b.CreateMul(x, y));
        };
        auto at = [&](int64_t batchStride, llvm::Value* bt, llvm::Value* rowOrCol, int64_t stride, llvm::Value* other) {
          return c.b.CreateAdd(c.b.CreateMul(bt, c.i64(batchStride)), c.b.CreateAdd(c.b.CreateMul(rowOrCol, c.i64(stride)), other));
        };
        // op(A)[i, k] and op(B)[k, j] as element indices.
        auto aIndex = [&](llvm::Value* bt, llvm::Value* i, llvm::Value* k) {
          return f.ta ? at(d.m * d.k, bt, k, d.m, i) : at(d.m * d.k, bt, i, d.k, k);
        };
        auto bIndex = [&](llvm::Value* bt, llvm::Value* k, llvm::Value* j) {
          return f.tb ? at(d.k * d.n, bt, j, d.k, k) : at(d.k * d.n, bt, k, d.n, j);
        };
        ADJIT_ASSERT(!c.hasPrologues(), "matmul: a prologue for an operand plain loops read in place");
        // Without tiles of its own, the whole of each matrix is the epilogue's tile.
        auto epilogue = [&] {
          if (!c.epilogue) return;
          c.loop(d.batch, [&](llvm::Value* bt) {
            llvm::Value* matrix = c.b.CreateInBoundsGEP(c.scalarType(t), C, c.b.CreateMul(bt, c.i64(d.m * d.n)));
            c.callEpilogue(bt, c.i64(0), c.i64(d.m), c.i64(0), c.i64(d.n), matrix, c.i64(d.n));
          });
        };
        if (f.tb) {
          llvm::Value* slot = c.scalarSlot(t);
          c.loop(d.batch, [&](llvm::Value* bt) {
            c.loop(d.m, [&](llvm::Value* i) {
              c.loop(d.n, [&](llvm::Value* j) {
                c.b.CreateStore(c.constant(t, 0), slot);
                c.loop(d.k, [&](llvm::Value* k) {
                  llvm::Value* acc = c.b.CreateLoad(c.scalarType(t), slot);
                  c.b.CreateStore(madd(c.load(t, A, aIndex(bt, i, k)), c.load(t, B, bIndex(bt, k, j)), acc), slot);
                });
                c.store(t, c.b.CreateLoad(c.scalarType(t), slot), C, at(d.m * d.n, bt, i, d.n, j));
              });
            });
          });
          return epilogue();
        }
        if (d.k <= kRegisterDepth) {
          // A short k: each element of C is summed in a register, its row of
          // A loaded once, and C written once (i-k-j would load and store it
          // k times, after a pass zeroing it).
          c.loop(d.batch, [&](llvm::Value* bt) {
            c.loop(d.m, [&](llvm::Value* i) {
              std::vector<llvm::Value*> a;
              for (int64_t k = 0; k < d.k; ++k) a.push_back(c.load(t, A, aIndex(bt, i, c.i64(k))));
              c.loop(d.n, [&](llvm::Value* j) {
                llvm::Value* acc = c.constant(t, 0);
                for (int64_t k = 0; k < d.k; ++k) acc = madd(a[static_cast<std::size_t>(k)], c.load(t, B, bIndex(bt, c.i64(k), j)), acc);
                c.store(t, acc, C, at(d.m * d.n, bt, i, d.n, j));
              });
            });
          });
          return epilogue();
        }
        c.loop(d.batch * d.m * d.n, [&](llvm::Value* i) { c.store(t, c.constant(t, 0), C, i); });
        c.loop(d.batch, [&](llvm::Value* bt) {
          c.loop(d.m, [&](llvm::Value* i) {
            c.loop(d.k, [&](llvm::Value* k) {
              llvm::Value* a = c.load(t, A, aIndex(bt, i, k));
              c.loop(d.n, [&](llvm::Value* j) {
                llvm::Value* cj = at(d.m * d.n, bt, i, d.n, j);
                c.store(t, madd(a, c.load(t, B, bIndex(bt, k, j)), c.load(t, C, cj)), C, cj);
              });
            });
          });
        });
        epilogue();
      },
      // the packed kernel reads both operands by panels, which a prologue can compute
      .tilesOperand = [](std::span<const Type> operands, std::size_t, const ir::Attrs& attrs, const codegen::VectorUnit& unit) {
        const Form f = formOf(attrs);
        const Dims d = dimsOf(operands[0].shape, operands[1].shape, f);
        return codegen::packsOperands({operands[0].dtype, d.batch, d.m, d.n, d.k, f.ta, f.tb}, unit);
      },
      .tileGrid = [](std::span<const Type> operands, const ir::Attrs& attrs, const codegen::VectorUnit& unit) {
        const Form f = formOf(attrs);
        const Dims d = dimsOf(operands[0].shape, operands[1].shape, f);
        return codegen::gemmTileGrid({operands[0].dtype, d.batch, d.m, d.n, d.k, f.ta, f.tb}, unit);
      },
      // C = op(A) op(B): d op(A) = dC op(B)^T, d op(B) = op(A)^T dC; a flag
      // on the other side of each product takes the place of a transpose.
      // d(A B) = dA B + A dB, with the same transpose flags
      .jvp = autodiff::bilinearJvp,
      .vjp = [](const autodiff::VjpCtx& c) {
        const Form f = formOf(c.op.attrs);
        c.grad(0, [&] {
          return f.ta ? matmul(c.x(1), c.dy(), {.transpose_a = f.tb, .transpose_b = true}) // dA = op(B) dC^T
                      : matmul(c.dy(), c.x(1), {.transpose_b = !f.tb});                    // dA = dC op(B)^T
        });
        c.grad(1, [&] {
          return f.tb ? matmul(c.dy(), c.x(0), {.transpose_a = true, .transpose_b = f.ta}) // dB = dC^T op(A)
                      : matmul(c.x(0), c.dy(), {.transpose_a = !f.ta});                    // dB = op(A)^T dC
        });
      },
      .batch = batchMatmul,
      .deps = matmulDeps,
  });
}

} // namespace adjit::ops
