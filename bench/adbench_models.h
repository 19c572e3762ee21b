// bench/adbench_models.h — ADBench's GMM, BA and LSTM models written once with
// adjit, shared by bench/adbench.cpp (ADBench's objectives) and GradBench's
// gmm, ba and lstm evals (bench/gradbench/). The definitions follow
// ../shared/bench-data/adbench/README.md; derivatives are adjit's.
#pragma once

#include <adjit/adjit.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace adjit::adbench {

// ---- GMM --------------------------------------------------------------------------------------

/// A GMM problem's data (not differentiated): the points and the Wishart prior's parameters.
struct GmmData {
  int d = 0, k = 0, n = 0;
  Array x; ///< [n, d]
  double gamma = 1, m = 0;
};

/// For Q_k's d*d entries, row-major, an index into [exp(q_k) (d), l_k (d(d-1)/2), 0]:
/// the diagonal from q, the strict lower part from l column by column, zero above.
inline Array gmmTriangleIndex(int d) {
  const int nl = d * (d - 1) / 2;
  std::vector<int32_t> tri(std::size_t(d * d), d + nl);
  int idx = 0;
  for (int c = 0; c < d; ++c) {
    tri[std::size_t(c * d + c)] = c;
    for (int r = c + 1; r < d; ++r) tri[std::size_t(r * d + c)] = d + idx++;
  }
  return Array(tri, {d * d});
}

/// The log-likelihood LL = -n d/2 log(2 pi) + sum_i lse_k(beta_ik) - n lse(alpha)
/// of the points x ([n, d]: g.x as a constant or an argument of the compiled
/// function), with beta_ik = alpha_k + sum_j q_kj - |Q_k (x_i - mu_k)|^2 / 2.
/// `pi` is a parameter because ADBench rounds it (3.14159265359).
inline Tensor gmmLogLikelihood(const GmmData& g, const Array& tri, Tensor x, Tensor alpha, Tensor mu, Tensor q, Tensor l, double pi) {
  const int d = g.d, k = g.k, n = g.n;
  Tensor Q = reshape(take(concatenate({exp(q), l, zeros_like(q)}, 1), constant(tri), 1), {k, d, d});
  Tensor diff = reshape(x, {n, 1, d}) - reshape(mu, {1, k, d}); // [n, k, d]
  Tensor qd = matmul(Q, transpose(diff, {1, 2, 0}));                        // [k, d, n]
  Tensor beta = reshape(alpha + sum(q, {1}), {k, 1}) - 0.5 * sum(qd * qd, {1});
  return -0.5 * n * d * std::log(2 * pi) + sum(logsumexp(beta, {0})) - double(n) * logsumexp(alpha, {0});
}

/// The Wishart prior's variable part P = sum_k [gamma^2/2 (|exp(q_k)|^2 + |l_k|^2) - m sum_j q_kj].
inline Tensor gmmWishartTerm(const GmmData& g, Tensor q, Tensor l) {
  return sum(0.5 * g.gamma * g.gamma * (sum(exp(2.0 * q), {1}) + sum(l * l, {1})) - g.m * sum(q, {1}));
}

/// The Wishart prior's constant per component, C = n' d (log gamma - log(2)/2) - log Gamma_d(n'/2), n' = d + m + 1.
inline double gmmWishartConstant(const GmmData& g, double pi) {
  const int d = g.d;
  const double np = d + g.m + 1;
  double lgammaD = 0.25 * d * (d - 1) * std::log(pi);
  for (int j = 1; j <= d; ++j) lgammaD += std::lgamma(0.5 * np + 0.5 * (1 - j));
  return np * d * (std::log(g.gamma) - 0.5 * std::log(2.0)) - lgammaD;
}

// ---- BA ---------------------------------------------------------------------------------------

