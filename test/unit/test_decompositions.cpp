// test/unit/test_decompositions.cpp — qr, eigh and svd: the invariants of
// their results (orthonormality, reconstruction, order, sign conventions) in
// f32 and f64, batched, by the interpreter and the JIT; their derivatives
// against finite differences (sign-invariant functions, reverse and forward
// mode, second order); values and gradients against PyTorch float64
// (torch_decompositions.py); and the errors for bad operands.
#include "Check.h"

#include <adjit/decompositions.h>

#include <cstring>
#include <random>

using namespace adjit;
using namespace adjit::test;
using V = std::vector<Tensor>;

namespace {

/// A [batch..., m, n] array of uniform(-1, 1) values (dtype t).
Array randomMatrix(DType t, Shape shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<double> v(static_cast<std::size_t>(num_elements(shape)));
  for (double& x : v) x = d(rng);
  Array a(v, shape);
  return t == DType::f64 ? a : Array(std::vector<float>(v.begin(), v.end()), shape);
}

/// Element (b, i, j) of a batch of matrices stored as [..., rows, cols].
double el(const Array& a, int64_t b, int64_t i, int64_t j) {
  const Shape& s = a.shape();
  const int64_t rows = s[s.size() - 2], cols = s[s.size() - 1];
  return a.at((b * rows + i) * cols + j);
}
double el(const Array& a, int64_t b, int64_t i) { return a.at(b * a.shape().back() + i); }

struct Dims {
  int64_t batch, m, n;
};
Dims dimsOf(const Array& a) {
  const Shape& s = a.shape();
  return {num_elements(Shape(s.begin(), s.end() - 2)), s[s.size() - 2], s[s.size() - 1]};
}

/// max |X^T X - I| over the batch, X [..., rows, cols] (orthonormal columns).
double columnOrthoError(const Array& x) {
  const Dims d = dimsOf(x);
  double e = 0;
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t i = 0; i < d.n; ++i)
      for (int64_t j = 0; j < d.n; ++j) {
        double s = 0;
        for (int64_t r = 0; r < d.m; ++r) s += el(x, b, r, i) * el(x, b, r, j);
        e = std::max(e, std::abs(s - (i == j ? 1.0 : 0.0)));
      }
  return e;
}

/// Runs f on `a` by the interpreter and by the JIT (both results, in order).
std::pair<std::vector<Array>, std::vector<Array>> bothWays(const std::function<V(const Tensor&)>& f, const Array& a) {
  Module m = trace([&](V x) { return f(x[0]); }, std::vector<Type>{a.type()});
  m.verify();
  const std::string text = m.str(true);
  CHECK(Module::parse(text).str(true) == text);
  for (const auto& fn : m.impl().functions)
    for (const auto& op : fn->ops) exercisedOps().insert(op.kind);
  std::vector<Array> interp = m.interpret("f", {a});
  std::vector<Array> jitted = jit([&](const Tensor& x) { return f(x); })(a);
  return {interp, jitted};
}

double tolOf(DType t) { return t == DType::f32 ? 2e-5 : 1e-12; }

/// Checks q, r of a: qᵀq = I, q r = a, r upper triangular.
void checkQr(const Array& a, const Array& q, const Array& r) {
  const Dims d = dimsOf(a);
  const int64_t k = std::min(d.m, d.n);
  const double tol = tolOf(a.dtype()) * 10;
  CHECK(q.shape().back() == k);
  CHECK(columnOrthoError(q) < tol);
  double recon = 0;
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t i = 0; i < d.m; ++i)
      for (int64_t j = 0; j < d.n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < k; ++l) s += el(q, b, i, l) * el(r, b, l, j);
        recon = std::max(recon, std::abs(s - el(a, b, i, j)));
        if (i < k && j < i) CHECK(el(r, b, i, j) == 0);
      }
  CHECK(recon < tol);
}

/// Checks w, v of a: S v = v diag(w) for S = (a + aᵀ)/2, vᵀv = I, w
/// ascending, each column's largest-magnitude component positive.
void checkEigh(const Array& a, const Array& w, const Array& v) {
  const Dims d = dimsOf(a);
  const int64_t n = d.n;
  double scale = 1;
  for (int64_t i = 0; i < a.size(); ++i) scale = std::max(scale, std::abs(a.at(i)));
  const double tol = tolOf(a.dtype()) * 10 * scale * static_cast<double>(n);
  CHECK(columnOrthoError(v) < tolOf(a.dtype()) * 10 * static_cast<double>(n));
  double res = 0;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t i = 0; i + 1 < n; ++i) CHECK(el(w, b, i) <= el(w, b, i + 1));
    for (int64_t j = 0; j < n; ++j) {
      int64_t best = 0;
      for (int64_t i = 0; i < n; ++i)
        if (std::abs(el(v, b, i, j)) > std::abs(el(v, b, best, j))) best = i;
      CHECK(el(v, b, best, j) > 0);
      for (int64_t i = 0; i < n; ++i) {
        double s = 0;
        for (int64_t l = 0; l < n; ++l) s += 0.5 * (el(a, b, i, l) + el(a, b, l, i)) * el(v, b, l, j);
        res = std::max(res, std::abs(s - el(w, b, j) * el(v, b, i, j)));
      }
    }
  }
  CHECK(res < tol);
}

