// test/unit/test_lapack.cpp — the LAPACK path of large factorisations (the
// JIT's, where a LAPACK library is loaded at run time: runtime/Lapack.h):
// cholesky, triangular_solve (every flag), lu, solve, qr, eigh and svd against
// the generated path (runtime::lapack::GeneratedOnlyHere) and the interpreter, f32
// and f64, batched; gradients against finite differences in f64; NaN for a
// matrix that is not positive definite; and that the path is taken (its entry
// point in the LLVM IR, the matrices counted). On a host without LAPACK both
// JIT paths are the generated code: the comparisons hold, the path checks
// are skipped.
#include "Check.h"
#include "runtime/Lapack.h"

#include <adjit/check.h>
#include <adjit/decompositions.h>
#include <adjit/linalg.h>

#include <optional>
#include <random>
#include <thread>

using namespace adjit;
using namespace adjit::test;
namespace la = adjit::linalg;
using V = std::vector<Tensor>;

namespace {

/// Above every op's threshold (LinalgSolve.cpp, LinalgSpectral.cpp), small enough for the interpreter.
constexpr int64_t kN = 80;

/// A [batch..., m, n] array of uniform(-1, 1) values (dtype t).
Array randomMatrix(DType t, const Shape& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(-1, 1);
  Array a(Type{t, shape});
  for (int64_t i = 0; i < a.size(); ++i) a.set(i, d(rng));
  return a;
}

/// Symmetric positive definite: x xᵀ / n + I, batched.
Array spd(DType t, const Shape& shape, unsigned seed) {
  const Array x = randomMatrix(DType::f64, shape, seed);
  const int64_t n = shape.back();
  Array a(Type{t, shape});
  for (int64_t b = 0; b < a.size() / (n * n); ++b)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = i == j ? 1.0 : 0.0;
        for (int64_t k = 0; k < n; ++k) s += x.at(b * n * n + i * n + k) * x.at(b * n * n + j * n + k) / double(n);
        a.set(b * n * n + i * n + j, s);
      }
  return a;
}

/// Triangles well-conditioned with their diagonal or a unit one: small entries, a diagonal of 3 to 4.
Array triangularish(DType t, const Shape& shape, unsigned seed) {
  Array a = randomMatrix(t, shape, seed);
  const int64_t n = shape.back();
  for (int64_t i = 0; i < a.size(); ++i) a.set(i, (i % (n * n)) / n == i % n ? 3.5 + 0.5 * a.at(i) : 0.3 * a.at(i) / std::sqrt(double(n)));
  return a;
}

/// Results of f by the interpreter, the JIT with LAPACK (where loaded) and the JIT without.
struct ThreeWays {
  std::vector<Array> interp, lapack, generated;
};
ThreeWays threeWays(const std::function<V(V)>& f, const std::vector<Array>& in) {
  std::vector<Type> types;
  for (const Array& a : in) types.push_back(a.type());
  Module m = trace([&](V x) { return f(x); }, types);
  ThreeWays r;
  r.interp = m.interpret("f", in);
  r.lapack = jit([&](V x) { return f(x); })(in);
  runtime::lapack::GeneratedOnlyHere generated;
  r.generated = jit([&](V x) { return f(x); })(in);
  return r;
}

/// Both JIT paths agree with the interpreter.
void agree(const ThreeWays& r, double rtol) {
  REQUIRE(r.lapack.size() == r.interp.size());
  for (std::size_t i = 0; i < r.interp.size(); ++i) {
    INFO("result " << i);
    ADJIT_CHECK_CLOSE(r.lapack[i], r.interp[i], rtol);
    ADJIT_CHECK_CLOSE(r.generated[i], r.interp[i], rtol);
  }
}

double tolOf(DType t) { return t == DType::f32 ? 2e-4 : 1e-9; }

/// Whether the JIT's code for f on `in` names LAPACK's entry point `entry`.
bool callsLapack(const std::function<Tensor(V)>& f, const std::vector<Array>& in, const std::string& entry, bool lapack = true) {
  std::optional<runtime::lapack::GeneratedOnlyHere> generated;
  if (!lapack) generated.emplace();
  return jit([&](V x) { return f(x); }).lower(in).llvm_ir.find(entry) != std::string::npos;
}

} // namespace