/// The reprojection residuals [p, 2] of observations whose camera, point and
/// weight rows are given ([p, 11], [p, 3], [p]); `feat` is [p, 2].
inline Tensor baReprojection(Tensor cam, Tensor X, Tensor w, Tensor feat) {
  auto col = [](const Tensor& t, int64_t j) { return t(all, j); };
  Tensor r0 = col(cam, 0), r1 = col(cam, 1), r2 = col(cam, 2);
  Tensor x0 = col(X, 0) - col(cam, 3), x1 = col(X, 1) - col(cam, 4), x2 = col(X, 2) - col(cam, 5);
  Tensor theta2 = r0 * r0 + r1 * r1 + r2 * r2;
  // Rodrigues where theta^2 != 0 (exactly), else X + r x X; the square root
  // never sees 0, so the branch not taken has a finite gradient.
  Tensor nonzero = theta2 != 0.0;
  Tensor theta = sqrt(where(nonzero, theta2, ones_like(theta2)));
  Tensor c = cos(theta), s = sin(theta);
  Tensor w0 = r0 / theta, w1 = r1 / theta, w2 = r2 / theta;
  Tensor dot = w0 * x0 + w1 * x1 + w2 * x2;
  auto rodrigues = [&](const Tensor& xi, const Tensor& cross, const Tensor& wi) { return xi * c + cross * s + wi * dot * (1.0 - c); };
  Tensor cr0 = w1 * x2 - w2 * x1, cr1 = w2 * x0 - w0 * x2, cr2 = w0 * x1 - w1 * x0;
  Tensor small0 = x0 + (r1 * x2 - r2 * x1), small1 = x1 + (r2 * x0 - r0 * x2), small2 = x2 + (r0 * x1 - r1 * x0);
  Tensor y0 = where(nonzero, rodrigues(x0, cr0, w0), small0);
  Tensor y1 = where(nonzero, rodrigues(x1, cr1, w1), small1);
  Tensor y2 = where(nonzero, rodrigues(x2, cr2, w2), small2);
  Tensor p0 = y0 / y2, p1 = y1 / y2;
  Tensor rsq = p0 * p0 + p1 * p1;
  Tensor distortion = 1.0 + col(cam, 9) * rsq + col(cam, 10) * rsq * rsq;
  Tensor proj0 = col(cam, 6) * p0 * distortion + col(cam, 7), proj1 = col(cam, 6) * p1 * distortion + col(cam, 8);
  return stack({w * (proj0 - col(feat, 0)), w * (proj1 - col(feat, 1))}, 1);
}

/// The weight residuals 1 - w^2.
inline Tensor baWeightError(Tensor w) { return 1.0 - w * w; }

/// The reprojection residuals ([p, 2]) and, for k = 0, 1, row k of every
/// observation's Jacobian block with respect to its own camera ([p, 11]),
/// point ([p, 3]) and weight ([p]): residual k of observation i depends on
/// that observation's rows only, so the pullback of "1 in residual k of every
/// observation" is row k of every block. One forward, two backward passes.
struct BaRows {
  Tensor err;
  std::vector<Tensor> row[2];
};
inline BaRows baReprojectionRows(Tensor camP, Tensor XP, Tensor w, Tensor feat) {
  auto [err, pullback] = vjp([&](Tensor c, Tensor x, Tensor wi) { return baReprojection(c, x, wi, feat); }, camP, XP, w);
  Tensor one = ones_like(w), zero = zeros_like(w);
  return BaRows{err, {pullback(stack({one, zero}, 1)), pullback(stack({zero, one}, 1))}};
}

/// A BA problem as ADBench's reader builds it from a data file (`n m p`, then
/// one camera, point, weight and feature): n copies of the camera ([n * 11]),
/// m of the point ([m * 3]), p of the weight and the feature ([p], [p * 2]);
/// observation i sees camera i mod n and point i mod m. `observations` > 0
/// (fewer than p) makes a smaller problem of the same shape: that many
/// observations over proportionally fewer cameras and points, so each point is
/// still seen by about p / m cameras.
struct BaInput {
  int64_t n = 0, m = 0, p = 0;
  std::vector<double> cams, points, w, feats;
  std::vector<int32_t> camOf, pointOf;
};
/// ADBench's BA file at `path`; p == 0 when it is missing or too short.
inline BaInput readBa(const std::string& path, int64_t observations = 0) {
  std::ifstream in(path);
  std::vector<double> v;
  for (double x; in >> x;) v.push_back(x);
  BaInput b;
  if (v.size() < 20) return b;
  b.n = int64_t(v[0]), b.m = int64_t(v[1]), b.p = int64_t(v[2]);
  if (observations > 0 && observations < b.p) {
    b.n = std::max<int64_t>(1, b.n * observations / b.p);
    b.m = std::max<int64_t>(1, b.m * observations / b.p);
    b.p = observations;
  }
  for (int64_t i = 0; i < b.n; ++i) b.cams.insert(b.cams.end(), v.begin() + 3, v.begin() + 14);
  for (int64_t i = 0; i < b.m; ++i) b.points.insert(b.points.end(), v.begin() + 14, v.begin() + 17);
  b.w.assign(std::size_t(b.p), v[17]);
  for (int64_t i = 0; i < b.p; ++i) {
    b.feats.insert(b.feats.end(), v.begin() + 18, v.begin() + 20);
    b.camOf.push_back(int32_t(i % b.n));
    b.pointOf.push_back(int32_t(i % b.m));
  }
  return b;
}

