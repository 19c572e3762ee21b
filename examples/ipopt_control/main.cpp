// examples/ipopt_control — a cart-pole swing-up by trapezoidal direct
// collocation, solved with IPOPT through its C++ TNLP interface. The model is
// written once over adjit Tensors; the constraint Jacobian comes from
// sparse_jacobian of the collocation defects and the Lagrangian's Hessian
// from sparse_hessian, both with the patterns adjit finds in the traced IR
// (no pattern or derivative is written by hand).
//
// usage: ipopt_control_example [N] [--compare-dense]
//   N intervals (default 30). With N omitted, or with --compare-dense, the
//   problem is solved twice: with the sparse derivatives and with dense
//   jacfwd/hessian, and the derivative-callback times are shown side by side.
// Results go to stdout; times, which vary from run to run, go to stderr.
#include <adjit/adjit.h>
#include <adjit/sparse_derivatives.h>

#include <IpIpoptApplication.hpp>
#include <IpSolveStatistics.hpp>
#include <IpTNLP.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numbers>
#include <string>
#include <vector>

using namespace adjit;

namespace {

// Kelly's cart-pole ("An Introduction to Trajectory Optimization", SIAM
// Review 2017, section 6): cart mass m1, pole mass m2 at length l; the cart
// moves a distance d in time T and swings the pole up, with a bounded force u.
constexpr double m1 = 1.0, m2 = 0.3, len = 0.5, grav = 9.81;
constexpr double duration = 2.0, distance = 1.0, trackLimit = 2.0, forceLimit = 20.0;
// Each knot holds the state (q1 cart position, q2 pole angle, their rates) and u.
constexpr int64_t kPerKnot = 5;

// [snippet:model]
// The state's rate at every knot: z is [knots, 5] (q1, q2, dq1, dq2, u).
Tensor dynamics(const Tensor& z) {
  const int64_t k = z.shape()[0];
  auto column = [&](int64_t c) { return slice(z, {0, c}, {k, c + 1}); };
  const Tensor q2 = column(1), dq1 = column(2), dq2 = column(3), u = column(4);
  const Tensor s = sin(q2), c = cos(q2);
  const Tensor den = m1 + m2 * s * s;
  const Tensor ddq1 = (len * m2 * s * dq2 * dq2 + u + m2 * grav * c * s) / den;
  const Tensor ddq2 = -(len * m2 * c * s * dq2 * dq2 + u * c + (m1 + m2) * grav * s) / (len * den);
  return concatenate({dq1, dq2, ddq1, ddq2}, 1);
}

// Trapezoidal collocation defects x_{k+1} - x_k - h/2 (f_k + f_{k+1}), [4N].
Tensor defects(const Tensor& flat, double h) {
  const int64_t knots = flat.shape()[0] / kPerKnot;
  const Tensor z = reshape(flat, {knots, kPerKnot});
  const Tensor x = slice(z, {0, 0}, {knots, 4}), f = dynamics(z);
  auto next = [&](const Tensor& t) { return slice(t, {1, 0}, {knots, 4}); };
  auto prev = [&](const Tensor& t) { return slice(t, {0, 0}, {knots - 1, 4}); };
  return reshape(next(x) - prev(x) - (h / 2) * (next(f) + prev(f)), {(knots - 1) * 4});
}

// The control effort, the integral of u^2 by the trapezoidal rule.
Tensor effort(const Tensor& flat, double h) {
  const int64_t knots = flat.shape()[0] / kPerKnot;
  const Tensor u2 = square(slice(reshape(flat, {knots, kPerKnot}), {0, 4}, {knots, 5}));
  return (h / 2) * (sum(slice(u2, {0, 0}, {knots - 1, 1})) + sum(slice(u2, {1, 0}, {knots, 1})));
}
// [/snippet:model]

double seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

/// Time spent in one kind of callback.
struct Clock {
  double seconds = 0;
  int calls = 0;
};

/// The swing-up as IPOPT's TNLP. Derivatives: adjit's sparse ones, or
/// (dense = true) dense jacfwd/hessian read at the same sparse positions.
class SwingUp : public Ipopt::TNLP {
public:
  SwingUp(int64_t intervals, bool dense)
      : N_(intervals), n_((intervals + 1) * kPerKnot), m_(intervals * 4), h_(duration / static_cast<double>(intervals)),
        dense_(dense) {}

  Clock jacClock, hessClock, gradClock;
  double setupSeconds = 0, objective = 0, maxViolation = 0;
  int64_t jacColors = 0, hessColors = 0;
  SparseMode jacMode = SparseMode::forward;
  std::vector<double> solution;

