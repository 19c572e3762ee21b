// examples/ceres_ba/main.cpp — bundle adjustment with Ceres, derivatives by
// adjit: ADBench's BA residuals (bench/adbench_models.h, written once with
// adjit) handed to Ceres as CostFunctions whose residuals and Jacobians come
// from one batched adjit call per Ceres evaluation (an EvaluationCallback),
// and the same problem solved with Ceres's AutoDiffCostFunction (Jets); both
// final costs printed and compared. `--bench` times the BA Jacobian instead:
// adjit's sparse_jacobian, the rows formulation of bench/adbench.cpp and
// Ceres's Jets over every residual block, interleaved in one process.
//   ceres_ba_example [FILE] [--observations K] [--no-times] [--per-block | --map] [--free] [--progress] [--report]
//   ceres_ba_example --bench [FILE...]       (default ba1..ba5 and ba10)
#include "../../bench/adbench_models.h"

#include <adjit/adjit.h>
#include <adjit/sparse_derivatives.h>

#include <ceres/ceres.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace adjit;
using namespace adjit::adbench;
using Clock = std::chrono::steady_clock;

namespace {

double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---- The model for Ceres's AutoDiffCostFunction ---------------------------------------------
// What a Ceres user has today: the residual written again as a template over
// Jets. ADBench's definition (../shared/bench-data/adbench/README.md), the
// same as baReprojection and baWeightError: Rodrigues where theta^2 != 0
// exactly, else X + r x X; residuals w (proj - feat) and 1 - w^2.
struct JetResidual {
  double feat[2];
  template <class T> bool operator()(const T* cam, const T* X, const T* w, T* r) const {
    using std::cos, std::sin, std::sqrt;
    const T x[3] = {X[0] - cam[3], X[1] - cam[4], X[2] - cam[5]};
    const T theta2 = cam[0] * cam[0] + cam[1] * cam[1] + cam[2] * cam[2];
    T y[3];
    if (theta2 != T(0)) {
      const T theta = sqrt(theta2), c = cos(theta), s = sin(theta);
      const T u[3] = {cam[0] / theta, cam[1] / theta, cam[2] / theta};
      const T dot = u[0] * x[0] + u[1] * x[1] + u[2] * x[2];
      const T cross[3] = {u[1] * x[2] - u[2] * x[1], u[2] * x[0] - u[0] * x[2], u[0] * x[1] - u[1] * x[0]};
      for (int k = 0; k < 3; ++k) y[k] = x[k] * c + cross[k] * s + u[k] * dot * (T(1) - c);
    } else {
      y[0] = x[0] + (cam[1] * x[2] - cam[2] * x[1]);
      y[1] = x[1] + (cam[2] * x[0] - cam[0] * x[2]);
      y[2] = x[2] + (cam[0] * x[1] - cam[1] * x[0]);
    }
    const T p0 = y[0] / y[2], p1 = y[1] / y[2];
    const T rsq = p0 * p0 + p1 * p1;
    const T distortion = T(1) + cam[9] * rsq + cam[10] * rsq * rsq;
    r[0] = w[0] * (cam[6] * p0 * distortion + cam[7] - feat[0]);
    r[1] = w[0] * (cam[6] * p1 * distortion + cam[8] - feat[1]);
    r[2] = T(1) - w[0] * w[0];
    return true;
  }
};
using JetCost = ceres::AutoDiffCostFunction<JetResidual, 3, 11, 3, 1>;

// ---- adjit's derivatives, batched over all observations --------------------------------------

/// The residuals ([p, 3]: two reprojection residuals and the weight's) of
/// every observation, from the parameters and the observations' indices.
Tensor residuals(Tensor cams, Tensor pts, Tensor w, Tensor feats, Tensor camOf, Tensor ptOf) {
  Tensor err = baReprojection(take(cams, camOf, 0), take(pts, ptOf, 0), w, feats);
  return concatenate({err, reshape(baWeightError(w), {w.shape()[0], 1})}, 1);
}

/// The residuals and, in Ceres's per-block layout (row-major, residual by
/// parameter), the two reprojection rows of each observation's camera block
/// ([p, 2, 11]) and point block ([p, 2, 3]), and its weight column ([p, 3]).
/// The third row of the camera and point blocks is zero (the weight residual
/// reads the weight only): the CostFunctions write those zeros themselves.
// [snippet:blocks]
auto residualsAndBlocks(Tensor cams, Tensor pts, Tensor w, Tensor feats, Tensor camOf, Tensor ptOf) {
  const BaRows r = baReprojectionRows(take(cams, camOf, 0), take(pts, ptOf, 0), w, feats);
  auto [werr, pullback] = vjp(baWeightError, w);
  Tensor dw = pullback(ones_like(w))[0];
  Tensor res = concatenate({r.err, reshape(werr, {w.shape()[0], 1})}, 1);
  return std::make_tuple(res, stack({r.row[0][0], r.row[1][0]}, 1), stack({r.row[0][1], r.row[1][1]}, 1),
                         stack({r.row[0][2], r.row[1][2], dw}, 1));
}
// [/snippet:blocks]

/// One observation's residuals and blocks, for adjit::map (--map): its
/// camera and point taken at run-time indices from the whole arrays.
auto observationBlocks(Tensor cams, Tensor pts, Tensor w, Tensor feat, Tensor c, Tensor j) {
  return residualsAndBlocks(cams, pts, reshape(w, {1}), reshape(feat, {1, 2}), reshape(c, {1}), reshape(j, {1}));
}

/// The parameters Ceres optimises, in the memory its parameter blocks point
/// to, and the observations.
struct Problem {
  BaInput in;
  std::vector<double> cams, pts, w; // Ceres's parameter blocks: [n][11], [m][3], [p][1]
};

/// What one batched adjit call computed at the current point, read by every
/// observation's CostFunction. Ceres calls PrepareForEvaluation before it
/// evaluates residual blocks, with the parameter blocks (our vectors) holding
/// the point: the call reads them in place (Array::view) and writes its
/// results into these buffers (`into`), with no copy either way.
/// Batched rather than one adjit call per residual block (--per-block) or an
/// adjit::map over the observations (--map), because it measures faster: on
/// ba1 (31,843 blocks, one thread, 10 Jacobian evaluations) Ceres spent 0.52 s
/// evaluating Jacobians with this callback (adjit's calls 0.06 s of it),
/// 0.60 s by map (0.12 s), 1.45 s with a call per block (each call's dispatch
/// costs more than one block's arithmetic) and 0.88 s with Jets. The batched
/// call's loops are vectorised across observations; map runs a per-observation
/// kernel p times. See docs/guide/ceres.md.
class AdjitEvaluation final : public ceres::EvaluationCallback {
public:
  explicit AdjitEvaluation(Problem& pr)
      : pr_(pr), p_(pr.in.p), res_(std::size_t(3 * p_)), jc_(std::size_t(22 * p_)), jx_(std::size_t(6 * p_)), jw_(std::size_t(3 * p_)),
        feats_(Array::view(pr.in.feats.data(), {p_, 2})), camOf_(Array::view(pr.in.camOf.data(), {p_})),
        ptOf_(Array::view(pr.in.pointOf.data(), {p_})) {}

// [snippet:callback]
  void PrepareForEvaluation(bool jacobians, bool newPoint) override {
    if (!newPoint && (haveJacobians_ || !jacobians)) return; // computed at this point already
    const auto t0 = Clock::now();
    const Array cams = Array::view(pr_.cams.data(), {pr_.in.n, 11}), pts = Array::view(pr_.pts.data(), {pr_.in.m, 3}),
                w = Array::view(pr_.w.data(), {p_});
    if (jacobians && byMap) {
      mapJacobians(cams, pts, w);
      jacobianSeconds += secondsSince(t0);
    } else if (jacobians) {
      values_.into(std::make_tuple(Array::view(res_.data(), {p_, 3}), Array::view(jc_.data(), {p_, 2, 11}),
                                   Array::view(jx_.data(), {p_, 2, 3}), Array::view(jw_.data(), {p_, 3})),
                   cams, pts, w, feats_, camOf_, ptOf_);
      jacobianSeconds += secondsSince(t0);
    } else {
      residuals_.into(Array::view(res_.data(), {p_, 3}), cams, pts, w, feats_, camOf_, ptOf_);
      residualSeconds += secondsSince(t0);
    }
    haveJacobians_ = jacobians;
  }
// [/snippet:callback]

