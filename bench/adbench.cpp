// bench/adbench.cpp — ADBench's GMM, BA and LSTM objectives and derivatives
// (the models are bench/adbench_models.h, shared with bench/gradbench/)
// written with adjit, checked against the reference outputs of ADBench's
// hand-written (Manual) module with ADBench's criterion, and timed next to
// Manual's timings on this machine kind. Data: ../shared/bench-data/adbench
// (its README defines each objective). Exits 1 if a value misses the
// criterion; `--smallest` runs the smallest input of each problem (a CTest
// test, which skips with 77 where the data set is absent); `--input TEXT`
// the inputs whose name contains TEXT; `--data DIR` reads ADBench from DIR.
//   adjit_adbench [gmm|ba|lstm]... [--threads N] [--unrolled] [--smallest] [--input TEXT] [--data DIR]
//   (default: all problems and inputs, all cores; LSTM as a scan)
#include "adbench_models.h"
#include "compare.h"

#include <adjit/adjit.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace adjit;
using namespace adjit::adbench;
using Clock = std::chrono::steady_clock;

namespace {

/// ADBench's folder (--data), its inputs and Manual's outputs.
std::string adbenchDir = ADJIT_ADBENCH_DIR;
std::string dataDir, referenceDir;
int threads = 0;

/// Every number of a text file, in order.
std::vector<double> numbers(const std::string& path) {
  std::ifstream in(path);
  std::vector<double> v;
  for (double x; in >> x;) v.push_back(x);
  return v;
}

/// ADBench's criterion: |x - y| / max(1, |x| + |y|), the largest over all entries.
double mismatch(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - want[i]) / std::max(1.0, std::fabs(got[i]) + std::fabs(want[i])));
  return worst;
}

std::vector<double> values(const Array& a) { return a.to_vector<double>(); }
void append(std::vector<double>& to, const Array& a) {
  const std::vector<double> v = values(a);
  to.insert(to.end(), v.begin(), v.end());
}

/// The objective's and the derivative's times in seconds, the medians of
/// rounds in which both run in turn (bench/compare.h: a batch of three calls
/// each, the first untimed; 7 to 101 rounds, about a second in all), so the
/// machine's slow and fast phases hit both alike; `ratio`: the rounds'
/// derivative/objective ratios.
struct InTurn {
  double objective = 0, derivative = 0;
  bench::Spread ratio;
};
InTurn timeInTurn(const std::function<void()>& objective, const std::function<void()>& derivative) {
  objective();
  derivative();
  const auto t0 = Clock::now();
  objective();
  derivative();
  const double once = std::chrono::duration<double>(Clock::now() - t0).count();
  const int rounds = static_cast<int>(std::clamp(1.0 / (3 * std::max(once, 1e-9)), 7.0, 101.0));
  bench::Side o{bench::batchOf(objective)}, d{bench::batchOf(derivative)};
  bench::interleave({&o, &d}, rounds);
  return {bench::median(o) * 1e-3, bench::median(d) * 1e-3, bench::ratioOf(d, o)};
}

/// Manual's timings on this machine kind, by input ("gmm/1k/gmm_d10_K25").
std::map<std::string, std::pair<double, double>> manualTimings() {
  std::map<std::string, std::pair<double, double>> m;
  std::ifstream in(adbenchDir + "/adbench-reference/manual_timings_this_machine.csv");
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::stringstream s(line);
    std::string objective, input, f, j;
    std::getline(s, objective, ',');
    std::getline(s, input, ',');
    std::getline(s, f, ',');
    std::getline(s, j, ',');
    m[input] = {std::atof(f.c_str()), std::atof(j.c_str())};
  }
  return m;
}

/// --smallest: the first input of each problem only. Inputs checked, and whether one failed.
bool smallest = false;
/// --input: the inputs whose name contains this only.
std::string only;
bool skipped(const std::string& input) { return input.find(only) == std::string::npos; }
int checked = 0;
bool failed = false;