/// Checks u, s, vt of a: u diag(s) vt = a, uᵀu = I, vt vtᵀ = I, s descending
/// and nonnegative, u's columns with their largest-magnitude component positive.
void checkSvd(const Array& a, const Array& u, const Array& s, const Array& vt) {
  const Dims d = dimsOf(a);
  const int64_t k = std::min(d.m, d.n);
  const double tol = tolOf(a.dtype()) * 20 * static_cast<double>(std::max(d.m, d.n));
  CHECK(columnOrthoError(u) < tol);
  // rows of vt orthonormal: columns of vtᵀ
  double ortho = 0, recon = 0;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t i = 0; i < k; ++i) {
      CHECK(el(s, b, i) >= 0);
      if (i + 1 < k) CHECK(el(s, b, i) >= el(s, b, i + 1));
      for (int64_t j = 0; j < k; ++j) {
        double t = 0;
        for (int64_t c = 0; c < d.n; ++c) t += el(vt, b, i, c) * el(vt, b, j, c);
        ortho = std::max(ortho, std::abs(t - (i == j ? 1.0 : 0.0)));
      }
      int64_t best = 0;
      for (int64_t r = 0; r < d.m; ++r)
        if (std::abs(el(u, b, r, i)) > std::abs(el(u, b, best, i))) best = r;
      CHECK(el(u, b, best, i) >= 0);
    }
    for (int64_t i = 0; i < d.m; ++i)
      for (int64_t j = 0; j < d.n; ++j) {
        double t = 0;
        for (int64_t l = 0; l < k; ++l) t += el(u, b, i, l) * el(s, b, l) * el(vt, b, l, j);
        recon = std::max(recon, std::abs(t - el(a, b, i, j)));
      }
  }
  CHECK(ortho < tol);
  CHECK(recon < tol);
}

const std::vector<Shape> kShapes = {{1, 1}, {3, 3}, {5, 3}, {3, 5}, {2, 4, 4}, {2, 3, 6, 2}, {2, 2, 7}, {12, 12}};

} // namespace

TEST_CASE("qr: orthonormal q, upper triangular r, q r = a; interpreter and JIT agree") {
  for (DType t : {DType::f64, DType::f32})
    for (const Shape& s : kShapes) {
      INFO(Type{t, s}.str());
      const Array a = randomMatrix(t, s, 7);
      auto [interp, jitted] = bothWays([](const Tensor& x) { auto [q, r] = linalg::qr(x); return V{q, r}; }, a);
      checkQr(a, interp[0], interp[1]);
      checkQr(a, jitted[0], jitted[1]);
      ADJIT_CHECK_CLOSE(jitted[0], interp[0], tolOf(t) * 10);
      ADJIT_CHECK_CLOSE(jitted[1], interp[1], tolOf(t) * 10);
    }
}

/// Matrix b of a batch [batch, m, n], as an [m, n] array of its own.
Array matrixAt(const Array& a, int64_t b) {
  const Shape& s = a.shape();
  Array out(Type{a.dtype(), {s[1], s[2]}});
  std::memcpy(out.raw(), static_cast<const char*>(a.raw()) + b * out.bytes(), out.bytes());
  return out;
}