  /// --map: the Jacobians by adjit::map over the observations instead (one
  /// compiled per-observation kernel, called p times), copied into the buffers.
  bool byMap = false;
  void mapJacobians(const Array& cams, const Array& pts, const Array& w) {
    auto [res, jc, jx, jw] = mapped_(cams, pts, w, feats_, camOf_, ptOf_);
    std::memcpy(res_.data(), res.data<double>(), res_.size() * sizeof(double));
    std::memcpy(jc_.data(), jc.data<double>(), jc_.size() * sizeof(double));
    std::memcpy(jx_.data(), jx.data<double>(), jx_.size() * sizeof(double));
    std::memcpy(jw_.data(), jw.data<double>(), jw_.size() * sizeof(double));
  }

  /// Observation i's residuals and Jacobian blocks (Ceres's layout; null
  /// blocks are not wanted), copied out of the batch.
  void copyOut(int64_t i, double* r, double** J) const {
    std::memcpy(r, &res_[std::size_t(3 * i)], 3 * sizeof(double));
    if (!J) return;
    if (J[0]) {
      std::memcpy(J[0], &jc_[std::size_t(22 * i)], 22 * sizeof(double));
      std::fill(J[0] + 22, J[0] + 33, 0.0);
    }
    if (J[1]) {
      std::memcpy(J[1], &jx_[std::size_t(6 * i)], 6 * sizeof(double));
      std::fill(J[1] + 6, J[1] + 9, 0.0);
    }
    if (J[2]) std::memcpy(J[2], &jw_[std::size_t(3 * i)], 3 * sizeof(double));
  }