void row(const char* name, double err, double compileS, const InTurn& t, std::pair<double, double> manual) {
  ++checked;
  failed = failed || !(err <= 1e-8);
  std::printf("%-26s %s (%.1e)  compile %6.2f s   objective %9.3f ms (Manual %9.3f, %5.2fx)   derivative %9.3f ms "
              "(Manual %9.3f, %5.2fx)   d/o %5.2f [%.2f-%.2f]\n",
              name, err <= 1e-8 ? "ok " : "BAD", err, compileS, t.objective * 1e3, manual.first * 1e3,
              t.objective / manual.first, t.derivative * 1e3, manual.second * 1e3, t.derivative / manual.second,
              t.ratio.median, t.ratio.q1, t.ratio.q3);
  std::fflush(stdout);
}

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// ---- GMM ------------------------------------------------------------------------------------

struct GmmInput : GmmData {
  Array alpha, mu, q, l;
  Array tri; ///< gmmTriangleIndex(d)
};

GmmInput readGmm(const std::string& path) {
  const std::vector<double> v = numbers(path);
  GmmInput g;
  std::size_t at = 0;
  g.d = int(v[at++]);
  g.k = int(v[at++]);
  g.n = int(v[at++]);
  const int d = g.d, k = g.k, n = g.n, nl = d * (d - 1) / 2;
  auto take = [&](std::size_t count) {
    std::vector<double> r(v.begin() + std::ptrdiff_t(at), v.begin() + std::ptrdiff_t(at + count));
    at += count;
    return r;
  };
  g.alpha = Array(take(std::size_t(k)), {k});
  g.mu = Array(take(std::size_t(k * d)), {k, d});
  std::vector<double> q, l;
  for (int c = 0; c < k; ++c) {
    const std::vector<double> qc = take(std::size_t(d)), lc = take(std::size_t(nl));
    q.insert(q.end(), qc.begin(), qc.end());
    l.insert(l.end(), lc.begin(), lc.end());
  }
  g.q = Array(q, {k, d});
  g.l = Array(l, {k, nl});
  g.x = Array(take(std::size_t(n * d)), {n, d});
  g.gamma = v[at++];
  g.m = v[at++];
  g.tri = gmmTriangleIndex(d);
  return g;
}

/// ADBench's objective F = LL + P - K C (its sign of the prior), as its README defines it.
Tensor gmmObjective(const GmmInput& g, Tensor alpha, Tensor mu, Tensor q, Tensor l) {
  constexpr double kPi = 3.14159265359; // ADBench's
  return gmmLogLikelihood(g, g.tri, constant(g.x), alpha, mu, q, l, kPi) + gmmWishartTerm(g, q, l) - double(g.k) * gmmWishartConstant(g, kPi);
}