TEST_CASE("lapack: large cholesky, triangular_solve and lu call LAPACK where it is loaded, and only then") {
  const Array a = spd(DType::f64, {kN, kN}, 1);
  const bool loaded = runtime::lapack::available();
  INFO("LAPACK: " << (loaded ? runtime::lapack::library() : std::string("none")));
  CHECK(callsLapack([](V x) { return la::cholesky(x[0]); }, {a}, "adjit_lapack_cholesky") == loaded);
  CHECK(callsLapack([](V x) { return la::lu(x[0]).lu; }, {a}, "adjit_lapack_lu") == loaded);
  CHECK(callsLapack([](V x) { return la::triangular_solve(x[0], x[0], {.lower = true}); }, {a}, "adjit_lapack_triangular_solve") == loaded);
  CHECK(callsLapack([](V x) { return la::qr(x[0]).r; }, {a}, "adjit_lapack_qr") == loaded);
  CHECK(callsLapack([](V x) { return la::eigh(x[0]).eigenvalues; }, {a}, "adjit_lapack_eigh") == loaded);
  CHECK(callsLapack([](V x) { return la::svd(x[0]).s; }, {a}, "adjit_lapack_svd") == loaded);
  // never when turned off, nor for small matrices
  CHECK_FALSE(callsLapack([](V x) { return la::cholesky(x[0]); }, {a}, "adjit_lapack", false));
  CHECK_FALSE(callsLapack([](V x) { return la::cholesky(x[0]); }, {spd(DType::f64, {4, 4}, 1)}, "adjit_lapack"));
  if (!loaded) return;
  const uint64_t before = runtime::lapack::matricesDone();
  jit([](const Tensor& x) { return la::cholesky(x); })(spd(DType::f64, {3, kN, kN}, 2));
  CHECK(runtime::lapack::matricesDone() - before == 3);
}

TEST_CASE("lapack: cholesky agrees with the generated code and the interpreter, f32 and f64, batched; NaN where not positive definite") {
  for (DType t : {DType::f64, DType::f32}) {
    INFO(name_of(t));
    agree(threeWays([](V x) { return V{la::cholesky(x[0])}; }, {spd(t, {2, kN, kN}, 3)}), tolOf(t));
    agree(threeWays([](V x) { return V{la::cholesky(x[0], false)}; }, {spd(t, {kN, kN}, 4)}), tolOf(t));
    // the first matrix of the batch loses positive definiteness (a negative pivot), the second has a NaN
    Array bad = spd(t, {3, kN, kN}, 5);
    bad.set(kN * kN / 2 + kN / 2, -5.0);
    bad.set(2 * kN * kN + 7 * kN + 3, std::nan(""));
    const ThreeWays r = threeWays([](V x) { return V{la::cholesky(x[0])}; }, {bad});
    agree(r, tolOf(t));
    for (int64_t b : {0, 2}) {
      CHECK(std::isnan(r.lapack[0].at(b * kN * kN)));
      CHECK(std::isnan(r.lapack[0].at(b * kN * kN + kN * kN - 1)));
    }
    CHECK(r.lapack[0].at(kN * kN) > 0);
  }
}

TEST_CASE("lapack: triangular_solve agrees with the generated code for every combination of flags, f32 and f64, batched") {
  for (int flags = 0; flags < 16; ++flags)
    for (DType t : {DType::f64, DType::f32}) {
      const la::TriangularSolveOptions o{.lower = bool(flags & 1), .left_side = bool(flags & 2), .transpose_a = bool(flags & 4),
                                         .unit_diagonal = bool(flags & 8)};
      INFO("flags " << flags << " " << name_of(t));
      const Array a = triangularish(t, {2, kN, kN}, 6 + flags);
      const int64_t cols = 1 + flags % 5; // one right-hand side (a vector) among others
      const Array b = randomMatrix(t, o.left_side ? Shape{2, kN, cols} : Shape{2, cols, kN}, 7);
      agree(threeWays([o](V x) { return V{la::triangular_solve(x[0], x[1], o)}; }, {a, b}), tolOf(t));
    }
}