  /// Seconds spent in adjit's batched calls, with and without Jacobians.
  double jacobianSeconds = 0, residualSeconds = 0;

private:
  Problem& pr_;
  int64_t p_;
  std::vector<double> res_, jc_, jx_, jw_;
  Array feats_, camOf_, ptOf_;
  bool haveJacobians_ = false;
  // One thread, as Ceres is run here: the times compare derivative code, not cores.
  decltype(jit(residuals)) residuals_ = jit(residuals, {.name = "ba_residuals", .threads = 1});
  decltype(jit(residualsAndBlocks)) values_ = jit(residualsAndBlocks, {.name = "ba_jacobian_blocks", .threads = 1});
  decltype(map(observationBlocks)) mapped_ =
      map(observationBlocks, {.threads = 1, .in_axes = {std::nullopt, std::nullopt, 0, 0, 0, 0}, .name = "ba_observation_blocks"});
};

/// Observation i's residual block for Ceres: its values come from the batch
/// computed by AdjitEvaluation at the current point.
// [snippet:cost]
class AdjitCost final : public ceres::SizedCostFunction<3, 11, 3, 1> {
public:
  AdjitCost(const AdjitEvaluation& batch, int64_t i, const double* cam, const double* X, const double* w)
      : batch_(batch), i_(i), cam_(cam), X_(X), w_(w) {}
  bool Evaluate(double const* const* params, double* r, double** J) const override {
    // The batch read the parameter blocks' memory (ours), into which Ceres
    // copies each point it evaluates before PrepareForEvaluation; it passes
    // its own copy here. They must agree, else these values are not its.
    if (std::memcmp(params[0], cam_, 11 * sizeof(double)) || std::memcmp(params[1], X_, 3 * sizeof(double)) || *params[2] != *w_)
      return false;
    batch_.copyOut(i_, r, J);
    return true;
  }

private:
  const AdjitEvaluation& batch_;
  int64_t i_;
  const double *cam_, *X_, *w_;
};
// [/snippet:cost]

/// Per block instead of batched (--per-block): each CostFunction calls adjit
/// on its own observation (one compiled call per residual block). Kept to
/// measure the choice made above; see the output of --per-block.
class AdjitBlockCost final : public ceres::SizedCostFunction<3, 11, 3, 1> {
public:
  AdjitBlockCost(const double* feat) : feat_{feat[0], feat[1]} {}
  bool Evaluate(double const* const* params, double* r, double** J) const override {
    static const int32_t zero = 0;
    const Array cam = Array::view(params[0], {1, 11}), X = Array::view(params[1], {1, 3}), w = Array::view(params[2], {1}),
                feat = Array::view(feat_, {1, 2}), idx = Array::view(&zero, {1});
    if (!J) {
      residuals_.into(Array::view(r, {1, 3}), cam, X, w, feat, idx, idx);
      return true;
    }
    double jc[22], jx[6];
    values_.into(std::make_tuple(Array::view(r, {1, 3}), Array::view(jc, {1, 2, 11}), Array::view(jx, {1, 2, 3}),
                                 Array::view(J[2] ? J[2] : scratch_, {1, 3})),
                 cam, X, w, feat, idx, idx);
    if (J[0]) std::copy(jc, jc + 22, J[0]), std::fill(J[0] + 22, J[0] + 33, 0.0);
    if (J[1]) std::copy(jx, jx + 6, J[1]), std::fill(J[1] + 6, J[1] + 9, 0.0);
    return true;
  }

private:
  double feat_[2];
  mutable double scratch_[3];
  static inline auto residuals_ = jit(residuals, {.name = "ba_residuals_1", .threads = 1});
  static inline auto values_ = jit(residualsAndBlocks, {.name = "ba_jacobian_blocks_1", .threads = 1});
};

/// A fixed pseudo-random offset in [-1, 1) pixels for number k, the same on
/// every machine (an integer hash, splitmix64).
double offset(uint64_t k) {
  uint64_t z = k + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return double(z >> 11) * 0x1p-52 - 1.0;
}

/// ADBench's file holds one camera, point and feature, replicated: solved as
/// given, every observation can be matched exactly (cost 0, which says
/// nothing about agreement), and with every camera at one place no point's
/// depth can be triangulated. So the example keeps ADBench's model, sizes,
/// observation structure, intrinsics and weights, and spreads the scene
/// around ADBench's camera and point: a true scene (camera centres within
/// +-5 units, rotations within +-0.05 rad, points within +-3 units), features
/// projected from it (by adjit's residuals at w = 1, feat = 0) plus noise in
/// [-1, 1) pixels, and a start perturbed from it (centres and points by up to
/// 0.5 units, rotations by 0.005). Every offset is a fixed integer hash: the
/// same problem on every machine.
void makeScene(BaInput& in) {
  uint64_t key = 0;
  for (int64_t c = 0; c < in.n; ++c)
    for (int k = 0; k < 6; ++k) in.cams[std::size_t(11 * c + k)] += (k < 3 ? 0.05 : 5.0) * offset(key++);
  for (double& x : in.points) x += 3.0 * offset(key++);
  const int64_t p = in.p;
  std::vector<double> ones(std::size_t(p), 1.0), zeros(std::size_t(2 * p), 0.0), proj(std::size_t(3 * p));
  jit(residuals)
      .into(Array::view(proj.data(), {p, 3}), Array::view(in.cams.data(), {in.n, 11}), Array::view(in.points.data(), {in.m, 3}),
            Array::view(ones.data(), {p}), Array::view(zeros.data(), {p, 2}), Array::view(in.camOf.data(), {p}),
            Array::view(in.pointOf.data(), {p}));
  for (int64_t i = 0; i < p; ++i)
    for (int k = 0; k < 2; ++k) in.feats[std::size_t(2 * i + k)] = proj[std::size_t(3 * i + k)] + offset(key++);
  for (int64_t c = 0; c < in.n; ++c)
    for (int k = 0; k < 6; ++k) in.cams[std::size_t(11 * c + k)] += (k < 3 ? 0.0005 : 0.05) * offset(key++);
  for (double& x : in.points) x += 0.05 * offset(key++);
}

enum class Derivatives { adjitBatched, adjitMap, adjitPerBlock, jets };

struct Result {
  ceres::Solver::Summary summary;
  double adjitJacobianSeconds = 0, adjitResidualSeconds = 0, adjitFirstSeconds = 0;
};

/// Solves the problem from its initial point with Ceres, derivatives by `d`.
/// What the command line asks of a solve.
struct Options {
  bool free = false, progress = false, report = false;
};

Result solve(const BaInput& in, Derivatives d, const Options& opt) {
  Problem pr{in, in.cams, in.points, in.w};
  std::unique_ptr<AdjitEvaluation> batch;
  ceres::Problem::Options po;
  if (d == Derivatives::adjitBatched || d == Derivatives::adjitMap) {
    batch = std::make_unique<AdjitEvaluation>(pr);
    batch->byMap = d == Derivatives::adjitMap;
    po.evaluation_callback = batch.get();
  }
  ceres::Problem problem(po);
  for (int64_t i = 0; i < in.p; ++i) {
    double* cam = &pr.cams[std::size_t(11 * in.camOf[std::size_t(i)])];
    double* X = &pr.pts[std::size_t(3 * in.pointOf[std::size_t(i)])];
    double* w = &pr.w[std::size_t(i)];
    const double* feat = &in.feats[std::size_t(2 * i)];
    ceres::CostFunction* cost = nullptr;
    if (batch) cost = new AdjitCost(*batch, i, cam, X, w);
    else if (d == Derivatives::adjitPerBlock) cost = new AdjitBlockCost(feat);
    else cost = new JetCost(new JetResidual{{feat[0], feat[1]}});
    problem.AddResidualBlock(cost, nullptr, cam, X, w);
  }
  // Calibrated cameras and given weights (see main): only the camera poses
  // and the points move, unless --free. Derivatives are still computed for
  // all 15 columns; Ceres projects them.
  if (!opt.free) {
    for (int64_t c = 0; c < in.n; ++c) problem.SetManifold(&pr.cams[std::size_t(11 * c)], new ceres::SubsetManifold(11, {6, 7, 8, 9, 10}));
    for (int64_t i = 0; i < in.p; ++i) problem.SetParameterBlockConstant(&pr.w[std::size_t(i)]);
  }
  ceres::Solver::Options o;
  // Points eliminated first (the Schur complement), as BA is solved; Ceres's
  // automatic ordering would eliminate the weights (one per observation)
  // and leave every point in the reduced system, ten times slower here.
  o.linear_solver_type = ceres::SPARSE_SCHUR;
  auto ordering = std::make_shared<ceres::ParameterBlockOrdering>();
  for (int64_t i = 0; i < in.p; ++i) {
    ordering->AddElementToGroup(&pr.pts[std::size_t(3 * in.pointOf[std::size_t(i)])], 0);
    ordering->AddElementToGroup(&pr.cams[std::size_t(11 * in.camOf[std::size_t(i)])], 1);
    ordering->AddElementToGroup(&pr.w[std::size_t(i)], 1);
  }
  o.linear_solver_ordering = ordering;
  o.num_threads = 1;
  o.max_num_iterations = 100;
  o.function_tolerance = 1e-10;
  o.gradient_tolerance = 1e-12;
  o.parameter_tolerance = 1e-10;
  o.logging_type = opt.progress ? ceres::PER_MINIMIZER_ITERATION : ceres::SILENT;
  o.minimizer_progress_to_stdout = opt.progress;
  Result r;
  if (batch) { // compile (or load from adjit's disk cache) before Ceres's clock runs
    const auto t0 = Clock::now();
    batch->PrepareForEvaluation(false, true);
    batch->PrepareForEvaluation(true, true);
    r.adjitFirstSeconds = secondsSince(t0);
    batch->jacobianSeconds = batch->residualSeconds = 0;
  }
  ceres::Solve(o, &problem, &r.summary);
  if (opt.report) std::printf("%s\n", r.summary.FullReport().c_str());
  if (batch) r.adjitJacobianSeconds = batch->jacobianSeconds, r.adjitResidualSeconds = batch->residualSeconds;
  return r;
}

// ---- --bench: the BA Jacobian, three ways ----------------------------------------------------

/// ADBench Manual's derivative time on this machine kind, by file name, when
/// its reference data lists it (Manual's C++ is not in bench/, so it is not rerun).
std::map<std::string, double> manualSeconds(const std::string& adbench) {
  std::map<std::string, double> m;
  std::ifstream in(adbench + "/adbench-reference/manual_timings_this_machine.csv");
  std::string line;
  while (std::getline(in, line)) {
    std::stringstream s(line);
    std::string objective, input, f, j;
    std::getline(s, objective, ','), std::getline(s, input, ','), std::getline(s, f, ','), std::getline(s, j, ',');
    if (objective == "ba") m[input.substr(input.find('/') + 1)] = std::atof(j.c_str());
  }
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bench(const std::vector<std::string>& files, const std::string& adbench) {
  const std::map<std::string, double> manual = manualSeconds(adbench);
  std::printf("BA Jacobian (ADBench's 3p x (11n + 3m + p) matrix, f64, one thread), ms per Jacobian, medians of interleaved runs:\n"
              "  sparse = adjit::sparse_jacobian (colors, mode); rows = bench/adbench.cpp's one forward + two backward passes;\n"
              "  batch, map, block = the example's paths to Ceres (one jit call over all observations; adjit::map of one\n"
              "    observation; one call per block), each CostFunction::Evaluate then called on every residual block;\n"
              "  jets = Ceres AutoDiffCostFunction::Evaluate on every residual block; Manual = ADBench's, measured before (not rerun)\n");
  std::printf("%-27s %5s %7s %8s %7s %7s %7s %8s %8s %7s %11s %9s %10s %11s\n", "input", "nnz/p", "colors", "sparse", "rows", "batch",
              "map", "block", "jets", "Manual", "sparse/jets", "rows/jets", "batch/jets", "sparse/rows");
  for (const std::string& file : files) {
    const BaInput in = readBa(file);
    const std::string name = file.substr(file.find_last_of('/') + 1, file.size() - file.find_last_of('/') - 5);
    if (in.p == 0) {
      std::printf("%-27s not found\n", name.c_str());
      continue;
    }
    const int64_t n = in.n, m = in.m, p = in.p;
    const Array cams(in.cams, {n, 11}), pts(in.points, {m, 3}), w(in.w, {p}), feats(in.feats, {p, 2}), camOf(in.camOf, {p}),
        ptOf(in.pointOf, {p});
    // The global Jacobian: rows as ADBench's (2p reprojection rows, then p
    // weight rows), columns the cameras', points' and weights' elements. The
    // gathers' indices are constants, so the pattern is exact: 29 p nonzeros.
    auto sj = sparse_jacobian([&](Tensor c, Tensor x, Tensor wi) {
      return std::make_tuple(baReprojection(take(c, constant(camOf), 0), take(x, constant(ptOf), 0), wi, constant(feats)),
                             baWeightError(wi));
    });
    auto rows = jit(
        [&](Tensor c, Tensor x, Tensor wi) {
          const BaRows r = baReprojectionRows(take(c, constant(camOf), 0), take(x, constant(ptOf), 0), wi, constant(feats));
          return std::make_tuple(r.err, baWeightError(wi), r.row[0][0], r.row[0][1], r.row[0][2], r.row[1][0], r.row[1][1],
                                 r.row[1][2]);
        },
        {.threads = 1});
    // The rows' results go to buffers of ours, as the example's do (`into`):
    // the time is the derivative's, not the allocation of 33 p numbers.
    std::vector<double> rowBuf(std::size_t(33 * p));
    auto rowViews = [&] {
      double* b = rowBuf.data();
      auto next = [&](Shape s) {
        int64_t size = 1;
        for (int64_t d : s) size *= d;
        Array v = Array::view(b, s);
        b += size;
        return v;
      };
      Array e = next({p, 2}), we = next({p});
      Array c0 = next({p, 11}), x0 = next({p, 3}), w0 = next({p}), c1 = next({p, 11}), x1 = next({p, 3}), w1 = next({p});
      // Moved: a copy of a view would own a copy of the data, and `into` would write there.
      return std::make_tuple(std::move(e), std::move(we), std::move(c0), std::move(x0), std::move(w0), std::move(c1), std::move(x1),
                             std::move(w1));
    }();
    Problem pr{in, in.cams, in.points, in.w};
    AdjitEvaluation batch(pr), byMap(pr);
    byMap.byMap = true;
    std::vector<std::unique_ptr<ceres::CostFunction>> batchCosts, mapCosts, blockCosts, jetCosts;
    std::vector<const double*> params(std::size_t(3 * p));
    for (int64_t i = 0; i < p; ++i) {
      double* cam = &pr.cams[std::size_t(11 * in.camOf[std::size_t(i)])];
      double* X = &pr.pts[std::size_t(3 * in.pointOf[std::size_t(i)])];
      double* wi = &pr.w[std::size_t(i)];
      const double* feat = &in.feats[std::size_t(2 * i)];
      params[std::size_t(3 * i)] = cam, params[std::size_t(3 * i + 1)] = X, params[std::size_t(3 * i + 2)] = wi;
      batchCosts.emplace_back(new AdjitCost(batch, i, cam, X, wi));
      mapCosts.emplace_back(new AdjitCost(byMap, i, cam, X, wi));
      blockCosts.emplace_back(new AdjitBlockCost(feat));
      jetCosts.emplace_back(new JetCost(new JetResidual{{feat[0], feat[1]}}));
    }
    std::vector<double> res(std::size_t(3 * p)), jac(std::size_t(45 * p));
    // Ceres's evaluation of every residual block, its Jacobian blocks stored as
    // Ceres's block-sparse Jacobian stores them (45 numbers per observation).
    auto sweep = [&](const std::vector<std::unique_ptr<ceres::CostFunction>>& costs) {
      for (int64_t i = 0; i < p; ++i) {
        double* J[3] = {&jac[std::size_t(45 * i)], &jac[std::size_t(45 * i + 33)], &jac[std::size_t(45 * i + 42)]};
        if (!costs[std::size_t(i)]->Evaluate(&params[std::size_t(3 * i)], &res[std::size_t(3 * i)], J))
          throw std::runtime_error("a residual block failed to evaluate");
      }
    };
    SparseMatrix S;
    struct Method {
      const char* name;
      std::function<void()> run;
      double first = 0;
      std::vector<double> times;
    };
    std::vector<Method> methods = {
        {"sparse", [&] { S = sj(cams, pts, w); }},
        {"rows", [&] { rows.into(rowViews, cams, pts, w); }},
        {"batch", [&] { batch.PrepareForEvaluation(true, true), sweep(batchCosts); }},
        {"map", [&] { byMap.PrepareForEvaluation(true, true), sweep(mapCosts); }},
        {"block", [&] { sweep(blockCosts); }},
        {"jets", [&] { sweep(jetCosts); }},
    };
    // First calls (planning, compiling or loading from the disk cache), and
    // agreement: every path's blocks, and each nonzero of sparse_jacobian's
    // rows 2i and 2i + 1 (14 each: the principal point's x0 and y0 reach one
    // row each), against the Jets' at the first, a middle and the last observation.
    std::vector<std::vector<double>> blocks;
    for (Method& me : methods) {
      const auto t0 = Clock::now();
      me.run();
      me.first = secondsSince(t0);
      blocks.push_back(jac);
    }
    double worst = 0;
    auto differ = [&](double got, double want) { worst = std::max(worst, std::fabs(got - want) / std::max(1.0, std::fabs(want))); };
    for (int64_t i : {int64_t(0), p / 2, p - 1}) {
      for (int64_t row = 0; row < 2; ++row) {
        const int64_t r = 2 * i + row;
        for (int64_t k = S.row_ptr[std::size_t(r)]; k < S.row_ptr[std::size_t(r + 1)]; ++k) {
          const int64_t col = S.col_idx[std::size_t(k)];
          const int64_t at = col < 11 * n           ? 11 * row + col - 11 * in.camOf[std::size_t(i)]
                             : col < 11 * n + 3 * m ? 33 + 3 * row + col - 11 * n - 3 * in.pointOf[std::size_t(i)]
                                                    : 42 + row;
          differ(S.values.data<double>()[k], jac[std::size_t(45 * i + at)]);
        }
        differ(rowBuf[std::size_t(3 * p + 15 * p * row + 11 * i)], jac[std::size_t(45 * i + 11 * row)]); // rows: camera column 0

      }
      for (std::size_t b = 2; b + 1 < blocks.size(); ++b)
        for (int k = 0; k < 45; ++k) differ(blocks[b][std::size_t(45 * i + k)], jac[std::size_t(45 * i + k)]);
    }
    double total = 0;
    for (int rep = 0; rep < 3 || (rep < 15 && total < 10.0); ++rep)
      for (Method& me : methods) {
        const auto t = Clock::now();
        me.run();
        me.times.push_back(secondsSince(t));
        total += me.times.back();
      }
    std::map<std::string, double> ms;
    for (const Method& me : methods) ms[me.name] = median(me.times) * 1e3;
    const auto man = manual.find(name);
    char colors[32];
    std::snprintf(colors, sizeof colors, "%lld %s", static_cast<long long>(S.colors), S.mode == SparseMode::forward ? "fwd" : "rev");
    std::printf("%-27s %5.0f %7s %8.2f %7.2f %7.2f %7.2f %8.2f %8.2f %7.2f %10.2fx %8.2fx %9.2fx %10.2fx\n", name.c_str(),
                double(S.nnz()) / double(p), colors, ms["sparse"], ms["rows"], ms["batch"], ms["map"], ms["block"], ms["jets"],
                man == manual.end() ? NAN : man->second * 1e3, ms["sparse"] / ms["jets"], ms["rows"] / ms["jets"],
                ms["batch"] / ms["jets"], ms["sparse"] / ms["rows"]);
    std::printf("%-27s first calls (s):", "");
    for (const Method& me : methods) std::printf(" %s %.2f", me.name, me.first);
    std::printf("; adjit vs Jets: %.1e %s\n", worst, worst < 1e-10 ? "agree" : "DISAGREE");
    std::fflush(stdout);
  }
}

} // namespace

int main(int argc, char** argv) {
  const std::string adbench = ADJIT_ADBENCH_DIR;
  std::string file = adbench + "/adbench/data/ba/ba1_n49_m7776_p31843.txt";
  int64_t observations = 0;
  bool times = true, perBlock = false, byMap = false, benchmark = false;
  Options opt;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--observations") && i + 1 < argc) observations = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--no-times")) times = false;
    else if (!std::strcmp(argv[i], "--per-block")) perBlock = true;
    else if (!std::strcmp(argv[i], "--map")) byMap = true;
    else if (!std::strcmp(argv[i], "--bench")) benchmark = true;
    else if (!std::strcmp(argv[i], "--free")) opt.free = true;
    else if (!std::strcmp(argv[i], "--progress")) opt.progress = true;
    else if (!std::strcmp(argv[i], "--report")) opt.report = true;
    else files.push_back(argv[i]);
  }
  if (benchmark) {
    if (files.empty())
      for (const char* f : {"ba1_n49_m7776_p31843", "ba2_n21_m11315_p36455", "ba3_n161_m48126_p182072", "ba4_n372_m47423_p204472",
                            "ba5_n257_m65132_p225911", "ba10_n1197_m126327_p563734"})
        files.push_back(adbench + "/adbench/data/ba/" + f + ".txt");
    bench(files, adbench);
    return 0;
  }
  if (!files.empty()) file = files.front();
  BaInput in = readBa(file, observations);
  if (in.p == 0) {
    std::printf("skipped: no ADBench BA file at %s (the data ships in ../shared/bench-data)\n", file.c_str());
    return 77;
  }
  makeScene(in);
  std::printf("ADBench's BA model, %lld cameras, %lld points, %lld observations, 3 residuals each: w (proj - feat), 1 - w^2\n"
              "optimised: %s\n",
              static_cast<long long>(in.n), static_cast<long long>(in.m), static_cast<long long>(in.p),
              opt.free ? "every camera parameter, point and weight" : "camera poses and points (intrinsics and weights held)");
  const Derivatives how = perBlock ? Derivatives::adjitPerBlock : byMap ? Derivatives::adjitMap : Derivatives::adjitBatched;
  const Result a = solve(in, how, opt);
  const Result j = solve(in, Derivatives::jets, opt);
  auto report = [&](const char* name, const Result& r) {
    std::printf("%-28s initial cost %.6e, final cost %.6e, %s\n", name, r.summary.initial_cost, r.summary.final_cost,
                r.summary.termination_type == ceres::CONVERGENCE ? "converged" : "did not converge");
    if (times) {
      std::printf("    %d iterations; Ceres's time evaluating Jacobians %.3f s (%d evaluations), residuals %.3f s; total %.3f s\n",
                  int(r.summary.iterations.size()) - 1, r.summary.jacobian_evaluation_time_in_seconds, r.summary.num_jacobian_evaluations,
                  r.summary.residual_evaluation_time_in_seconds, r.summary.total_time_in_seconds);
      if (r.adjitJacobianSeconds > 0)
        std::printf("    of which adjit's batched calls: %.3f s with Jacobians, %.3f s residuals only; before the solve, first calls "
                    "(compile or load from the disk cache) %.3f s\n",
                    r.adjitJacobianSeconds, r.adjitResidualSeconds, r.adjitFirstSeconds);
    }
  };
  report(perBlock ? "adjit (per block):" : byMap ? "adjit (map):" : "adjit (batched):", a);
  report("Ceres AutoDiffCostFunction:", j);
  const double a1 = a.summary.final_cost, j1 = j.summary.final_cost;
  const double rel = std::fabs(a1 - j1) / std::max(a1, j1);
  const bool agree = rel <= 1e-6,
             converged = a.summary.termination_type == ceres::CONVERGENCE && j.summary.termination_type == ceres::CONVERGENCE;
  std::printf("final costs %s (relative difference %s 1e-6)%s\n", agree ? "agree" : "DISAGREE", agree ? "within" : "above",
              converged ? "" : "; a solver did not converge (with --free, see docs/guide/ceres.md)");
  return agree && converged ? 0 : 1;
}