void gmm(const std::map<std::string, std::pair<double, double>>& manual) {
  std::printf("GMM (f64; objective; derivative = objective and full gradient, ADBench's layout)\n");
  std::vector<std::string> inputs;
  for (int d : {2, 10, 20, 32})
    for (int k : {5, 10, 25, 50, 100, 200}) inputs.push_back("1k/gmm_d" + std::to_string(d) + "_K" + std::to_string(k));
  inputs.push_back("10k/gmm_d2_K5");
  for (const std::string& in : inputs) {
    if (skipped(in)) continue;
    if (!std::ifstream(dataDir + "gmm/" + in + ".txt")) continue; // not every size is in the data set
    const GmmInput g = readGmm(dataDir + "gmm/" + in + ".txt");
    auto f = [&g](Tensor alpha, Tensor mu, Tensor q, Tensor l) { return gmmObjective(g, alpha, mu, q, l); };
    auto fj = jit(f, {.threads = threads});
    auto gj = jit(value_and_grad(f, argnums<0, 1, 2, 3>), {.threads = threads});
    auto t0 = Clock::now();
    const Array value = fj(g.alpha, g.mu, g.q, g.l);
    auto [v, grads] = gj(g.alpha, g.mu, g.q, g.l);
    const double compileS = secondsSince(t0);
    fj.wait_optimized(); // what is timed below is the optimised code (JitOptions::tiers)
    gj.wait_optimized();
    // ADBench's layout: alpha, mu, then per component q_k and l_k.
    std::vector<double> jac = values(std::get<0>(grads)), mu = values(std::get<1>(grads)), dq = values(std::get<2>(grads)),
                        dl = values(std::get<3>(grads));
    jac.insert(jac.end(), mu.begin(), mu.end());
    const int nl = g.d * (g.d - 1) / 2;
    for (int c = 0; c < g.k; ++c) {
      jac.insert(jac.end(), dq.begin() + c * g.d, dq.begin() + (c + 1) * g.d);
      jac.insert(jac.end(), dl.begin() + c * nl, dl.begin() + (c + 1) * nl);
    }
    const double err = std::max({mismatch(values(value), numbers(referenceDir + "gmm/" + in + "_F_Manual.txt")),
                                 mismatch(values(v), numbers(referenceDir + "gmm/" + in + "_F_Manual.txt")),
                                 mismatch(jac, numbers(referenceDir + "gmm/" + in + "_J_Manual.txt"))});
    const InTurn t = timeInTurn([&] { fj(g.alpha, g.mu, g.q, g.l); }, [&] { gj(g.alpha, g.mu, g.q, g.l); });
    auto it = manual.find("gmm/" + in);
    row(in.c_str(), err, compileS, t, it == manual.end() ? std::pair<double, double>{NAN, NAN} : it->second);
    if (smallest) break;
  }
}

// ---- BA -------------------------------------------------------------------------------------

/// A number or the numbers of a list after "key" in a JSON text (the reference files are simple).
std::vector<double> jsonNumbers(const std::string& text, const std::string& key) {
  std::size_t at = text.find("\"" + key + "\"");
  if (at == std::string::npos) return {};
  at = text.find(':', at) + 1;
  std::vector<double> v;
  const bool list = text.find_first_not_of(" \n", at) == text.find('[', at);
  const std::size_t end = list ? text.find(']', at) : text.find_first_of(",}", at);
  std::string body = text.substr(at, end - at);
  for (char& ch : body)
    if (ch == '[' || ch == ',') ch = ' ';
  std::stringstream s(body);
  for (double x; s >> x;) v.push_back(x);
  return v;
}