TEST_CASE("lapack: triangular_solve with one right-hand side (LAPACK's trsv) agrees for every combination of flags, f32 and f64") {
  for (int flags = 0; flags < 16; ++flags)
    for (DType t : {DType::f64, DType::f32}) {
      const la::TriangularSolveOptions o{.lower = bool(flags & 1), .left_side = bool(flags & 2), .transpose_a = bool(flags & 4),
                                         .unit_diagonal = bool(flags & 8)};
      INFO("flags " << flags << " " << name_of(t));
      const Array a = triangularish(t, {3, kN, kN}, 40 + flags);
      const Array b = randomMatrix(t, o.left_side ? Shape{3, kN, 1} : Shape{3, 1, kN}, 41);
      agree(threeWays([o](V x) { return V{la::triangular_solve(x[0], x[1], o)}; }, {a, b}), tolOf(t));
    }
}

TEST_CASE("lapack: lu keeps adjit's pivots and permutation, square, tall and wide; solve, det agree, f32 and f64, batched") {
  for (DType t : {DType::f64, DType::f32}) {
    INFO(name_of(t));
    const Array a = randomMatrix(t, {2, kN, kN}, 8);
    const ThreeWays r = threeWays([](V x) {
      const la::LU<> f = la::lu(x[0]);
      return V{f.lu, f.pivots, f.permutation};
    }, {a});
    // random matrices: no near-ties between pivot candidates, so the same pivots
    agree(r, tolOf(t) * 10);
    const Array b = randomMatrix(t, {2, kN, 3}, 9);
    agree(threeWays([](V x) { return V{la::solve(x[0], x[1]), la::slogdet(x[0]).logabsdet}; }, {a, b}), tolOf(t) * 10);
    // tall and wide: the same factors as the generated code (LAPACK's column-major copy)
    for (const Shape& shape : {Shape{2, kN, kN - 13}, Shape{kN - 13, kN}}) {
      INFO(Type{t, shape}.str());
      agree(threeWays([](V x) {
        const la::LU<> f = la::lu(x[0]);
        return V{f.lu, f.pivots, f.permutation};
      }, {randomMatrix(t, shape, 11)}), tolOf(t) * 10);
    }
    // a singular matrix (two equal rows) is fine: no NaN from LAPACK's info > 0, P a = L U (the
    // pivots after the zero pivot are rounding's choice, path by path)
    Array s = randomMatrix(t, {kN, kN}, 10);
    for (int64_t j = 0; j < kN; ++j) s.set(5 * kN + j, s.at(9 * kN + j));
    agree(threeWays([](V x) {
      const la::LU<> f = la::lu(x[0]);
      const Tensor u = triu(f.lu); // L U = (tril(lu, -1) + I) U
      return V{matmul(one_hot(f.permutation, kN, f.lu.dtype()), x[0]) - (matmul(tril(f.lu, -1), u) + u)};
    }, {s}), tolOf(t) * 10);
  }
}

TEST_CASE("lapack: qr agrees with the generated code and the interpreter (LAPACK's signs), square, tall and wide, f32 and f64, batched") {
  for (DType t : {DType::f64, DType::f32}) {
    INFO(name_of(t));
    auto qr = [](V x) { const auto d = la::qr(x[0]); return V{d.q, d.r}; };
    agree(threeWays(qr, {randomMatrix(t, {2, kN, kN}, 30)}), tolOf(t) * 10);
    agree(threeWays(qr, {randomMatrix(t, {kN + 7, kN}, 31)}), tolOf(t) * 10);
    agree(threeWays(qr, {randomMatrix(t, {2, kN, kN + 9}, 32)}), tolOf(t) * 10);
    // a NaN: the generated reflections spread it from its column on (as the
    // interpreter), the LAPACK path makes every result NaN (LAPACK alone may not)
    Array nan = randomMatrix(t, {2, kN, kN}, 34);
    nan.set(kN * kN + 3 * kN + 17, std::nan(""));
    const ThreeWays r = threeWays(qr, {nan});
    for (std::size_t i = 0; i < 2; ++i) {
      INFO("result " << i);
      ADJIT_CHECK_CLOSE(r.generated[i], r.interp[i], tolOf(t) * 10);
      const int64_t half = r.interp[i].size() / 2;
      for (int64_t e = 0; e < half; ++e) REQUIRE(r.lapack[i].at(e) == doctest::Approx(r.interp[i].at(e)).epsilon(tolOf(t) * 100));
      if (!runtime::lapack::available()) continue;
      for (int64_t e = half; e < 2 * half; ++e) REQUIRE(std::isnan(r.lapack[i].at(e)));
    }
  }
  // the path counts its matrices
  if (!runtime::lapack::available()) return;
  const uint64_t before = runtime::lapack::matricesDone();
  jit([](const Tensor& x) { return la::qr(x).q; })(randomMatrix(DType::f64, {3, kN, kN}, 33));
  CHECK(runtime::lapack::matricesDone() - before == 3);
}