  /// The Lagrangian's derivative functions, and its patterns from a first
  /// (compiling) evaluation at the starting point.
  void setup() {
    const auto start = std::chrono::steady_clock::now();
    std::vector<double> z0(static_cast<std::size_t>(n_)), lambda0(static_cast<std::size_t>(m_), 1.0);
    initialGuess(z0.data());
    const Array z = Array::view(z0.data(), Shape{n_});
    // [snippet:patterns]
    const SparseMatrix J = jacobian_(z);
    const SparseMatrix H = hessian_(z, Array(1.0), Array::view(lambda0.data(), Shape{m_}));
    // IPOPT takes the Jacobian as triplets (CSR order here, so the values
    // are copied as they come) and the Hessian's lower triangle: pick those
    // nonzeros once. The Hessian is z's alone (argnums {0}).
    for (int64_t r = 0; r < J.rows; ++r)
      for (int64_t k = J.row_ptr[r]; k < J.row_ptr[r + 1]; ++k) {
        jacRow_.push_back(static_cast<Ipopt::Index>(r));
        jacCol_.push_back(static_cast<Ipopt::Index>(J.col_idx[k]));
      }
    for (int64_t r = 0; r < n_; ++r)
      for (int64_t k = H.row_ptr[r]; k < H.row_ptr[r + 1] && H.col_idx[k] <= r; ++k) {
        hessRow_.push_back(static_cast<Ipopt::Index>(r));
        hessCol_.push_back(static_cast<Ipopt::Index>(H.col_idx[k]));
        hessPick_.push_back(k);
      }
    // [/snippet:patterns]
    jacColors = J.colors;
    jacMode = J.mode;
    hessColors = H.colors;
    if (dense_) { // compile the dense ones too, outside the solve's clocks
      (void)denseJacobian_(z);
      (void)denseHessian_(z, Array(1.0), Array::view(lambda0.data(), Shape{m_}));
    }
    (void)objective_(z);
    (void)gradient_(z);
    (void)constraints_(z);
    setupSeconds = seconds(start);
  }
  int64_t variables() const { return n_; }
  int64_t constraints() const { return m_; }
  std::size_t jacobianNonzeros() const { return jacRow_.size(); }
  std::size_t hessianNonzeros() const { return hessRow_.size(); }

  bool get_nlp_info(Ipopt::Index& n, Ipopt::Index& m, Ipopt::Index& nnzJac, Ipopt::Index& nnzHess,
                    IndexStyleEnum& style) override {
    n = static_cast<Ipopt::Index>(n_);
    m = static_cast<Ipopt::Index>(m_);
    nnzJac = static_cast<Ipopt::Index>(jacRow_.size());
    nnzHess = static_cast<Ipopt::Index>(hessRow_.size());
    style = C_STYLE;
    return true;
  }

  bool get_bounds_info(Ipopt::Index, Ipopt::Number* lo, Ipopt::Number* hi, Ipopt::Index m, Ipopt::Number* gLo,
                       Ipopt::Number* gHi) override {
    const double limits[kPerKnot] = {trackLimit, 1e19, 1e19, 1e19, forceLimit};
    const double last[4] = {distance, std::numbers::pi, 0, 0};
    for (int64_t k = 0; k <= N_; ++k)
      for (int64_t c = 0; c < kPerKnot; ++c) {
        const int64_t i = k * kPerKnot + c;
        lo[i] = -limits[c];
        hi[i] = limits[c];
        if (c < 4 && (k == 0 || k == N_)) lo[i] = hi[i] = k == 0 ? 0.0 : last[c]; // start at rest, end upright
      }
    std::fill(gLo, gLo + m, 0.0);
    std::fill(gHi, gHi + m, 0.0);
    return true;
  }

  bool get_starting_point(Ipopt::Index, bool, Ipopt::Number* x, bool, Ipopt::Number*, Ipopt::Number*, Ipopt::Index,
                          bool, Ipopt::Number*) override {
    initialGuess(x);
    return true;
  }

  bool eval_f(Ipopt::Index n, const Ipopt::Number* x, bool, Ipopt::Number& value) override {
    value = objective_(Array::view(x, Shape{n})).item<double>();
    return true;
  }

  bool eval_grad_f(Ipopt::Index n, const Ipopt::Number* x, bool, Ipopt::Number* out) override {
    const auto start = std::chrono::steady_clock::now();
    gradient_.into(Array::view(out, Shape{n}), Array::view(x, Shape{n}));
    tick(gradClock, start);
    return true;
  }

  bool eval_g(Ipopt::Index n, const Ipopt::Number* x, bool, Ipopt::Index m, Ipopt::Number* out) override {
    constraints_.into(Array::view(out, Shape{m}), Array::view(x, Shape{n}));
    return true;
  }