void ba(const std::map<std::string, std::pair<double, double>>& manual) {
  std::printf("BA (f64; objective = all 3p residuals; derivative = residuals and the Jacobian in compact form:\n"
              "    per observation its 2x15 block and its weight row: one forward and two backward passes over all observations)\n");
  const char* inputs[] = {"ba1_n49_m7776_p31843", "ba2_n21_m11315_p36455", "ba3_n161_m48126_p182072",
                          "ba4_n372_m47423_p204472", "ba5_n257_m65132_p225911"};
  for (const char* in : inputs) {
    if (skipped(in)) continue;
    const BaInput b = readBa(dataDir + "ba/" + in + ".txt");
    if (b.p == 0) continue;
    const int64_t n = b.n, m = b.m, p = b.p;
    const std::vector<double>& w = b.w;
    const Array camsA(b.cams, {n, 11}), ptsA(b.points, {m, 3}), wA(b.w, {p}), featsA(b.feats, {p, 2}), camOfA(b.camOf, {p}),
        ptOfA(b.pointOf, {p});
    // The objective: gathers, then every residual.
    auto objective = [&](Tensor cams, Tensor pts, Tensor w) {
      Tensor err = baReprojection(take(cams, constant(camOfA), 0), take(pts, constant(ptOfA), 0), w, constant(featsA));
      return std::make_tuple(err, baWeightError(w));
    };
    // Rows of the Jacobian blocks (baReprojectionRows): one forward, two
    // backward passes, in one compiled function.
    auto derivative = jit(
        [&](Tensor cams, Tensor pts, Tensor w) {
          const BaRows r = baReprojectionRows(take(cams, constant(camOfA), 0), take(pts, constant(ptOfA), 0), w, constant(featsA));
          return std::make_tuple(r.err, baWeightError(w), r.row[0][0], r.row[0][1], r.row[0][2], r.row[1][0], r.row[1][1], r.row[1][2]);
        },
        {.threads = threads});
    auto fj = jit(objective, {.threads = threads});
    auto jacobian = [&] {
      auto d = derivative(camsA, ptsA, wA);
      using G = std::tuple<Array, Array, Array>;
      // Moved, not copied: Arrays copy deeply, and copying the 50 MB Jacobian
      // would be timed as part of adjit's derivative.
      return std::make_tuple(std::make_tuple(std::move(std::get<0>(d)), std::move(std::get<1>(d))),
                             std::make_pair(Array(), G{std::move(std::get<2>(d)), std::move(std::get<3>(d)), std::move(std::get<4>(d))}),
                             std::make_pair(Array(), G{std::move(std::get<5>(d)), std::move(std::get<6>(d)), std::move(std::get<7>(d))}));
    };
    auto t0 = Clock::now();
    auto [residuals, j0, j1] = jacobian();
    const double compileS = secondsSince(t0);
    derivative.wait_optimized(); // what is timed below is the optimised code (JitOptions::tiers)
    // Against the reference: the first observation's residuals, its block, the
    // weight row; and every block equal to the first, as ADBench's data makes them.
    std::ifstream ref(referenceDir + "ba/" + in + "_Manual_compact.json");
    const std::string json((std::istreambuf_iterator<char>(ref)), std::istreambuf_iterator<char>());
    const std::vector<double> err = values(std::get<0>(residuals)), werr = values(std::get<1>(residuals));
    double worst = mismatch({err[0], err[1], werr[0]}, [&] {
      std::vector<double> r = jsonNumbers(json, "reproj_err_first_obs");
      r.push_back(jsonNumbers(json, "w_err_first_obs").at(0));
      return r;
    }());
    auto blockRow = [&](const auto& grads, int64_t i) {
      const auto& [value, g] = grads;
      (void)value;
      std::vector<double> r;
      const std::vector<double> gc = values(std::get<0>(g)), gx = values(std::get<1>(g)), gw = values(std::get<2>(g));
      r.insert(r.end(), gc.begin() + i * 11, gc.begin() + (i + 1) * 11);
      r.insert(r.end(), gx.begin() + i * 3, gx.begin() + (i + 1) * 3);
      r.push_back(gw[std::size_t(i)]);
      return r;
    };
    const std::vector<double> want0 = jsonNumbers(json, "J_first_block_vals_row0"), want1 = jsonNumbers(json, "J_first_block_vals_row1");
    for (int64_t i : {int64_t(0), p / 2, p - 1}) { // first, middle, last observation
      worst = std::max({worst, mismatch(blockRow(j0, i), want0), mismatch(blockRow(j1, i), want1)});
    }
    worst = std::max(worst, mismatch({-2 * w[0]}, jsonNumbers(json, "J_w_row_val")));
    const InTurn t = timeInTurn([&] { fj(camsA, ptsA, wA); }, [&] { jacobian(); });
    auto it = manual.find(std::string("ba/") + in);
    row(in, worst, compileS, t, it == manual.end() ? std::pair<double, double>{NAN, NAN} : it->second);
    if (smallest) break;
  }
}

// ---- LSTM -----------------------------------------------------------------------------------

/// Whether the LSTM is unrolled at trace time (--unrolled) instead of a `scan` over the sequence.
bool unrolled = false;

