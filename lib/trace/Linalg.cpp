// trace/Linalg.cpp — adjit::linalg: recording cholesky, triangular_solve and
// lu (ops of their own, lib/ops/LinalgSolve.cpp), and the composites built on
// them and on existing ops (solve, inv, det, slogdet, cho_solve,
// matrix_power, trace, diagonal, diag, outer, kron, norm).
//
// solve, inv, det and slogdet carry their own derivatives (Giles 2008), as
// matrix expressions on the LU factors the forward computed, never by
// differentiating lu and the triangular solves: the factors and the result
// are computed by plain ops, then passed through a custom_jvp whose forward
// is the identity and whose rule is the JVP below (reverse mode transposes
// it: it is linear in the tangents). With A = P^T L U and S(r) = A^-1 r =
// U^-1 L^-1 P r, two triangular solves on the factors:
//   solve   x = A^-1 b:        dx = S(db - dA x);       bbar = A^-T xbar, abar = -bbar x^T
//   inv     C = A^-1:          dC = -S(dA C);           abar = -C^T Cbar C^T
//   det     d = det A:         dd = d tr S(dA);         abar = dbar d A^-T
//   slogdet l = log|det A|:    dl = tr S(dA);           abar = lbar A^-T   (sign: no tangent)
// Second derivatives differentiate the rule, whose factors and results are
// plain ops of the forward: they go through lu's and triangular_solve's own
// rules. A singular A (a zero pivot in U) makes S divide by zero: the
// derivatives of all four are then inf or NaN, also det's (JAX's det has a
// cofactor rule that is finite for matrices of rank n - 1; adjit has not).
// Measured (bench/linalg_bench.cpp, the gradient of sum(solve(a, b) * w) in a
// and b, one right-hand side, f64, one thread, a busy 2-core machine):
// 64×64 23 µs (125 µs through lu's rule), 256×256 0.84 ms (4.5 ms); LAPACK
// by hand (dgesv, dgetrs, an outer product) 17 µs and 0.35 ms. With P r a
// gather (permuteRows) and trsv for one vector (runtime/Lapack.cpp), load
// ~5: 21 µs and 0.53 ms, LAPACK's 19 µs and 0.47 ms.
#include "ir/OpInfo.h"
#include "support/Assert.h"
#include "trace/Tracer.h"

#include <adjit/custom_gradient.h>
#include <adjit/linalg.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <span>
#include <limits>