  bool eval_jac_g(Ipopt::Index n, const Ipopt::Number* x, bool, Ipopt::Index, Ipopt::Index nnz, Ipopt::Index* row,
                  Ipopt::Index* col, Ipopt::Number* values) override {
    if (!values) {
      std::copy(jacRow_.begin(), jacRow_.end(), row);
      std::copy(jacCol_.begin(), jacCol_.end(), col);
      return true;
    }
    const auto start = std::chrono::steady_clock::now();
    const Array z = Array::view(x, Shape{n});
    if (dense_) {
      const Array J = denseJacobian_(z);
      const double* d = J.data<double>();
      for (Ipopt::Index i = 0; i < nnz; ++i) values[i] = d[jacRow_[i] * n_ + jacCol_[i]];
    } else {
      const SparseMatrix J = jacobian_(z);
      std::memcpy(values, J.values.data<double>(), static_cast<std::size_t>(nnz) * sizeof(double));
    }
    tick(jacClock, start);
    return true;
  }

  bool eval_h(Ipopt::Index n, const Ipopt::Number* x, bool, Ipopt::Number objFactor, Ipopt::Index m,
              const Ipopt::Number* lambda, bool, Ipopt::Index nnz, Ipopt::Index* row, Ipopt::Index* col,
              Ipopt::Number* values) override {
    if (!values) {
      std::copy(hessRow_.begin(), hessRow_.end(), row);
      std::copy(hessCol_.begin(), hessCol_.end(), col);
      return true;
    }
    const auto start = std::chrono::steady_clock::now();
    // [snippet:eval-h]
    // obj_factor and lambda are run-time arguments: one compiled program
    // serves every call.
    const Array z = Array::view(x, Shape{n}), sigma(objFactor), l = Array::view(lambda, Shape{m});
    if (dense_) {
      const Array H = denseHessian_(z, sigma, l);
      const double* d = H.data<double>();
      for (Ipopt::Index i = 0; i < nnz; ++i) values[i] = d[hessRow_[i] * n_ + hessCol_[i]];
    } else {
      const SparseMatrix H = hessian_(z, sigma, l);
      const double* v = H.values.data<double>();
      for (Ipopt::Index i = 0; i < nnz; ++i) values[i] = v[hessPick_[i]];
    }
    // [/snippet:eval-h]
    tick(hessClock, start);
    return true;
  }

  void finalize_solution(Ipopt::SolverReturn, Ipopt::Index n, const Ipopt::Number* x, const Ipopt::Number*,
                         const Ipopt::Number*, Ipopt::Index m, const Ipopt::Number* g, const Ipopt::Number*,
                         Ipopt::Number value, const Ipopt::IpoptData*, Ipopt::IpoptCalculatedQuantities*) override {
    objective = value;
    solution.assign(x, x + n);
    maxViolation = 0;
    for (Ipopt::Index i = 0; i < m; ++i) maxViolation = std::max(maxViolation, std::fabs(g[i]));
  }

private:
  // Straight lines from rest to the upright end state, no force.
  void initialGuess(double* x) const {
    const double last[4] = {distance, std::numbers::pi, 0, 0};
    for (int64_t k = 0; k <= N_; ++k)
      for (int64_t c = 0; c < kPerKnot; ++c)
        x[k * kPerKnot + c] = c < 4 ? last[c] * static_cast<double>(k) / static_cast<double>(N_) : 0.0;
  }
  static void tick(Clock& c, std::chrono::steady_clock::time_point start) {
    c.seconds += seconds(start);
    ++c.calls;
  }

  int64_t N_, n_, m_;
  double h_;
  bool dense_;
  // The model as functions of the flat variables z.
  std::function<Tensor(const Tensor&)> f_ = [h = h_](const Tensor& z) { return effort(z, h); };
  std::function<Tensor(const Tensor&)> g_ = [h = h_](const Tensor& z) { return defects(z, h); };
  // [snippet:lagrangian]
  // The Lagrangian obj_factor * f(z) + lambda . g(z). Its multipliers are
  // arguments (so changing them does not retrace) but not variables: the
  // Hessian is taken with respect to z alone (argnums {0}).
  std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)> lagrangian_ =
      [f = f_, g = g_](const Tensor& z, const Tensor& sigma, const Tensor& lambda) {
        return sigma * f(z) + sum(lambda * g(z));
      };
  decltype(sparse_hessian(lagrangian_)) hessian_ = sparse_hessian(lagrangian_, {.argnums = {0}});
  // [/snippet:lagrangian]
  decltype(jit(f_)) objective_ = jit(f_);
  decltype(jit(adjit::grad(f_))) gradient_ = jit(adjit::grad(f_));
  decltype(jit(g_)) constraints_ = jit(g_);
  decltype(sparse_jacobian(g_)) jacobian_ = sparse_jacobian(g_);
  decltype(jacfwd(g_)) denseJacobian_ = jacfwd(g_);
  decltype(adjit::hessian(lagrangian_)) denseHessian_ = adjit::hessian(lagrangian_);
  std::vector<Ipopt::Index> jacRow_, jacCol_, hessRow_, hessCol_;
  std::vector<int64_t> hessPick_;
};