TEST_CASE("lapack: eigh and svd agree with the generated code (values, signed vectors), f32 and f64, batched") {
  for (DType t : {DType::f64, DType::f32}) {
    INFO(name_of(t));
    // random matrices have eigen- and singular values apart by ~1/n: vectors agree to tol / gap
    const double tol = t == DType::f32 ? 2e-2 : 1e-7;
    const Array a = randomMatrix(t, {2, kN, kN}, 11);
    agree(threeWays([](V x) { const auto e = la::eigh(x[0]); return V{e.eigenvalues, e.eigenvectors}; }, {a}), tol);
    agree(threeWays([](V x) { const auto s = la::svd(x[0]); return V{s.u, s.s, s.vt}; }, {a}), tol);
    const Array wide = randomMatrix(t, {kN / 2 + 3, kN + 1}, 12);
    agree(threeWays([](V x) { const auto s = la::svd(x[0]); return V{s.u, s.s, s.vt}; }, {wide}), tol);
    agree(threeWays([](V x) { const auto s = la::svd(x[0]); return V{s.u, s.s, s.vt}; }, {randomMatrix(t, {kN + 1, kN / 2 + 3}, 13)}), tol);
    // a NaN: every result NaN, as the generated code
    Array nan = randomMatrix(t, {kN, kN}, 14);
    nan.set(17, std::nan(""));
    agree(threeWays([](V x) { const auto e = la::eigh(x[0]); return V{e.eigenvalues, e.eigenvectors}; }, {nan}), 0);
  }
}

TEST_CASE("lapack: gradients through the LAPACK path against finite differences, f64") {
  const int64_t n = kN;
  const Array a = spd(DType::f64, {n, n}, 15);
  const Array w = randomMatrix(DType::f64, {n, n}, 16);
  const Array b = randomMatrix(DType::f64, {n, 2}, 17), c = randomMatrix(DType::f64, {n, 2}, 18);
  const CheckGradsOptions o{.modes = {"rev", "fwd"}, .rtol = 1e-4};
  check_grads([&](const Tensor& x) { return sum(la::cholesky(x) * constant(w)); }, a, o);
  check_grads([&](const Tensor& x) { return sum(la::solve(x, constant(b)) * constant(c)); }, a, o);
  check_grads([&](const Tensor& x) { const auto d = la::qr(x); return sum(d.q * constant(w)) + sum(d.r * constant(w)); }, a, o);
  check_grads([&](const Tensor& x) {
    const auto e = la::eigh(x);
    // sign-invariant: the eigenvalues and the projector onto the top eigenvector
    const Tensor top = slice(e.eigenvectors, {0, n - 1}, {n, n});
    return sum(e.eigenvalues * e.eigenvalues) + sum(matmul(top, top, {.transpose_b = true}) * constant(w));
  }, a, o);
}

TEST_CASE("lapack: one kernel called from several threads at once gives each call its own result") {
  auto f = jit([](const Tensor& x) { const auto e = la::eigh(x); return la::cholesky(x) + sum(e.eigenvalues); });
  std::vector<Array> in, want;
  for (unsigned i = 0; i < 4; ++i) {
    in.push_back(spd(DType::f64, {kN, kN}, 20 + i));
    want.push_back(f(in.back()));
  }
  std::vector<Array> got(in.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < in.size(); ++i)
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 3; ++rep) got[i] = f(in[i]);
    });
  for (std::thread& t : threads) t.join();
  for (std::size_t i = 0; i < in.size(); ++i) CHECK(bytesOf(got[i]) == bytesOf(want[i]));
}