TEST_CASE("qr of batches of small matrices (one per SIMD lane): the per-matrix code's bits, for SSE, AVX2 and the host") {
  // 19 matrices: full groups of lanes and a partial last one; matrix 5 has a zero column
  auto f = [](const Tensor& x) {
    auto [q, r] = linalg::qr(x);
    return std::tuple{q, r};
  };
  for (DType t : {DType::f64, DType::f32})
    for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 3}, {5, 3}, {3, 5}, {8, 8}, {12, 7}, {7, 12}, {32, 32}}) {
      Array a = randomMatrix(t, {19, m, n}, 21);
      for (int64_t i = 0; i < m; ++i) a.set(5 * m * n + i * n, 0.0);
      const Module mod = trace([&](const Tensor& x) { auto [q, r] = linalg::qr(x); return V{q, r}; }, a.type());
      const std::vector<Array> want = mod.interpret("f", {a});
      // one matrix at a time (a batch of one: the per-matrix code), to compare bits with (a single
      // 32 x 32 goes to LAPACK where it is loaded: values only)
      for (const char* cpu : {"", "x86-64-v2", "x86-64-v3"}) {
        INFO(name_of(t) << " " << m << " x " << n << " cpu " << std::string(*cpu ? cpu : "host"));
        const auto [q, r] = jit(f, {.cpu = cpu})(a);
        checkQr(a, q, r);
        ADJIT_CHECK_CLOSE(q, want[0], tolOf(t) * 10);
        ADJIT_CHECK_CLOSE(r, want[1], tolOf(t) * 10);
        auto one = jit(f, {.cpu = cpu});
        for (int64_t b : {0, 5, 18}) {
          if (std::max(m, n) >= 32) break;
          const auto [q1, r1] = one(matrixAt(a, b));
          CHECK(bytesOf(q1) == bytesOf(matrixAt(q, b)));
          CHECK(bytesOf(r1) == bytesOf(matrixAt(r, b)));
        }
      }
      INFO(name_of(t) << " " << m << " x " << n);
      if (m * n >= 16) // (smaller groups are gathered element by element, with no transposing function to see)
        CHECK(jit(f).lower(a).llvm_ir.find("adjit.lanes.") != std::string::npos);
    }
}

TEST_CASE("qr: r's diagonal signs are LAPACK's, and zero columns are left alone") {
  // [[3], [4]]: the reflector maps (3, 4) to -5 e_1 (beta = -sign(3) * 5).
  auto [interp, jitted] = bothWays([](const Tensor& x) { auto [q, r] = linalg::qr(x); return V{q, r}; }, f64({3, 4}, {2, 1}));
  for (const auto& res : {interp, jitted}) {
    ADJIT_CHECK_CLOSE(res[1], f64({-5}, {1, 1}), 1e-15);
    ADJIT_CHECK_CLOSE(res[0], f64({-0.6, -0.8}, {2, 1}), 1e-15);
  }
  // A zero matrix: q = I (every reflector the identity), r = 0.
  auto [zi, zj] = bothWays([](const Tensor& x) { auto [q, r] = linalg::qr(x); return V{q, r}; }, f64({0, 0, 0, 0, 0, 0}, {3, 2}));
  for (const auto& res : {zi, zj}) {
    ADJIT_CHECK_CLOSE(res[0], f64({1, 0, 0, 1, 0, 0}, {3, 2}), 0);
    ADJIT_CHECK_CLOSE(res[1], f64({0, 0, 0, 0}, {2, 2}), 0);
  }
}

TEST_CASE("eigh: eigenpairs of the symmetric part, ascending, signs normalised; interpreter and JIT agree") {
  for (DType t : {DType::f64, DType::f32})
    for (const Shape& s : std::vector<Shape>{{1, 1}, {2, 2}, {5, 5}, {2, 3, 4, 4}, {16, 16}, {33, 33}}) {
      INFO(Type{t, s}.str());
      const Array a = randomMatrix(t, s, 11);
      auto [interp, jitted] = bothWays([](const Tensor& x) { auto [w, v] = linalg::eigh(x); return V{w, v}; }, a);
      checkEigh(a, interp[0], interp[1]);
      checkEigh(a, jitted[0], jitted[1]);
      ADJIT_CHECK_CLOSE(jitted[0], interp[0], tolOf(t) * 100);
      ADJIT_CHECK_CLOSE(jitted[1], interp[1], tolOf(t) * 1000);
    }
}