namespace adjit::linalg {
namespace {

/// Records op k on `in` and returns its results.
std::vector<Tensor> record(std::string_view api, ir::OpKind k, const std::vector<Tensor>& in, ir::Attrs attrs,
                           const Location& loc) {
  detail::TraceState* s = nullptr;
  for (const Tensor& t : in) s = &detail::traceOf(t, api, loc);
  ADJIT_ASSERT(s, "linalg ops take operands");
  ir::ValueList ids;
  for (const Tensor& t : in) ids.push_back(detail::valueOf(t, api, loc));
  const ir::ValueList res = s->builder.create(k, std::move(ids), std::move(attrs), {}, s->locOverride ? *s->locOverride : loc);
  std::vector<Tensor> out;
  for (ir::ValueId v : res) out.push_back(detail::wrap(*s, v));
  return out;
}

/// Checks `a` is a floating matrix or batch of them, square unless `square` is false.
void expectMatrices(std::string_view api, const Tensor& a, const Location& loc, bool square = true) {
  detail::traceOf(a, api, loc);
  const Shape s = a.shape();
  if (!is_floating(a.dtype()) || s.size() < 2 || (square && s[s.size() - 1] != s[s.size() - 2]))
    throw Error(fmt::format("{}: expected a floating-point {}matrix (or a batch of them), got {}", api,
                            square ? "square " : "", a.type().str()),
                loc);
}

/// x with its last two axes swapped.
Tensor mT(const Tensor& x, std::source_location l) {
  std::vector<int64_t> perm(static_cast<std::size_t>(x.rank()));
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return transpose(x, perm, l);
}

Shape batchShape(const Tensor& x) {
  const Shape s = x.shape();
  return Shape(s.begin(), s.end() - 2);
}

/// numpy's broadcast of two batch shapes, or an error naming both operands.
Shape broadcastBatch(std::string_view api, const Tensor& a, const Tensor& b, const Location& loc) {
  const Shape x = batchShape(a), y = batchShape(b);
  Shape out(std::max(x.size(), y.size()), 1);
  for (std::size_t k = 0; k < out.size(); ++k) {
    const int64_t u = k < out.size() - x.size() ? 1 : x[k - (out.size() - x.size())];
    const int64_t v = k < out.size() - y.size() ? 1 : y[k - (out.size() - y.size())];
    if (u != v && u != 1 && v != 1)
      throw Error(fmt::format("{}: the batch axes of {} and {} do not broadcast", api, a.type().str(), b.type().str()), loc);
    out[k] = u == 1 ? v : u;
  }
  return out;
}

/// x broadcast to `batch` followed by its own last two axes.
Tensor withBatch(const Tensor& x, const Shape& batch, std::source_location l) {
  Shape s = batch;
  const Shape xs = x.shape();
  s.insert(s.end(), xs.end() - 2, xs.end());
  return xs == s ? x : broadcast_to(x, s, l);
}

/// The identity matrix of dtype t, [n, n].
Tensor eye(int64_t n, DType t, std::source_location l) {
  Array a(Type{t, {n, n}});
  for (int64_t i = 0; i < n; ++i) a.set(i * n + i, 1.0);
  return constant(a, l);
}

/// The sign of the permutation given by LAPACK-style `pivots` ([..., n] i32): ±1 in dtype t.
Tensor pivotSign(const Tensor& pivots, DType t, std::source_location l) {
  const Tensor swapped = cast(ne(pivots, iota(pivots.shape(), -1, DType::i32, l), l), t, l);
  const Tensor swaps = sum(swapped, {-1}, false, l);
  const Tensor odd = swaps - 2.0 * floor(swaps * 0.5, l);
  return 1.0 - 2.0 * odd;
}

/// b as a batch of matrices for solve-like functions: a 1-D b is one column.
struct Rhs {
  Tensor m;
  bool vector;
};
Rhs asMatrix(std::string_view api, const Tensor& b, int64_t n, const Location& loc, std::source_location l) {
  if (b.rank() == 0) throw Error(fmt::format("{}: expected b of rank >= 1, got {}", api, b.type().str()), loc);
  const Tensor m = b.rank() == 1 ? reshape(b, {b.shape()[0], 1}, l) : b;
  if (m.shape()[static_cast<std::size_t>(m.rank() - 2)] != n)
    throw Error(fmt::format("{}: a has {} rows but b {} has {}", api, n, b.type().str(), m.shape()[static_cast<std::size_t>(m.rank() - 2)]),
                loc);
  return {m, b.rank() == 1};
}

/// P r for the permutation `perm` ([..., n] i32): (P r)[..., i, :] =
/// r[..., perm[..., i], :], a gather of r's rows (its transpose a scatter);
/// batched, the batch's rows are one axis and each matrix's indices are
/// offset by n. Was one_hot(perm) r, an n × n matrix built and multiplied:
/// at 512² f64 (one right-hand side) 2 MiB written and read for 512 rows.
Tensor permuteRows(const Tensor& perm, const Tensor& r, std::source_location l) {
  const int64_t n = perm.shape().back(), k = r.shape().back();
  if (perm.rank() == 1) return take(r, perm, r.rank() - 2, l);
  Shape column = perm.shape();
  column.push_back(1);
  const Shape batch = broadcastBatch("solve", reshape(perm, column, l), r, Location::from(l));
  const int64_t count = num_elements(batch);
  Shape ps = batch, rs = batch;
  ps.push_back(n);
  rs.insert(rs.end(), {n, k});
  const Tensor p = perm.shape() == ps ? perm : broadcast_to(perm, ps, l);
  const Tensor rows = reshape(withBatch(r, batch, l), {count * n, k}, l);
  const Tensor index = reshape(reshape(p, {count, n}, l) + iota({count, n}, 0, DType::i32, l) * int32_t(n), {count * n}, l);
  return reshape(take(rows, index, 0, l), rs, l);
}

/// S(r) = A^-1 r from A's factors (P A = L U): P r, then L^-1 and U^-1 (L's
/// unit diagonal not stored). Its transpose, which reverse mode takes, is
/// A^-T r = P^T L^-T U^-T r: the same solves with transpose_a.
Tensor luSolve(const Tensor& lu, const Tensor& perm, const Tensor& r, std::source_location l) {
  const Tensor pr = permuteRows(perm, r, l);
  const Tensor y = triangular_solve(lu, pr, {.lower = true, .left_side = true, .unit_diagonal = true}, l);
  return triangular_solve(lu, y, {.lower = false, .left_side = true}, l);
}

/// The JVP of a value computed from lu's factors: (primals, tangents) of
/// the call's inputs -> the results' tangents.
using LuRule = std::function<std::vector<Tensor>(std::span<const Tensor>, std::span<const Tensor>)>;

/// Gives `results` (computed from `inputs` by plain ops) the derivative
/// `rule`: a custom_jvp on (inputs..., results...) whose function returns
/// its last results.size() arguments and whose rule returns them with the
/// tangents rule(primals, tangents) gives. The results' own derivatives
/// (through lu) are never asked for: the rule ignores their tangents.
std::vector<Tensor> withRule(const std::vector<Tensor>& inputs, const std::vector<Tensor>& results, LuRule rule,
                             std::source_location l) {
  std::vector<Tensor> xs = inputs;
  xs.insert(xs.end(), results.begin(), results.end());
  const std::size_t k = inputs.size();
  detail::CustomJvpBodies bodies;
  bodies.primal = [k](std::span<const Tensor> ps) { return std::vector<Tensor>(ps.begin() + static_cast<std::ptrdiff_t>(k), ps.end()); };
  bodies.rule = [k, rule = std::move(rule)](std::span<const Tensor> ps, std::span<const Tensor> ts) {
    return std::pair{std::vector<Tensor>(ps.begin() + static_cast<std::ptrdiff_t>(k), ps.end()), rule(ps, ts)};
  };
  return detail::customJvpCall(xs, bodies, l);
}

/// x solving a x = m (m a batch of matrices) with solve's rule.
Tensor solveMatrix(const Tensor& a, const Tensor& m, std::source_location l) {
  const LU<> f = lu(a, l);
  const Tensor x = luSolve(f.lu, f.permutation, m, l);
  // dx = S(db - dA x)
  return withRule({a, m, f.lu, f.permutation}, {x}, [l](std::span<const Tensor> p, std::span<const Tensor> t) {
    return std::vector<Tensor>{luSolve(p[2], p[3], t[1] - matmul(t[0], p[4], {}, l), l)};
  }, l)[0];
}

} // namespace

Tensor cholesky(const Tensor& a, bool symmetrize_input, std::source_location l) {
  const Location loc = Location::from(l);
  expectMatrices("cholesky", a, loc);
  const Tensor s = symmetrize_input ? (a + mT(a, l)) * 0.5 : a;
  return record("cholesky", ir::OpKind::Cholesky, {s}, {}, loc)[0];
}

Tensor triangular_solve(const Tensor& a, const Tensor& b, TriangularSolveOptions o, std::source_location l) {
  const Location loc = Location::from(l);
  expectMatrices("triangular_solve", a, loc);
  if (b.rank() < 2)
    throw Error(fmt::format("triangular_solve: expected b to be a matrix (or a batch of them), got {}", b.type().str()), loc);
  const Shape batch = broadcastBatch("triangular_solve", a, b, loc);
  ir::Attrs attrs;
  attrs.set("lower", o.lower);
  attrs.set("left_side", o.left_side);
  attrs.set("transpose_a", o.transpose_a);
  attrs.set("unit_diagonal", o.unit_diagonal);
  return record("triangular_solve", ir::OpKind::TriangularSolve, {withBatch(a, batch, l), withBatch(b, batch, l)},
                std::move(attrs), loc)[0];
}

LU<> lu(const Tensor& a, std::source_location l) {
  const Location loc = Location::from(l);
  expectMatrices("lu", a, loc, /*square=*/false);
  std::vector<Tensor> r = record("lu", ir::OpKind::Lu, {a}, {}, loc);
  return {r[0], r[1], r[2]};
}

Tensor solve(const Tensor& a, const Tensor& b, std::source_location l) {
  const Location loc = Location::from(l);
  expectMatrices("solve", a, loc);
  const int64_t n = a.shape().back();
  const Rhs r = asMatrix("solve", b, n, loc, l);
  const Tensor x = solveMatrix(a, r.m, l);
  if (!r.vector) return x;
  Shape s = x.shape();
  s.pop_back();
  return reshape(x, std::vector<int64_t>(s.begin(), s.end()), l);
}

Tensor inv(const Tensor& a, std::source_location l) {
  expectMatrices("inv", a, Location::from(l));
  const LU<> f = lu(a, l);
  const Tensor c = luSolve(f.lu, f.permutation, broadcast_to(eye(a.shape().back(), a.dtype(), l), a.shape(), l), l);
  // dC = -S(dA C)
  return withRule({a, f.lu, f.permutation}, {c}, [l](std::span<const Tensor> p, std::span<const Tensor> t) {
    return std::vector<Tensor>{-luSolve(p[1], p[2], matmul(t[0], p[3], {}, l), l)};
  }, l)[0];
}

Tensor det(const Tensor& a, std::source_location l) {
  expectMatrices("det", a, Location::from(l));
  const LU<> f = lu(a, l);
  const Tensor d = pivotSign(f.pivots, a.dtype(), l) * prod(diagonal(f.lu, 0, -2, -1, l), {-1}, false, l);
  // dd = d tr S(dA)
  return withRule({a, f.lu, f.permutation}, {d}, [l](std::span<const Tensor> p, std::span<const Tensor> t) {
    return std::vector<Tensor>{p[3] * linalg::trace(luSolve(p[1], p[2], t[0], l), 0, l)};
  }, l)[0];
}

SlogDet<> slogdet(const Tensor& a, std::source_location l) {
  expectMatrices("slogdet", a, Location::from(l));
  const LU<> f = lu(a, l);
  const Tensor d = diagonal(f.lu, 0, -2, -1, l);
  const Tensor sgn = pivotSign(f.pivots, a.dtype(), l) * prod(sign(d, l), {-1}, false, l);
  const Tensor logabs = sum(log(abs(d, l), l), {-1}, false, l);
  // dl = tr S(dA); the sign is piecewise constant: no tangent
  const std::vector<Tensor> r = withRule({a, f.lu, f.permutation}, {sgn, logabs}, [l](std::span<const Tensor> p, std::span<const Tensor> t) {
    return std::vector<Tensor>{zeros_like(p[3], l), linalg::trace(luSolve(p[1], p[2], t[0], l), 0, l)};
  }, l);
  return {r[0], r[1]};
}

Tensor cho_solve(const Tensor& c, const Tensor& b, bool lower, std::source_location l) {
  const Location loc = Location::from(l);
  expectMatrices("cho_solve", c, loc);
  const Rhs r = asMatrix("cho_solve", b, c.shape().back(), loc, l);
  // c c^T x = b (lower) or c^T c x = b (upper): the factor whose transpose is not taken goes first.
  const Tensor y = triangular_solve(c, r.m, {.lower = lower, .left_side = true, .transpose_a = !lower}, l);
  const Tensor x = triangular_solve(c, y, {.lower = lower, .left_side = true, .transpose_a = lower}, l);
  if (!r.vector) return x;
  Shape s = x.shape();
  s.pop_back();
  return reshape(x, std::vector<int64_t>(s.begin(), s.end()), l);
}

Tensor matrix_power(const Tensor& a, int64_t n, std::source_location l) {
  expectMatrices("matrix_power", a, Location::from(l));
  if (n == 0) return broadcast_to(eye(a.shape().back(), a.dtype(), l), a.shape(), l);
  Tensor base = n < 0 ? inv(a, l) : a;
  uint64_t e = n < 0 ? static_cast<uint64_t>(-(n + 1)) + 1 : static_cast<uint64_t>(n);
  std::optional<Tensor> result;
  while (true) { // a^e by squaring: one product per bit, and one per set bit
    if (e & 1) result = result ? matmul(*result, base, l) : base;
    e >>= 1;
    if (!e) break;
    base = matmul(base, base, l);
  }
  return *result;
}

Tensor trace(const Tensor& x, int64_t offset, std::source_location l) {
  return sum(diagonal(x, offset, -2, -1, l), {-1}, false, l);
}

Tensor diagonal(const Tensor& x, int64_t offset, int64_t axis1, int64_t axis2, std::source_location l) {
  const Location loc = Location::from(l);
  detail::traceOf(x, "diagonal", loc);
  const int64_t rank = x.rank();
  auto axisOf = [&](int64_t a) {
    if (a < -rank || a >= rank) throw Error(fmt::format("diagonal: axis {} is out of range for {}", a, x.type().str()), loc);
    return a < 0 ? a + rank : a;
  };
  if (rank < 2) throw Error(fmt::format("diagonal: expected an operand of rank >= 2, got {}", x.type().str()), loc);
  const int64_t a1 = axisOf(axis1), a2 = axisOf(axis2);
  if (a1 == a2) throw Error(fmt::format("diagonal: axis1 and axis2 are both axis {} of {}", a1, x.type().str()), loc);
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < rank; ++d)
    if (d != a1 && d != a2) perm.push_back(d);
  perm.push_back(a1);
  perm.push_back(a2);
  const Tensor m = std::is_sorted(perm.begin(), perm.end()) ? x : transpose(x, perm, l);
  Shape s = m.shape();
  const int64_t rows = s[s.size() - 2], cols = s[s.size() - 1];
  const int64_t r0 = offset < 0 ? -offset : 0, c0 = offset > 0 ? offset : 0;
  const int64_t d = std::max<int64_t>(0, std::min(rows - r0, cols - c0));
  std::vector<int64_t> start(s.size(), 0), limit(s.begin(), s.end());
  start[s.size() - 2] = std::min(r0, rows);
  start[s.size() - 1] = std::min(c0, cols);
  limit[s.size() - 2] = start[s.size() - 2] + d;
  limit[s.size() - 1] = start[s.size() - 1] + d;
  const Tensor sq = slice(m, start, limit, {}, l); // [..., d, d]
  std::vector<int64_t> flat(s.begin(), s.end() - 2);
  flat.push_back(d * d);
  const Tensor f = reshape(sq, flat, l);
  if (d <= 1) return f;
  std::vector<int64_t> fs(flat.size(), 0), fl = flat, st(flat.size(), 1);
  st.back() = d + 1;
  return slice(f, fs, fl, st, l);
}

