// autodiff/CheckCustomVjp.cpp — ADJIT_CHECK_CUSTOM_VJP=1: every custom-gradient
// VJP that runs is compared with the autodiff of its forward function, or,
// where the forward has no derivative, with a central finite difference.
#include "autodiff/CustomGradient.h"
#include "autodiff/Reverse.h"
#include "support/Log.h"
#include "trace/Tracer.h"

#include <adjit/check.h>
#include <adjit/debug.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

namespace adjit::autodiff {
namespace {

/// Relative tolerance of the comparison: the forward and its VJP may be
/// computed in different orders, so f32 gets float rounding's worth.
double tolerance(DType t) { return t == DType::f64 ? 1e-6 : 2e-3; }

std::string where(const Location& loc) { return loc.known() ? " (" + loc.str() + ")" : ""; }

/// Compares each custom gradient with autodiff's, elementwise, at run time.
void compareElementwise(const std::vector<Array>& values, const std::vector<std::string>& names, const Location& loc) {
  const std::size_t n = names.size();
  for (std::size_t k = 0; k < n; ++k) {
    const Array &custom = values[k], &autodiff = values[n + k];
    const double rtol = tolerance(custom.dtype());
    double scale = 0;
    for (int64_t j = 0; j < autodiff.size(); ++j)
      if (std::isfinite(autodiff.at(j))) scale = std::max(scale, std::fabs(autodiff.at(j)));
    int64_t notFinite = 0, worstAt = -1;
    double worst = 0;
    for (int64_t j = 0; j < custom.size(); ++j) {
      const double c = custom.at(j), a = autodiff.at(j);
      if (!std::isfinite(a)) {
        ++notFinite;
        continue;
      }
      const double error = std::fabs(c - a), bound = rtol * (std::max(std::fabs(a), std::fabs(c)) + scale);
      const double relative = error / std::max({std::fabs(a), std::fabs(c), 1e-300});
      if ((!(error <= bound) || !std::isfinite(c)) && (worstAt < 0 || relative > worst)) {
        worst = relative;
        worstAt = j;
      }
    }
    if (worstAt >= 0)
      throw Error(fmt::format("custom_gradient{}: its VJP disagrees with the autodiff of its forward for {}: element {} "
                              "is {:.9g}, autodiff gives {:.9g} (relative error {:.3g})",
                              where(loc), names[k], worstAt, custom.at(worstAt), autodiff.at(worstAt), worst),
                  loc);
    if (notFinite)
      logLine("check", fmt::format("custom_gradient{}: autodiff not finite here: {} of {} elements of {}; the VJP was "
                                   "checked on the others",
                                   where(loc), notFinite, custom.size(), names[k]));
  }
}

} // namespace

bool checkingCustomVjps() {
  const char* v = std::getenv("ADJIT_CHECK_CUSTOM_VJP");
  return v && *v && std::string(v) != "0";
}

namespace {

/// What the check sees of one call site.
struct Site {
  detail::TraceState& s;
  const ir::Function& fwd;
  const std::string& fwdName;
  const std::vector<Tensor>& operands;
  std::size_t outputs;
  const std::vector<std::optional<Tensor>>& dys;
  const std::vector<std::optional<Tensor>>& dxs;
  const Location& loc;
  /// The cotangent of the forward's output i (zeros where none reached it).
  Tensor cotangent(std::size_t i) const {
    const Type& t = fwd.type(fwd.outputs[i]);
    return i < outputs && i < dys.size() && dys[i] ? *dys[i] : full(t.shape, 0, t.dtype);
  }
  bool checked(std::size_t i) const { return i < dxs.size() && dxs[i] && is_floating(operands[i].dtype()); }
};

/// Elementwise against the forward's own VJP function `vjpName`.
void byAutodiff(const Site& c, const std::string& vjpName, const std::vector<std::string>& names) {
  std::vector<ir::ValueId> args;
  for (const Tensor& x : c.operands) args.push_back(x.id());
  for (std::size_t i = 0; i < c.fwd.outputs.size(); ++i)
    if (is_floating(c.fwd.type(c.fwd.outputs[i]).dtype)) args.push_back(c.cotangent(i).id());
  const std::vector<ir::ValueId> r = c.s.builder.create(ir::OpKind::Call, args, {}, {vjpName}, c.loc);
  std::vector<Tensor> custom, reference;
  std::vector<std::string> labels;
  std::size_t next = c.fwd.outputs.size(); // (y..., dx per floating parameter...)
  for (std::size_t i = 0; i < c.operands.size(); ++i) {
    if (!is_floating(c.operands[i].dtype())) continue;
    const Tensor dx = detail::wrap(c.s, r.at(next++));
    if (!c.checked(i)) continue;
    custom.push_back(*c.dxs[i]);
    reference.push_back(dx);
    labels.push_back(names.at(i));
  }
  if (custom.empty()) return;
  custom.insert(custom.end(), reference.begin(), reference.end());
  const Location loc = c.loc;
  debug_callback([labels, loc](const std::vector<Array>& v) { compareElementwise(v, labels, loc); }, custom);
}

/// For a forward without a derivative: <dx, v> from the VJP against the
/// central difference <dy, f(x + e v) - f(x - e v)> / 2e along a random v.
void byDifferences(const Site& c) {
  std::mt19937_64 rng(0x5eed);
  std::vector<Tensor> plus = c.operands, minus = c.operands;
  Tensor byVjp = full({}, 0, DType::f64), byDifference = full({}, 0, DType::f64);
  double eps = 1e-6;
  for (std::size_t i = 0; i < c.operands.size(); ++i)
    if (c.checked(i) && c.operands[i].dtype() == DType::f32) eps = 1e-2; // f32 differences need a larger step
  for (std::size_t i = 0; i < c.operands.size(); ++i) {
    if (!c.checked(i)) continue;
    Tensor v = cast(constant(detail::randomLike(c.operands[i].type(), rng)), c.operands[i].dtype());
    plus[i] = c.operands[i] + v * eps;
    minus[i] = c.operands[i] - v * eps;
    byVjp = byVjp + cast(sum(*c.dxs[i] * v), DType::f64);
  }
  auto callFwd = [&](const std::vector<Tensor>& args) {
    std::vector<ir::ValueId> ids;
    for (const Tensor& a : args) ids.push_back(a.id());
    return c.s.builder.create(ir::OpKind::Call, ids, {}, {c.fwdName}, c.loc);
  };
  const std::vector<ir::ValueId> yp = callFwd(plus), ym = callFwd(minus);
  for (std::size_t i = 0; i < c.outputs; ++i) {
    if (!is_floating(c.fwd.type(c.fwd.outputs[i]).dtype)) continue;
    Tensor diff = detail::wrap(c.s, yp[i]) - detail::wrap(c.s, ym[i]);
    byDifference = byDifference + cast(sum(c.cotangent(i) * diff), DType::f64) / (2 * eps);
  }
  const double rtol = eps > 1e-4 ? 5e-2 : 1e-4;
  const Location loc = c.loc;
  debug_callback(
      [loc, rtol](const std::vector<Array>& v) {
        const double a = v[0].item<double>(), b = v[1].item<double>();
        if (std::fabs(a - b) > rtol * std::max({std::fabs(a), std::fabs(b), 1e-12}))
          throw Error(fmt::format("custom_gradient{}: its VJP disagrees with central finite differences of its forward "
                                  "(which has no autodiff): along a random direction {:.9g} by the VJP, {:.9g} by "
                                  "differences",
                                  where(loc), a, b),
                      loc);
      },
      {byVjp, byDifference});
}

} // namespace

void checkCustomVjp(const std::string& fwdName, const std::vector<Tensor>& operands, std::size_t outputs,
                    const std::vector<std::optional<Tensor>>& dys, const std::vector<std::optional<Tensor>>& dxs,
                    const std::vector<std::string>& names, const Location& loc) {
  detail::TraceState& s = *detail::currentTrace();
  const Site site{s, *s.module->lookup(fwdName), fwdName, operands, outputs, dys, dxs, loc};
  std::string vjpName;
  try {
    vjpName = combinedVjp(s.module, fwdName);
  } catch (const Error&) {
    byDifferences(site); // the forward has an op without a derivative
    return;
  }
  byAutodiff(site, vjpName, names);
}

} // namespace adjit::autodiff