TEST_CASE("eigh of batches of small matrices (one per SIMD lane): each lane converges on its own, for SSE, AVX2 and the host") {
  // 19 matrices: full groups of lanes and a partial last one; matrix 3 is diagonal (done before
  // any sweep), matrix 6 has a repeated eigenvalue pair, matrix 9 a NaN (all NaN, its lane alone)
  auto f = [](const Tensor& x) {
    auto [w, v] = linalg::eigh(x);
    return std::tuple{w, v};
  };
  for (DType t : {DType::f64, DType::f32})
    for (int64_t n : {1, 2, 3, 5, 8, 16, 32}) {
      Array a = randomMatrix(t, {19, n, n}, 23);
      for (int64_t i = 0; i < n * n; ++i) a.set(3 * n * n + i, i % (n + 1) == 0 ? double(i) : 0.0);
      if (n >= 2) {
        for (int64_t i = 0; i < n * n; ++i) a.set(6 * n * n + i, i % (n + 1) == 0 ? 1.0 : 0.0);
        a.set(6 * n * n + n * n - 1, 3.0);
      }
      a.set(9 * n * n, std::nan(""));
      for (const char* cpu : {"", "x86-64-v2", "x86-64-v3"}) {
        INFO(name_of(t) << " n = " << n << " cpu " << std::string(*cpu ? cpu : "host"));
        const auto [w, v] = jit(f, {.cpu = cpu})(a);
        auto one = jit(f, {.cpu = cpu});
        for (int64_t b : {0, 1, 3, 6, 8, 9, 17, 18}) {
          const auto [w1, v1] = one(matrixAt(a, b));
          if (b == 9) {
            for (int64_t i = 0; i < n; ++i) CHECK(std::isnan(el(w, b, i)));
            continue;
          }
          if (b == 3 || b == 6) continue; // exact spectra: checked below for the batch
          // the same as one matrix at a time (per-matrix code below 16, LAPACK from 16 where loaded)
          const double tol = tolOf(t) * 1000;
          for (int64_t i = 0; i < n; ++i) CHECK(std::abs(el(w, b, i) - w1.at(i)) < tol * (1 + std::abs(w1.at(i))));
          for (int64_t i = 0; i < n * n; ++i) CHECK(std::abs(v.at(b * n * n + i) - v1.at(i)) < tol);
        }
        for (int64_t i = 0; i < n; ++i) CHECK(el(w, 3, i) == double(i * (n + 1)));
        if (n >= 2) {
          CHECK(el(w, 6, 0) == doctest::Approx(1.0));
          CHECK(el(w, 6, n - 1) == doctest::Approx(3.0));
        }
      }
      if (n * n >= 16) CHECK(jit(f).lower(a).llvm_ir.find("adjit.lanes.") != std::string::npos);
    }
}

TEST_CASE("eigh: known spectra, repeated eigenvalues") {
  // The second-difference matrix tridiag(-1, 2, -1) of order n: 2 - 2 cos(k pi / (n + 1)).
  const int64_t n = 9;
  std::vector<double> a(n * n, 0.0), want;
  for (int64_t i = 0; i < n; ++i) {
    a[i * n + i] = 2;
    if (i + 1 < n) a[i * n + i + 1] = a[(i + 1) * n + i] = -1;
    want.push_back(2 - 2 * std::cos(static_cast<double>(i + 1) * M_PI / static_cast<double>(n + 1)));
  }
  auto [interp, jitted] = bothWays([](const Tensor& x) { auto [w, v] = linalg::eigh(x); return V{w, v}; }, f64(a, {n, n}));
  ADJIT_CHECK_CLOSE(interp[0], f64(want), 1e-14);
  ADJIT_CHECK_CLOSE(jitted[0], f64(want), 1e-14);
  // The identity (every eigenvalue 1): already diagonal, v = I.
  auto [ii, ij] = bothWays([](const Tensor& x) { auto [w, v] = linalg::eigh(x); return V{w, v}; }, f64({1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3}));
  for (const auto& res : {ii, ij}) {
    ADJIT_CHECK_CLOSE(res[0], f64({1, 1, 1}), 0);
    ADJIT_CHECK_CLOSE(res[1], f64({1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3}), 0);
  }
  // Only the symmetric part is read: [[1, 4], [0, 1]] is read as [[1, 2], [2, 1]].
  auto [si, sj] = bothWays([](const Tensor& x) { auto [w, v] = linalg::eigh(x); return V{w}; }, f64({1, 4, 0, 1}, {2, 2}));
  ADJIT_CHECK_CLOSE(si[0], f64({-1, 3}), 1e-15);
  ADJIT_CHECK_CLOSE(sj[0], f64({-1, 3}), 1e-15);
}

TEST_CASE("svd: u diag(s) vt = a, orthonormal factors, s descending; interpreter and JIT agree") {
  for (DType t : {DType::f64, DType::f32})
    for (const Shape& s : kShapes) {
      INFO(Type{t, s}.str());
      const Array a = randomMatrix(t, s, 13);
      auto [interp, jitted] = bothWays([](const Tensor& x) { auto [u, sv, vt] = linalg::svd(x); return V{u, sv, vt}; }, a);
      checkSvd(a, interp[0], interp[1], interp[2]);
      checkSvd(a, jitted[0], jitted[1], jitted[2]);
      ADJIT_CHECK_CLOSE(jitted[1], interp[1], tolOf(t) * 100);
      ADJIT_CHECK_CLOSE(jitted[0], interp[0], tolOf(t) * 1000);
      ADJIT_CHECK_CLOSE(jitted[2], interp[2], tolOf(t) * 1000);
    }
}