Tensor diag(const Tensor& x, int64_t k, std::source_location l) {
  const Location loc = Location::from(l);
  detail::traceOf(x, "diag", loc);
  if (x.rank() == 2) return diagonal(x, k, 0, 1, l);
  if (x.rank() != 1) throw Error(fmt::format("diag: expected a 1-D or 2-D operand, got {}", x.type().str()), loc);
  const int64_t n = x.shape()[0], N = n + (k < 0 ? -k : k);
  if (n == 0) return full({N, N}, 0, x.dtype(), l);
  // x's elements at start + i (N + 1) of the flattened N x N matrix.
  const int64_t start = k >= 0 ? k : -k * N;
  const int64_t high = N * N - start - (n - 1) * (N + 1) - 1;
  return reshape(pad(x, {start}, {high}, {N}, l), {N, N}, l);
}

Tensor outer(const Tensor& a, const Tensor& b, std::source_location l) {
  const Tensor u = reshape(a, {-1, 1}, l), v = reshape(b, {1, -1}, l);
  return mul(u, v, l);
}

Tensor kron(const Tensor& a, const Tensor& b, std::source_location l) {
  const std::size_t r = static_cast<std::size_t>(std::max(a.rank(), b.rank()));
  Shape as = a.shape(), bs = b.shape();
  as.insert(as.begin(), r - as.size(), 1);
  bs.insert(bs.begin(), r - bs.size(), 1);
  std::vector<int64_t> ai, bi, out;
  for (std::size_t d = 0; d < r; ++d) {
    ai.insert(ai.end(), {as[d], 1});
    bi.insert(bi.end(), {1, bs[d]});
    out.push_back(as[d] * bs[d]);
  }
  return reshape(mul(reshape(a, ai, l), reshape(b, bi, l), l), out, l);
}