// ---- LSTM -------------------------------------------------------------------------------------

/// ADBench's LSTM: the weights of each layer's gates (sliced from the main
/// parameters [2 layers, 4 b]), the initial state, and one character's step.
struct Lstm {
  std::vector<Tensor> h, cell, wf, wi, wo, wc, bf, bi, bo, bc;
  Tensor inW, outW, outB;
  Lstm(const Tensor& mainParams, const Tensor& extra, const Tensor& state, int layers, int64_t b)
      : inW(extra(0)), outW(extra(1)), outB(extra(2)) {
    auto part = [&](int64_t r, int64_t which) { return mainParams(r, range(which * b, (which + 1) * b)); };
    for (int l = 0; l < layers; ++l) {
      h.push_back(state(2 * l));
      cell.push_back(state(2 * l + 1));
      wf.push_back(part(2 * l, 0)), wi.push_back(part(2 * l, 1)), wo.push_back(part(2 * l, 2)), wc.push_back(part(2 * l, 3));
      bf.push_back(part(2 * l + 1, 0)), bi.push_back(part(2 * l + 1, 1));
      bo.push_back(part(2 * l + 1, 2)), bc.push_back(part(2 * l + 1, 3));
    }
  }
  /// Feeds character x through the layers (updating hs and cs); returns the
  /// log-likelihood of the next character.
  Tensor step(std::vector<Tensor>& hs, std::vector<Tensor>& cs, const Tensor& x, const Tensor& next) const {
    Tensor y = x * inW;
    for (std::size_t l = 0; l < hs.size(); ++l) {
      Tensor f = sigmoid(y * wf[l] + bf[l]), i = sigmoid(hs[l] * wi[l] + bi[l]);
      Tensor o = sigmoid(y * wo[l] + bo[l]), g = tanh(hs[l] * wc[l] + bc[l]);
      cs[l] = cs[l] * f + i * g;
      hs[l] = o * tanh(cs[l]);
      y = hs[l];
    }
    Tensor yhat = y * outW + outB;
    Tensor lse = log(sum(exp(yhat)) + 2.0);
    return sum(next * (yhat - lse));
  }
};

/// ADBench's LSTM loss over the sequence ([chars, b]) from `state0` ([2 layers, b]),
/// neither differentiated: a `scan` over the characters whose body runs the
/// layers, or unrolled at trace time.
inline Tensor lstmLoss(Tensor mainParams, Tensor extra, Tensor state0, Tensor sequence, int layers, int64_t chars, int64_t b,
                       bool unrolled = false) {
  const Lstm m(mainParams, extra, state0, layers, b);
  Tensor total = zeros_like(sum(m.inW));
  if (unrolled) {
    std::vector<Tensor> hs = m.h, cs = m.cell;
    for (int64_t t = 0; t + 1 < chars; ++t) total = total + m.step(hs, cs, sequence(t), sequence(t + 1));
  } else {
    using Carry = std::tuple<std::vector<Tensor>, std::vector<Tensor>, Tensor>;
    auto step = [&](const Carry& c, const std::pair<Tensor, Tensor>& chr) {
      auto [hs, cs, sum] = c;
      sum = sum + m.step(hs, cs, chr.first, chr.second);
      return std::pair{Carry{hs, cs, sum}, std::tuple<>{}};
    };
    std::pair<Tensor, Tensor> xs{sequence(range(0, chars - 1)), sequence(range(1, chars))};
    total = std::get<2>(scan(step, Carry{m.h, m.cell, total}, xs).first);
  }
  return -total / double((chars - 1) * b);
}

} // namespace adjit::adbench