TEST_CASE("svd of batches of small matrices (one per SIMD lane): each lane on its own, for SSE, AVX2 and the host") {
  // 19 matrices: full groups of lanes and a partial last one; matrix 3 has two equal columns (a
  // zero singular value: its column completed), matrix 6 is zero, matrix 9 has a NaN
  auto f = [](const Tensor& x) {
    auto [u, s, vt] = linalg::svd(x);
    return std::tuple{u, s, vt};
  };
  for (DType t : {DType::f64, DType::f32})
    for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 3}, {5, 3}, {3, 5}, {8, 8}, {12, 7}, {7, 12}, {32, 32}}) {
      Array a = randomMatrix(t, {19, m, n}, 29);
      if (n >= 2)
        for (int64_t i = 0; i < m; ++i) a.set(3 * m * n + i * n + 1, a.at(3 * m * n + i * n));
      for (int64_t i = 0; i < m * n; ++i) a.set(6 * m * n + i, 0.0);
      a.set(9 * m * n, std::nan(""));
      const int64_t k = std::min(m, n);
      for (const char* cpu : {"", "x86-64-v2", "x86-64-v3"}) {
        INFO(name_of(t) << " " << m << " x " << n << " cpu " << std::string(*cpu ? cpu : "host"));
        const auto [u, s, vt] = jit(f, {.cpu = cpu})(a);
        auto one = jit(f, {.cpu = cpu});
        const double tol = tolOf(t) * 1000;
        for (int64_t b : {0, 1, 3, 6, 8, 9, 17, 18}) {
          const auto [u1, s1, vt1] = one(matrixAt(a, b));
          if (b == 9) {
            for (int64_t i = 0; i < k; ++i) CHECK(std::isnan(el(s, b, i)));
            continue;
          }
          for (int64_t i = 0; i < k; ++i) CHECK(std::abs(el(s, b, i) - s1.at(i)) < tol * (1 + std::abs(s1.at(i))));
          // singular vectors: where one matrix at a time is the same algorithm (below LAPACK's order)
          if (std::min(m, n) >= 24 && (b == 3 || b == 6)) continue;
          for (int64_t i = 0; i < m * k; ++i) CHECK(std::abs(u.at(b * m * k + i) - u1.at(i)) < tol);
          for (int64_t i = 0; i < k * n; ++i) CHECK(std::abs(vt.at(b * k * n + i) - vt1.at(i)) < tol);
        }
        if (n >= 2 && m >= n) CHECK(std::abs(el(s, 3, k - 1)) < tol); // (a wide matrix keeps its rank)
        for (int64_t i = 0; i < k; ++i) CHECK(el(s, 6, i) == 0.0);
      }
      if (m * n >= 16) CHECK(jit(f).lower(a).llvm_ir.find("adjit.lanes.") != std::string::npos);
    }
}

TEST_CASE("svd: known singular values, rank deficiency, zeros") {
  // A scaled permutation: singular values are the magnitudes, sorted.
  auto [pi, pj] = bothWays([](const Tensor& x) { auto [u, s, vt] = linalg::svd(x); return V{u, s, vt}; },
                           f64({0, -2, 0, 0, 0, 5, 1, 0, 0}, {3, 3}));
  for (const auto& res : {pi, pj}) ADJIT_CHECK_CLOSE(res[1], f64({5, 2, 1}), 1e-15);
  // Rank one (an outer product): one nonzero singular value |x| |y|.
  const Array r1 = f64({1 * 3, 1 * 4, 2 * 3, 2 * 4, 2 * 3, 2 * 4}, {3, 2});
  auto [ri, rj] = bothWays([](const Tensor& x) { auto [u, s, vt] = linalg::svd(x); return V{u, s, vt}; }, r1);
  for (const auto& res : {ri, rj}) {
    CHECK(res[1].at(0) == doctest::Approx(15.0).epsilon(1e-14));
    CHECK(std::abs(res[1].at(1)) < 1e-14);
    checkSvd(r1, res[0], res[1], res[2]);
  }
  // Wide and rank two, batched with a zero matrix: the singular vectors of zero singular values
  // complete the others to orthonormal sets.
  std::vector<double> wide = {1, 2, 3, 4, 2, 4, 6, 8, 0, 1, 0, 1};
  wide.resize(24, 0.0);
  const Array r2 = f64(wide, {2, 3, 4});
  auto [wi, wj] = bothWays([](const Tensor& x) { auto [u, s, vt] = linalg::svd(x); return V{u, s, vt}; }, r2);
  for (const auto& res : {wi, wj}) {
    CHECK(std::abs(res[1].at(2)) < 1e-14);
    checkSvd(r2, res[0], res[1], res[2]);
  }
  // Zeros: s = 0, no NaN, u = vt = I.
  auto [zi, zj] = bothWays([](const Tensor& x) { auto [u, s, vt] = linalg::svd(x); return V{u, s, vt}; }, f64({0, 0, 0, 0}, {2, 2}));
  for (const auto& res : {zi, zj}) {
    ADJIT_CHECK_CLOSE(res[0], f64({1, 0, 0, 1}, {2, 2}), 0);
    ADJIT_CHECK_CLOSE(res[1], f64({0, 0}), 0);
    ADJIT_CHECK_CLOSE(res[2], f64({1, 0, 0, 1}, {2, 2}), 0);
  }
}