Tensor norm(const Tensor& x, double ord, std::vector<int64_t> axes, bool keepdims, std::source_location l) {
  const Location loc = Location::from(l);
  detail::traceOf(x, "norm", loc);
  if (!is_floating(x.dtype())) throw Error(fmt::format("norm: expected a floating-point operand, got {}", x.type().str()), loc);
  const double inf = std::numeric_limits<double>::infinity();
  if (ord == 1) return sum(abs(x, l), axes, keepdims, l);
  if (ord == inf) return max(abs(x, l), axes, keepdims, l);
  if (ord == -inf) return min(abs(x, l), axes, keepdims, l);
  if (ord != 2) throw Error(fmt::format("norm: expected ord 1, 2, inf or -inf, got {}", ord), loc);
  // sqrt(s) with s = sum of squares; where s is 0, sqrt's derivative would be
  // infinite (0 · inf = NaN): the gradient there is taken as 0 instead (a
  // subgradient), by never taking sqrt of the 0 that is differentiated.
  const Tensor s = sum(x * x, axes, keepdims, l);
  const Tensor positive = gt(s, AtScalar(0.0, l));
  const Tensor safe = where(positive, s, ones_like(s, l), l);
  return where(positive, sqrt(safe, l), zeros_like(s, l), l);
}

} // namespace adjit::linalg