void lstm(const std::map<std::string, std::pair<double, double>>& manual) {
  std::printf("LSTM (f64; %s; derivative = loss and gradient for main and extra parameters)\n",
              unrolled ? "unrolled over the sequence" : "a scan over the sequence");
  for (const char* in : {"lstm_l2_c1024", "lstm_l4_c1024"}) {
    if (skipped(in)) continue;
    const std::vector<double> v = numbers(dataDir + "lstm/" + in + ".txt");
    if (v.size() < 3) continue;
    const int layers = int(v[0]);
    const int64_t chars = int64_t(v[1]), b = int64_t(v[2]);
    std::size_t at = 3;
    auto take = [&](int64_t count) {
      std::vector<double> r(v.begin() + std::ptrdiff_t(at), v.begin() + std::ptrdiff_t(at + std::size_t(count)));
      at += std::size_t(count);
      return r;
    };
    const Array mainP(take(2 * layers * 4 * b), {2 * layers, 4 * b}), extraP(take(3 * b), {3, b});
    const Array state(take(2 * layers * b), {2 * layers, b}), seq(take(chars * b), {chars, b});
    auto f = [&](Tensor mp, Tensor ep) { return lstmLoss(mp, ep, constant(state), constant(seq), layers, chars, b, unrolled); };
    auto fj = jit(f, {.threads = threads});
    auto gj = jit(value_and_grad(f, argnums<0, 1>), {.threads = threads});
    auto t0 = Clock::now();
    const Array loss = fj(mainP, extraP);
    auto [value, grads] = gj(mainP, extraP);
    const double compileS = secondsSince(t0);
    fj.wait_optimized(); // what is timed below is the optimised code (JitOptions::tiers)
    gj.wait_optimized();
    std::vector<double> jac = values(std::get<0>(grads));
    append(jac, std::get<1>(grads));
    const std::string ref = referenceDir + "lstm/" + in;
    const double err = std::max({mismatch(values(loss), numbers(ref + "_F_Manual.txt")),
                                 mismatch(values(value), numbers(ref + "_F_Manual.txt")), mismatch(jac, numbers(ref + "_J_Manual.txt"))});
    const InTurn t = timeInTurn([&] { fj(mainP, extraP); }, [&] { gj(mainP, extraP); });
    auto it = manual.find(std::string("lstm/") + in);
    row(in, err, compileS, t, it == manual.end() ? std::pair<double, double>{NAN, NAN} : it->second);
    if (smallest) break;
  }
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> which;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--unrolled")) unrolled = true;
    else if (!std::strcmp(argv[i], "--smallest")) smallest = true;
    else if (!std::strcmp(argv[i], "--input") && i + 1 < argc) only = argv[++i];
    else if (!std::strcmp(argv[i], "--data") && i + 1 < argc) adbenchDir = argv[++i];
    else which.push_back(argv[i]);
  }
  dataDir = adbenchDir + "/adbench/data/";
  referenceDir = adbenchDir + "/adbench-reference/data/";
  auto want = [&](const char* w) { return which.empty() || std::find(which.begin(), which.end(), w) != which.end(); };
  // The data set is not in the repository: a clone without it skips the CTest test, and says why.
  if (smallest && !std::filesystem::is_directory(dataDir)) {
    std::printf("skipped: ADBench data not found at %s; it ships in ../shared/bench-data\n",
                std::filesystem::path(dataDir).lexically_normal().c_str());
    return 77;
  }
  const auto manual = manualTimings();
  std::printf("ADBench with adjit: 'ok' when every value is within ADBench's 1e-8 of the Manual reference;\n"
              "times are medians of rounds in which objective and derivative take turns; ratios = adjit / Manual (one core,\n"
              "g++ -O3, recorded); compile = first calls; d/o = adjit's derivative / its objective, median [quartiles] of the rounds\n");
  if (want("gmm")) gmm(manual);
  if (want("ba")) ba(manual);
  if (want("lstm")) lstm(manual);
  if (checked == 0) {
    if (only.empty()) std::printf("no ADBench input found under %s\n", dataDir.c_str());
    else std::printf("no ADBench input under %s has a name containing '%s'\n", dataDir.c_str(), only.c_str());
    return smallest ? 77 : 1;
  }
  return failed ? 1 : 0;
}