TEST_CASE("decompositions: NaN inputs give NaNs, not hangs") {
  auto allNan = [](const std::vector<Array>& rs) {
    bool all = true;
    for (const Array& r : rs)
      for (int64_t i = 0; i < r.size(); ++i) all = all && std::isnan(r.at(i));
    return all;
  };
  for (const Array& a : {f64({1, NAN, 2, 3}, {2, 2}), f64({1, 2, INFINITY, 3, 4, 5}, {3, 2})}) {
    if (a.shape()[0] == a.shape()[1]) {
      auto [ei, ej] = bothWays([](const Tensor& x) { auto [w, v] = linalg::eigh(x); return V{w, v}; }, a);
      CHECK(allNan(ei));
      CHECK(allNan(ej));
    }
    auto [si, sj] = bothWays([](const Tensor& x) { auto [u, s, vt] = linalg::svd(x); return V{u, s, vt}; }, a);
    CHECK(allNan(si));
    CHECK(allNan(sj));
  }
}

// Derivatives: finite differences in f64 of functions the sign conventions
// do not change, in reverse and forward mode, to second order.
TEST_CASE("eigh: gradients of eigenvalues and eigenvector projections against finite differences") {
  const Array b = randomMatrix(DType::f64, {4, 4}, 3);
  auto f = [&](const Tensor& a) {
    auto [w, v] = linalg::eigh(a);
    const Tensor weights = constant(f64({1, -2, 3, 0.5}));
    // v_1 v_1ᵀ and v_3 v_3ᵀ projections, weighted by b: sign-invariant.
    const Tensor v1 = slice(v, {0, 1}, {4, 2}), v3 = slice(v, {0, 3}, {4, 4});
    const Tensor p = matmul(v1, v1, {.transpose_b = true}) - 0.5 * matmul(v3, v3, {.transpose_b = true});
    return sum(w * weights) + sum(p * constant(b));
  };
  const Array a = randomMatrix(DType::f64, {4, 4}, 4);
  check_grads(f, a, {.order = 2, .modes = {"rev", "fwd"}});
  // Batched, eigenvalues only.
  check_grads([](const Tensor& a) { auto [w, v] = linalg::eigh(a); return sum(w * w); }, randomMatrix(DType::f64, {3, 5, 5}, 5),
              {.order = 2, .modes = {"rev", "fwd"}});
}

TEST_CASE("eigh: degenerate eigenvalues keep eigenvalue gradients finite") {
  // The identity: every eigenvalue repeats. d(sum w²)/dA = 2 v diag(w) vᵀ = 2 I.
  auto g = jit(grad([](const Tensor& a) { auto [w, v] = linalg::eigh(a); return sum(w * w); }));
  ADJIT_CHECK_CLOSE(g(f64({1, 0, 0, 1}, {2, 2})), f64({2, 0, 0, 2}, {2, 2}), 1e-14);
  // Gradients through the eigenvectors are not defined there: not finite (JAX's guard).
  auto gv = jit(grad([](const Tensor& a) { auto [w, v] = linalg::eigh(a); return sum(v * constant(f64({1, 2, 3, 4}, {2, 2}))); }));
  const Array r = gv(f64({1, 0, 0, 1}, {2, 2}));
  bool finite = true;
  for (int64_t i = 0; i < r.size(); ++i) finite = finite && std::isfinite(r.at(i));
  CHECK(!finite);
}