struct Solve {
  Ipopt::SmartPtr<SwingUp> problem;
  Ipopt::ApplicationReturnStatus status;
  int iterations = 0;
  double seconds = 0;
};

Solve solve(int64_t intervals, bool dense) {
  Solve s;
  s.problem = new SwingUp(intervals, dense);
  s.problem->setup();
  Ipopt::SmartPtr<Ipopt::IpoptApplication> app = IpoptApplicationFactory();
  app->Options()->SetIntegerValue("print_level", 0);
  app->Options()->SetStringValue("sb", "yes"); // no banner
  app->Options()->SetNumericValue("tol", 1e-9);
  if (app->Initialize() != Ipopt::Solve_Succeeded) {
    std::fprintf(stderr, "IPOPT failed to initialise\n");
    std::exit(1);
  }
  const auto start = std::chrono::steady_clock::now();
  s.status = app->OptimizeTNLP(s.problem);
  s.seconds = seconds(start);
  s.iterations = app->Statistics()->IterationCount();
  return s;
}

void printTimes(const char* label, const Solve& s) {
  const SwingUp& p = *s.problem;
  const double total = p.jacClock.seconds + p.hessClock.seconds + p.gradClock.seconds;
  const double perIter = total / std::max(1, s.iterations);
  std::fprintf(stderr,
               "%s: setup (patterns, colorings, compiling) %.3f s; solve %.3f s, of which derivative callbacks %.4f s "
               "(%.3f ms per iteration: Jacobian %d calls %.4f s, Hessian %d calls %.4f s, gradient %d calls %.4f s)\n",
               label, p.setupSeconds, s.seconds, total, 1e3 * perIter, p.jacClock.calls, p.jacClock.seconds, p.hessClock.calls,
               p.hessClock.seconds, p.gradClock.calls, p.gradClock.seconds);
}

} // namespace

int main(int argc, char** argv) {
  int64_t intervals = 30;
  bool compareDense = argc == 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--compare-dense") == 0) compareDense = true;
    else if ((intervals = std::atoll(argv[i])) < 2) {
      std::fprintf(stderr, "usage: %s [intervals >= 2] [--compare-dense]\n", argv[0]);
      return 2;
    }
  }
  const Solve sparse = solve(intervals, false);
  const SwingUp& p = *sparse.problem;
  std::printf("cart-pole swing-up, trapezoidal collocation: %lld intervals, %lld variables, %lld constraints\n",
              static_cast<long long>(intervals), static_cast<long long>(p.variables()),
              static_cast<long long>(p.constraints()));
  std::printf("constraint Jacobian: %zu nonzeros, %lld colors (%s mode)\n", p.jacobianNonzeros(),
              static_cast<long long>(p.jacColors), p.jacMode == SparseMode::forward ? "forward" : "reverse");
  std::printf("Lagrangian Hessian: %zu nonzeros in the lower triangle, %lld colors (star)\n", p.hessianNonzeros(),
              static_cast<long long>(p.hessColors));
  std::printf("IPOPT: %s after %d iterations, objective %.5g, constraint violation below 1e-8: %s\n",
              sparse.status == Ipopt::Solve_Succeeded ? "optimal" : "FAILED", sparse.iterations, p.objective,
              p.maxViolation < 1e-8 ? "yes" : "NO");
  std::fflush(stdout); // before the times on stderr
  printTimes("sparse", sparse);
  if (!compareDense) return sparse.status == Ipopt::Solve_Succeeded ? 0 : 1;

  // The same solve with dense jacfwd and hessian in the callbacks.
  const Solve dense = solve(intervals, true);
  const SwingUp& q = *dense.problem;
  double gap = 0;
  for (std::size_t i = 0; i < p.solution.size(); ++i) gap = std::max(gap, std::fabs(p.solution[i] - q.solution[i]));
  std::printf("dense jacfwd/hessian: objective %.5g, same iterations: %s, same solution (within 1e-7): %s\n",
              q.objective, dense.iterations == sparse.iterations ? "yes" : "NO", gap < 1e-7 ? "yes" : "NO");
  std::fflush(stdout);
  printTimes("dense ", dense);
  const double sparsePer = (p.jacClock.seconds + p.hessClock.seconds) / std::max(1, sparse.iterations);
  const double densePer = (q.jacClock.seconds + q.hessClock.seconds) / std::max(1, dense.iterations);
  std::fprintf(stderr, "Jacobian + Hessian callbacks per iteration: sparse %.3f ms, dense %.3f ms (%.1fx)\n",
               1e3 * sparsePer, 1e3 * densePer, densePer / sparsePer);
  return sparse.status == Ipopt::Solve_Succeeded && dense.status == Ipopt::Solve_Succeeded ? 0 : 1;
}
