// bench/gradbench/ba.cpp — GradBench's `ba` eval: bundle adjustment's
// residuals (`objective`) and their sparse Jacobian (`jacobian`), in the
// eval's layout: CSR rows/cols/vals of the 3p x (11n + 3m + p) matrix, each
// observation's two reprojection rows (11 camera, 3 point and 1 weight
// column) and then one row per weight. The model is ADBench's
// (bench/adbench_models.h); the Jacobian's values are adjit's derivatives.
#include "../adbench_models.h"
#include "tool.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <memory>
#include <tuple>

#ifdef __linux__
#include <sys/mman.h>
#endif

using namespace adjit;
using namespace adjit::adbench;

namespace {

/// The eval's input, replicated as the suite's reader does: n copies of the
/// camera, m of the point, p of the weight and the feature; observation i
/// sees camera i mod n and point i mod m.
struct Ba {
  int64_t n, m, p;
  Array cams, points, w, feats, camOf, pointOf;
  explicit Ba(const gradbench::json& in)
      : n(in.at("n").get<int64_t>()), m(in.at("m").get<int64_t>()), p(in.at("p").get<int64_t>()) {
    const std::vector<double> cam = gradbench::numbers(in.at("cam")), x = gradbench::numbers(in.at("x")),
                              feat = gradbench::numbers(in.at("feat"));
    if (cam.size() != 11 || x.size() != 3 || feat.size() != 2)
      throw Error("ba: expected a camera of 11, a point of 3 and a feature of 2 numbers, got " + std::to_string(cam.size()) + ", " +
                  std::to_string(x.size()) + " and " + std::to_string(feat.size()));
    std::vector<double> c, X, f;
    for (int64_t i = 0; i < n; ++i) c.insert(c.end(), cam.begin(), cam.end());
    for (int64_t i = 0; i < m; ++i) X.insert(X.end(), x.begin(), x.end());
    for (int64_t i = 0; i < p; ++i) f.insert(f.end(), feat.begin(), feat.end());
    std::vector<int32_t> co(std::size_t(p), 0), po(std::size_t(p), 0);
    for (int64_t i = 0; i < p; ++i) co[std::size_t(i)] = int32_t(i % n), po[std::size_t(i)] = int32_t(i % m);
    cams = Array(c, {n, 11});
    points = Array(X, {m, 3});
    w = Array(std::vector<double>(std::size_t(p), in.at("w").get<double>()), {p});
    feats = Array(f, {p, 2});
    camOf = Array(co, {p});
    pointOf = Array(po, {p});
  }
};

std::unique_ptr<gradbench::Function> objective(const gradbench::json& in) {
  auto b = std::make_shared<const Ba>(in);
  auto f = jit(
      [](Tensor cams, Tensor points, Tensor w, Tensor feats, Tensor camOf, Tensor pointOf) {
        Tensor err = baReprojection(take(cams, camOf, 0), take(points, pointOf, 0), w, feats);
        return std::make_tuple(err, baWeightError(w));
      },
      gradbench::jitOptions("ba.objective"));
  return gradbench::timed([b, f]() mutable { return f(b->cams, b->points, b->w, b->feats, b->camOf, b->pointOf); },
                          [b](const auto& out) {
                            const double* err = std::get<0>(out).template data<double>();
                            return gradbench::json{
                                {"reproj_error", {{"elements", {err[0], err[1]}}, {"repeated", b->p}}},
                                {"w_err", {{"element", std::get<1>(out).template data<double>()[0]}, {"repeated", b->p}}}};
                          });
}

/// The Jacobian in CSR form (kept across evaluations, as the suite's
/// reference keeps its matrix: each evaluation overwrites it).
/// Its lists are allocated once and left uninitialised: each evaluation
/// writes every entry, and zeroing them first was one more pass over fresh
/// memory on the first call (466 MB at ba14). Large lists ask for huge pages
/// (Linux's transparent huge pages): the first call's writes then fault in
/// 2 MiB at a time instead of 4 KiB (114,000 faults at ba14).
template <class T> struct Buffer {
  struct Free {
    void operator()(T* q) const { std::free(q); }
  };
  std::unique_ptr<T[], Free> p;
  std::size_t n = 0;
  void resize(std::size_t size) {
    if (size == n) return;
    constexpr std::size_t kHuge = std::size_t(1) << 21;
    const std::size_t bytes = (size * sizeof(T) + kHuge - 1) / kHuge * kHuge;
    p.reset(static_cast<T*>(std::aligned_alloc(kHuge, bytes)));
    if (!p) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    madvise(p.get(), bytes, MADV_HUGEPAGE); // advice only: without it, 4 KiB pages
#endif
    n = size;
  }
  T* data() const { return p.get(); }
  std::size_t size() const { return n; }
  T& operator[](std::size_t i) const { return p[i]; }
  const T* begin() const { return p.get(); }
  T back() const { return p[n - 1]; }
};
struct Sparse {
  Buffer<int32_t> rows, cols;
  Buffer<double> vals;
};

std::unique_ptr<gradbench::Function> jacobian(const gradbench::json& in) {
  auto b = std::make_shared<const Ba>(in);
  // Residual row j of observation i depends only on that observation's
  // camera, point and weight: differentiating with respect to the gathered
  // per-observation copies, the pullback of "1 in row j of every
  // observation" is row j of every observation's 2x15 block. The values come
  // out in CSR order: per observation its two rows (camera, point, weight),
  // then the weight rows' diagonal.
  auto df = jit(
      [p = b->p](Tensor cams, Tensor points, Tensor w, Tensor feats, Tensor camOf, Tensor pointOf) {
        Tensor camP = take(cams, camOf, 0), pointP = take(points, pointOf, 0);
        auto [err, pullback] = vjp([&](Tensor c, Tensor x, Tensor wi) { return baReprojection(c, x, wi, feats); }, camP, pointP, w);
        auto [werr, pullbackW] = vjp(baWeightError, w);
        Tensor one = ones_like(w), zero = zeros_like(w);
        auto row = [&](const std::vector<Tensor>& g) { return concatenate({g[0], g[1], reshape(g[2], {p, 1})}, 1); }; // [p, 15]
        Tensor blocks = stack({row(pullback(stack({one, zero}, 1))), row(pullback(stack({zero, one}, 1)))}, 1); // [p, 2, 15]
        // Two results, each written where it belongs in the values (see
        // below): one concatenated result went through a scratch copy of
        // the [p, 2, 15] blocks first.
        return std::make_tuple(blocks, pullbackW(one)[0]);
      },
      gradbench::jitOptions("ba.jacobian"));
  return gradbench::timed(
      [b, df, out = std::make_shared<Sparse>()]() mutable {
        Sparse& s = *out;
        const int32_t n = int32_t(b->n), m = int32_t(b->m), p = int32_t(b->p);
        s.vals.resize(std::size_t(31 * p));
        std::tuple<Array, Array> vals{Array::view(s.vals.data(), {b->p, 2, 15}), Array::view(s.vals.data() + 30 * b->p, {b->p})};
        df.into(vals, b->cams, b->points, b->w, b->feats, b->camOf, b->pointOf);
        s.rows.resize(std::size_t(3 * p + 1));
        s.cols.resize(std::size_t(31 * p));
        const int32_t* camOf = b->camOf.data<int32_t>();
        const int32_t* pointOf = b->pointOf.data<int32_t>();
        int32_t* c = s.cols.data();
        // An observation's two rows have the same 15 columns: the first row
        // is filled, the second copied from it.
        for (int32_t i = 0; i < p; ++i, c += 30) {
          s.rows[std::size_t(2 * i)] = 30 * i;
          s.rows[std::size_t(2 * i + 1)] = 30 * i + 15;
          for (int32_t j = 0; j < 11; ++j) c[j] = 11 * camOf[i] + j;
          for (int32_t j = 0; j < 3; ++j) c[11 + j] = 11 * n + 3 * pointOf[i] + j;
          c[14] = 11 * n + 3 * m + i;
          std::copy_n(c, 15, c + 15);
        }
        for (int32_t i = 0; i <= p; ++i) s.rows[std::size_t(2 * p + i)] = 30 * p + i;
        for (int32_t i = 0; i < p; ++i) *c++ = 11 * n + 3 * m + i;
        return std::shared_ptr<const Sparse>(out);
      },
      [](const std::shared_ptr<const Sparse>& sp) {
        // The suite's output: the first 30 entries of each list and the last one.
        const Sparse& s = *sp;
        const double* v = s.vals.data();
        const std::size_t nnz = s.cols.size();
        std::vector<int32_t> rows(s.rows.begin(), s.rows.begin() + 30), cols(s.cols.begin(), s.cols.begin() + 30);
        std::vector<double> vals(v, v + 30);
        rows.push_back(s.rows.back());
        cols.push_back(s.cols.back());
        vals.push_back(v[nnz - 1]);
        return gradbench::json{{"rows", rows}, {"cols", cols}, {"vals", vals}};
      });
}

} // namespace

int main(int argc, char** argv) {
  return gradbench::main(argc, argv, {{"objective", objective}, {"jacobian", jacobian}});
}