TEST_CASE("svd: gradients of singular values and of u diag(c) vt against finite differences") {
  for (const Shape& s : std::vector<Shape>{{4, 4}, {5, 3}, {3, 5}, {2, 4, 3}}) {
    INFO(Type{DType::f64, s}.str());
    const int64_t m = s[s.size() - 2], n = s[s.size() - 1], k = std::min(m, n);
    std::vector<double> cs;
    for (int64_t i = 0; i < k; ++i) cs.push_back(1.0 + 0.7 * static_cast<double>(i));
    const Array c = f64(cs);
    const Array b = randomMatrix(DType::f64, s, 21);
    auto f = [&](const Tensor& a) {
      auto [u, sv, vt] = linalg::svd(a);
      // u diag(c) vt: each term u_i v_iᵀ is sign-invariant.
      const Tensor x = matmul(u * constant(c), vt);
      return sum(sv * sv * constant(c)) + sum(x * constant(b));
    };
    check_grads(f, randomMatrix(DType::f64, s, 22), {.order = 2, .modes = {"rev", "fwd"}});
  }
  // The gradient of sum(s) is u vt (the nuclear norm's), defined at a zero singular value too.
  auto g = jit(grad([](const Tensor& a) { auto [u, sv, vt] = linalg::svd(a); return sum(sv); }));
  ADJIT_CHECK_CLOSE(g(f64({2, 0, 0, -3}, {2, 2})), f64({1, 0, 0, -1}, {2, 2}), 1e-15);
}

TEST_CASE("qr: gradients of q and r against finite differences, tall, square and wide") {
  for (const Shape& s : std::vector<Shape>{{3, 3}, {5, 3}, {3, 5}, {2, 4, 2}, {8, 8}}) {
    INFO(Type{DType::f64, s}.str());
    const int64_t m = s[s.size() - 2], n = s[s.size() - 1], k = std::min(m, n);
    Shape qs(s.begin(), s.end() - 1), rs(s.begin(), s.end() - 2);
    qs.push_back(k);
    rs.push_back(k);
    rs.push_back(n);
    const Array bq = randomMatrix(DType::f64, qs, 31), br = randomMatrix(DType::f64, rs, 32);
    auto f = [&](const Tensor& a) {
      auto [q, r] = linalg::qr(a);
      return sum(q * constant(bq)) + sum(r * r * constant(br)) + sum(sin(matmul(q, q, {.transpose_b = true})));
    };
    // Well conditioned: a plus a multiple of the identity on its leading square.
    Array a = randomMatrix(DType::f64, s, 33);
    for (int64_t bt = 0; bt < a.size() / (m * n); ++bt)
      for (int64_t i = 0; i < k; ++i) a.data<double>()[bt * m * n + i * n + i] += 3;
    check_grads(f, a, {.order = 2, .modes = {"rev", "fwd"}});
  }
}

TEST_CASE("decompositions: f32 gradients agree with f64 ones") {
  auto f = [](const Tensor& a) {
    auto [w, v] = linalg::eigh(a);
    auto [u, s, vt] = linalg::svd(a);
    auto [q, r] = linalg::qr(a);
    return sum(w * w) + sum(s) + sum(r * r) + sum(abs(q));
  };
  const Array a64 = randomMatrix(DType::f64, {2, 4, 4}, 41), a32 = randomMatrix(DType::f32, {2, 4, 4}, 41);
  const Array g64 = jit(grad(f))(a64), g32 = jit(grad(f))(a32);
  for (int64_t i = 0; i < g64.size(); ++i) CHECK(g32.at(i) == doctest::Approx(g64.at(i)).epsilon(1e-3));
}

TEST_CASE("decompositions: errors for bad operands name the op and the type") {
  auto traceWith = [](auto f, const Type& t) { return trace([&](V x) { return f(x[0]); }, std::vector<Type>{t}); };
  CHECK_THROWS_WITH_AS(traceWith([](const Tensor& x) { return linalg::qr(x).q; }, Type{DType::f64, {3}}),
                       doctest::Contains("qr: expected a matrix (or a batch of them) of rank >= 2, got f64[3]"), Error);
  CHECK_THROWS_WITH_AS(traceWith([](const Tensor& x) { return linalg::eigh(x).eigenvalues; }, Type{DType::f32, {2, 3}}),
                       doctest::Contains("eigh: expected square matrices, got f32[2,3]"), Error);
  CHECK_THROWS_WITH_AS(traceWith([](const Tensor& x) { return linalg::svd(x).s; }, Type{DType::i32, {2, 2}}),
                       doctest::Contains("svd: expected a floating-point matrix (or a batch of them), got i32[2,2]"), Error);
  // The error points at the user's line (this file).
  try {
    traceWith([](const Tensor& x) { return linalg::eigh(x).eigenvalues; }, Type{DType::f64, {4}});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.location().file).find("test_decompositions.cpp") != std::string::npos);
  }
}

// Values and gradients of sign-invariant programs by PyTorch float64
// (test/unit/torch_decompositions.py writes torch_decompositions_expected.inc).
namespace {
struct TorchCase {
  const char* name;
  std::vector<int64_t> shape;
  std::vector<double> input, value, gradient;
};
const std::vector<TorchCase> kTorchCases = {
#include "torch_decompositions_expected.inc"
};

/// The programs of torch_decompositions.py, by name.
Tensor torchProgram(const std::string& name, const Tensor& a) {
  if (name == "eigvalsh") {
    auto [w, v] = linalg::eigh(a);
    return sum(w * iota(w.shape(), static_cast<int64_t>(w.shape().size()) - 1, DType::f64)) + sum(w * w);
  }
  if (name == "eigh_projection") {
    auto [w, v] = linalg::eigh(a);
    const int64_t n = a.shape().back();
    const Tensor v0 = slice(v, {0, 0}, {n, 1});
    return sum(abs(matmul(v0, v0, {.transpose_b = true})) * a) + sum(exp(w * 0.1));
  }
  if (name == "svdvals") {
    auto [u, s, vt] = linalg::svd(a);
    return sum(s * s * s) + sum(sqrt(s));
  }
  if (name == "svd_projection") {
    auto [u, s, vt] = linalg::svd(a);
    const Tensor x = matmul(u, vt);
    return sum(x * x * a) + sum(matmul(u, u, {.transpose_b = true}) * 0.3);
  }
  if (name == "qr_abs") {
    auto [q, r] = linalg::qr(a);
    return sum(abs(matmul(q, r))) + sum(abs(r)) + sum(sin(matmul(matmul(q, q, {.transpose_b = true}), a)));
  }
  FAIL("unknown program " << name);
  return a;
}
} // namespace

TEST_CASE("decompositions: values and gradients agree with PyTorch float64") {
  REQUIRE(!kTorchCases.empty());
  for (const TorchCase& c : kTorchCases) {
    INFO(std::string(c.name));
    const Array a = f64(c.input, c.shape);
    const std::string name = c.name;
    auto vg = jit(value_and_grad([name](const Tensor& x) { return torchProgram(name, x); }));
    auto [value, gradient] = vg(a);
    CHECK(value.at(0) == doctest::Approx(c.value[0]).epsilon(1e-10));
    ADJIT_CHECK_CLOSE(gradient, f64(c.gradient, c.shape), 1e-9);
  }
}

TEST_CASE("guide: decompositions") {
  // [snippet:decompositions]
  auto f = jit([](const Tensor& a) {
    auto [w, v] = linalg::eigh(a);    // eigenvalues ascending, eigenvectors as columns
    auto [u, s, vt] = linalg::svd(a); // reduced: u [m, k], s [k] descending, vt [k, n]
    auto [q, r] = linalg::qr(a);      // reduced: q [m, k], r [k, n]
    return std::tuple{w, v, s, r};
  });
  auto [w, v, s, r] = f(Array(std::vector<double>{2, 1, 1, 2}, {2, 2}));
  // w = [1, 3], v = [[0.707, 0.707], [-0.707, 0.707]], s = [3, 1],
  // r = [[-2.236, -1.789], [0, 1.342]] (LAPACK's signs)
  // [/snippet:decompositions]
  const double h = std::sqrt(0.5);
  ADJIT_CHECK_CLOSE(w, f64({1, 3}), 1e-15);
  ADJIT_CHECK_CLOSE(v, f64({h, h, -h, h}, {2, 2}), 1e-15);
  ADJIT_CHECK_CLOSE(s, f64({3, 1}), 1e-15);
  ADJIT_CHECK_CLOSE(r, f64({-std::sqrt(5.0), -4 / std::sqrt(5.0), 0, 3 / std::sqrt(5.0)}, {2, 2}), 1e-15);
  // [snippet:decompositions-grad]
  // d(largest eigenvalue)/da = v vᵀ for its eigenvector v
  auto top = jit(grad([](const Tensor& a) {
    auto [w, v] = linalg::eigh(a);
    return sum(slice(w, {1}, {2}));
  }));
  Array g = top(Array(std::vector<double>{2, 1, 1, 2}, {2, 2})); // [[0.5, 0.5], [0.5, 0.5]]
  // [/snippet:decompositions-grad]
  ADJIT_CHECK_CLOSE(g, f64({0.5, 0.5, 0.5, 0.5}, {2, 2}), 1e-15);
}
